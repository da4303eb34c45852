"""Many envs in one process: judge slots, and slow judge calls never holding up cheap tools."""

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import cuda_gym  # noqa: F401  (registers CudaKernel-v0)
from cuda_gym.errors import ConfigError
from cuda_gym.runtime.slots import JudgeSlots, SlotSizes, default_slot_sizes, judge_slots
from tests.fakes import ScriptedJudge
from tests.solutions import TASK_ID


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def test_slots_bound_concurrency_and_report_waits():
    slots = JudgeSlots(SlotSizes(timed=2, untimed=3))
    running = {True: 0, False: 0}
    peak = {True: 0, False: 0}
    waits = []
    lock = threading.Lock()

    def job(timed):
        with slots.hold(timed=timed) as waited:
            with lock:
                running[timed] += 1
                peak[timed] = max(peak[timed], running[timed])
            time.sleep(0.05)
            with lock:
                running[timed] -= 1
        waits.append(waited)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(job, [True] * 8 + [False] * 8))
    assert peak == {True: 2, False: 3}
    assert max(waits) > 0 and min(waits) >= 0
    assert slots.stats()["timed_running"] == 0 and slots.stats()["untimed_waiting"] == 0


def test_slot_is_released_when_the_call_raises():
    slots = JudgeSlots(SlotSizes(timed=1, untimed=1))
    with pytest.raises(RuntimeError):
        with slots.hold(timed=True):
            raise RuntimeError("judge failed")
    with slots.hold(timed=True) as waited:
        assert waited < 1.0


def test_envs_with_the_same_settings_share_one_limit():
    assert judge_slots("cpu", SlotSizes(1, 2)) is judge_slots("cpu", SlotSizes(1, 2))
    assert judge_slots("cpu", SlotSizes(1, 2)) is not judge_slots("cpu", SlotSizes(2, 2))
    a = gym.make("CudaKernel-v0", device="cpu", task=TASK_ID, timed_judge_slots=3)
    b = gym.make("CudaKernel-v0", device="cpu", task=TASK_ID, timed_judge_slots=3)
    assert a.unwrapped.judge.slots is b.unwrapped.judge.slots
    assert a.unwrapped.judge.slots.sizes.timed == 3
    assert default_slot_sizes("cuda", gpu_count=2) == SlotSizes(timed=16, untimed=8)
    assert default_slot_sizes("cpu").timed == max(1, os.cpu_count() or 1)
    a.close()
    b.close()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_bad_slot_settings_raise(value):
    with pytest.raises(ConfigError, match="timed_judge_slots must be a positive integer"):
        gym.make("CudaKernel-v0", device="cpu", task=TASK_ID, timed_judge_slots=value)


def test_judge_wait_is_reported_in_info():
    judge = ScriptedJudge("cpu")
    env = gym.make("CudaKernel-v0", device="cpu", task=TASK_ID, judge=judge)
    env.reset(seed=0)
    *_, info = env.step(call("list_files"))
    assert info["judge_wait_s"] == 0.0 and judge.calls == []
    *_, info = env.step(call("run"))
    assert info["tool_results"][0]["judge_wait_s"] == 0.0
    assert info["judge_wait_s"] == info["tool_results"][0]["judge_wait_s"]
    assert [(kind, timing) for kind, _, timing in judge.calls] == [("evaluate", False)]
    env.close()


def test_slow_judge_calls_never_hold_up_other_envs_cheap_tools():
    """Three envs wait in slow judge calls while ten others read files through astep.

    The event loop's default executor is cut to two threads: envs that shared it (the old
    asyncio.to_thread) would queue their cheap reads behind the three slow steps. Each env
    has its own thread, so every read returns while the slow steps are still running.
    """
    judge = ScriptedJudge("cpu", delay_s=3.0)

    def make():
        return gym.make("CudaKernel-v0", device="cpu", task=TASK_ID, judge=judge).unwrapped

    slow_envs = [make() for _ in range(3)]
    cheap_envs = [make() for _ in range(10)]

    async def main():
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))
        for env in slow_envs + cheap_envs:
            await env.areset(seed=0)
        slow = [asyncio.ensure_future(env.astep(call("run"))) for env in slow_envs]
        await asyncio.sleep(0.5)  # the slow steps are now inside the judge
        cheap = await asyncio.gather(
            *(
                env.astep([call("read_file", path="model.py"), call("list_files")])
                for env in cheap_envs
            )
        )
        pending_after_cheap = sum(not task.done() for task in slow)
        return cheap, pending_after_cheap, await asyncio.gather(*slow)

    try:
        cheap, pending, slow = asyncio.run(main())
    finally:
        for env in slow_envs + cheap_envs:
            env.close()
    assert all("class Model" in obs for obs, *_ in cheap)
    assert pending == 3, "cheap tools waited for the slow judge calls"
    for obs, _reward, terminated, truncated, _info in slow:
        assert obs.startswith("FAIL") and not terminated and not truncated


def test_a_judgement_holds_no_device_slot_while_it_builds(monkeypatch, tmp_path):
    """With one device slot, a judgement still compiling does not keep a built one waiting."""
    from cuda_gym.judge import Judge, JudgeConfig
    from cuda_gym.tasks import builtin_task

    slots = JudgeSlots(SlotSizes(timed=1, untimed=1))
    judge = Judge(JudgeConfig(device="cpu", cache_dir=str(tmp_path / "cache")))
    release = threading.Event()
    slot_holders_while_building = []

    def build_all(self, snap, tmp, verdict, reference_as_candidate, task):
        if (snap / "model_new.py").read_text() == "slow":
            slot_holders_while_building.append(slots.stats()["timed_running"])
            assert release.wait(30)
        return "source", None, None

    def on_device(self, task, snap, tmp, verdict, *built, **kw):
        verdict.correct = True

    monkeypatch.setattr(Judge, "_build_all", build_all)
    monkeypatch.setattr(Judge, "_judge_on_device", on_device)
    task = builtin_task(TASK_ID)
    dirs = {}
    for name in ("slow", "quick"):
        dirs[name] = tmp_path / name
        dirs[name].mkdir()
        (dirs[name] / "model_new.py").write_text(name)

    def judge_one(name):
        return judge.evaluate(
            task, dirs[name], timing=True, device_slot=lambda: slots.hold(timed=True)
        )

    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(judge_one, "slow")
        while not slot_holders_while_building and not slow.done():
            time.sleep(0.01)
        assert not slow.done(), slow.result()
        quick = pool.submit(judge_one, "quick").result(timeout=30)
        assert not slow.done()  # still building: the quick one went through the only slot
        release.set()
        slow = slow.result(timeout=30)
    assert slot_holders_while_building == [0]
    assert quick.correct and slow.correct
    assert quick.stage_times_s["wait.slot"] < 5 and quick.waited_s() < 5
