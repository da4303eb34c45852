"""benchmarks.rl_load: the RL batch it builds (fast) and one tiny run on the CPU (slow)."""

import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks.rl_load import (
    SHM,
    CpuSampler,
    GpuSampler,
    ProgramCpu,
    _Cut,
    device_gib,
    device_phases,
    leftovers,
    main,
    phase_spreads,
    program_of,
    spread,
)
from benchmarks.rl_workload import (
    BASES,
    DEFAULT_MIX,
    STYLES,
    make_batch,
    solution_files,
    split_counts,
)
from cuda_gym.judge.judge import static_violations
from cuda_gym.judge.plain_build import uses_torch
from cuda_gym.tasks import builtin_task


def test_labels_follow_the_mix_and_a_tiny_batch_holds_every_label():
    assert split_counts(100, DEFAULT_MIX) == {"honest": 70, "wrong": 20, "crash": 5, "hang": 5}
    assert split_counts(256, DEFAULT_MIX) == {"honest": 179, "wrong": 51, "crash": 13, "hang": 13}
    assert split_counts(6, DEFAULT_MIX) == {"honest": 3, "wrong": 1, "crash": 1, "hang": 1}
    assert split_counts(4, DEFAULT_MIX) == {"honest": 1, "wrong": 1, "crash": 1, "hang": 1}
    assert split_counts(3, {"honest": 1.0, "hang": 0.0}) == {"honest": 3, "hang": 0}


def test_every_task_and_every_sample_is_new_to_the_cache():
    batch = make_batch(4, 3, "cpu", seed=1, salt="a")
    hashes = {s.task.content_hash for s in batch}
    builtin = {builtin_task(b).for_device("cpu").content_hash for b in BASES}
    assert len(hashes) == 4 and not hashes & builtin
    kernels = [tuple(sorted(s.files.items())) for s in batch]
    assert len(set(kernels)) == len(batch)
    assert make_batch(4, 3, "cpu", seed=1, salt="a")[5].files == batch[5].files  # reproducible
    other = make_batch(4, 3, "cpu", seed=1, salt="b")
    assert not {s.task.content_hash for s in other} & hashes


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_generated_solution_passes_the_static_checks(device, tmp_path):
    for base in BASES:
        for behaviour in ("fast", "naive", "wrong", "crash", "hang"):
            for style in STYLES:
                files = solution_files(base, device, behaviour, style, "0123abcd")
                root = tmp_path / f"{device}-{base}-{behaviour}-{style}"
                for rel, data in files.items():
                    (root / rel).parent.mkdir(parents=True, exist_ok=True)
                    (root / rel).write_bytes(data)
                source = files["model_new.py"].decode()
                assert static_violations(source, root / "kernels") == [], (base, behaviour, style)
                kernels = {k: v for k, v in files.items() if k.startswith("kernels/")}
                # plain: no torch headers (judge/plain_build.py); ext: a torch binding
                assert (style == "inline") == (not kernels)
                if kernels:
                    assert uses_torch(kernels) == (style == "ext")


def test_spread_is_nearest_rank():
    assert spread([3.0, 1.0, 2.0]) == {"n": 3, "p50": 2.0, "p95": 3.0, "max": 3.0}
    assert spread([]) == {"n": 0, "p50": None, "p95": None, "max": None}


def test_device_gib_reads_the_reservation_the_drivers_peak_and_the_use():
    flags = {
        "device_bytes_reserved": 12 << 30,
        "device_peak_bytes": {"candidate": {"allocated": 5 << 30, "reserved": 6 << 30}},
        "device_bytes_used": 9 << 30,
    }
    assert device_gib(flags) == {"reserved": 12.0, "driver_peak": 6.0, "used": 9.0}
    assert device_gib({"device_bytes_reserved": 1 << 30}) == {
        "reserved": 1.0,
        "driver_peak": None,
        "used": None,
    }
    assert device_gib({}) is None  # the CPU device


def test_device_phases_read_the_drivers_memory_by_phase_and_spread_over_judgements():
    gib = 1 << 30
    flags = {
        "device_memory_by_phase": {
            "trials": {"peak": 6 * gib, "reserved": 3 * gib, "allocated": 2 * gib},
            "recheck": {"peak": 9 * gib, "reserved": 4 * gib, "allocated": 4 * gib},
        }
    }
    phases = device_phases(flags)
    assert phases == {
        "trials": {"peak": 6.0, "allocated": 2.0},
        "recheck": {"peak": 9.0, "allocated": 4.0},
    }
    assert device_phases({}) is None
    spreads = phase_spreads([phases, None, {"trials": {"peak": 8.0, "allocated": 1.0}}])
    assert spreads["trials"]["peak"] == {"n": 2, "p50": 6.0, "p95": 8.0, "max": 8.0}
    assert spreads["recheck"]["allocated"]["n"] == 1 and spreads["timing"]["peak"]["n"] == 0


def test_cpu_sampler_sees_a_busy_core():
    began = time.monotonic()
    with CpuSampler() as cpu:
        end = time.monotonic() + 2.5
        start = time.process_time()
        while time.monotonic() < end or time.process_time() - start < 1.0:  # one core busy
            pass
        busy = time.process_time() - start
        time.sleep(0.6)  # a last tick of the split after the work
    elapsed = time.monotonic() - began
    report = cpu.report()
    assert report["cores"] == os.cpu_count()
    # this process's busy seconds, as a share of every core over the window (idle tail included)
    assert 0.9 * busy / elapsed / os.cpu_count() <= report["busy_fraction"] <= 1
    assert 0 <= report["saturated_share"] <= 1 and report["interval_p50"] <= 1
    assert report["by_program_s"]["python: this process (service, judge threads)"] >= 0.9


def test_the_cpu_split_names_programs_and_counts_a_child_that_exits(tmp_path):
    # One second of CPU however loaded the machine, then idle until a tick has seen it all; run
    # under a name of its own (the link's), apart from every other Python on the machine.
    busy = "import time\nwhile time.process_time() < 1.0: pass\ntime.sleep(0.5)\n"
    probe = tmp_path / "cpu_split_probe"
    probe.symlink_to(sys.executable)
    programs = ProgramCpu()
    programs.tick()
    programs.seconds.clear()
    child = subprocess.Popen([str(probe), "-c", busy])
    while child.poll() is None:
        programs.tick()
        time.sleep(0.1)
    assert 0.9 <= programs.seconds["cpu_split_probe"] <= 1.3
    assert program_of(1, "cc1plus", "/usr/lib/gcc/x86_64-linux-gnu/13/cc1plus -quiet") == "cc1plus"
    runner = "/venv/bin/python3 -I /x/cuda_gym/judge/runner.py prebuild /s /r.json"
    assert program_of(1, "python3", runner).startswith("python: build stage")


def _proc_entry(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read()
    except OSError as err:
        return repr(err)


def test_leftovers_finds_a_stray_worker_and_a_shm_file(tmp_path):
    since = time.time()
    child = subprocess.Popen(["sleep", "60"], cwd=tmp_path)
    shm = SHM / f"cuda_gym_rl_load_test_{os.getpid()}_x"
    try:
        if SHM.is_dir():
            shm.touch()
        # a scan of /proc can miss a process that is starting: look again for a few seconds
        deadline = time.monotonic() + 10
        while True:
            left = leftovers(since)
            seen = any(p.startswith(f"{child.pid}: sleep") for p in left["processes"])
            if seen or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert seen, (child.pid, left, _proc_entry(child.pid))
        assert shm.name in left["shm"] or not SHM.is_dir()
    finally:
        child.kill()
        child.wait()
        shm.unlink(missing_ok=True)
    left = leftovers(since)
    assert not any(p.startswith(f"{child.pid}:") for p in left["processes"])
    assert shm.name not in left["shm"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a few minutes; far more on a machine whose judges queue
def test_a_tiny_cpu_run_judges_every_sample_as_labelled(tmp_path):
    out = tmp_path / "rl_load.json"
    argv = "--device cpu --tasks 1 --samples 4 --levels 4 --styles plain --skip-isolation"
    argv += " --run-timeout-s 30 --timed-runs 2 --warmup-runs 0 --correctness-trials 2"
    argv += f" --baselines eager --work-dir {tmp_path} --out {out}"
    main(argv.split())
    report = json.loads(out.read_text())
    assert report["device"]["device"] == "cpu" and report["tasks"] == 1
    (level,) = report["levels"]
    assert level["labels"] == {"honest": 1, "wrong": 1, "crash": 1, "hang": 1}
    assert level["judged"] == 4 and level["lost"] == 0
    assert level["all_as_labelled"], level["mismatches"]
    assert level["judged_per_min"] > 0
    assert all(level["latency_s"][k]["n"] >= 1 for k in ("honest", "wrong", "crash", "hang"))
    assert {"build", "candidate", "probe"} <= set(level["stage_s"])
    assert level["gpu"]["busy_fraction"] is None
    assert 0 < level["cpu"]["busy_fraction"] <= 1 and level["cpu"]["cores"] >= 1
    assert level["worker_cpu_s"]["candidate"]["n"] == 4  # every judgement's driver and runner
    assert level["worker_cpu_s"]["candidate"]["p50"] > 0.5  # a runner imports torch
    assert level["leftovers"]["processes"] == [] and level["leftovers"]["shm"] == []
    assert level["leftovers_after_zygotes_closed"] == []
    gate = level["gate"]  # the workers' gate trace: the honest one timed alone
    assert gate["processes"] >= 4 and gate["exclusive_holds_s"]["n"] >= 1
    assert gate["seconds"]["alone"] > 0 and "timing" in gate["alone_by_stage"]
    assert len(level["records"]) == 4


def test_a_run_stopped_by_a_signal_hands_over_what_has_ended():
    seen = []
    ended = [{"index": 0, "label": "honest", "finished_at_s": 3.0}]
    with GpuSampler("cpu") as gpu, CpuSampler() as cpu:
        cut = _Cut(seen.append, gpu, cpu, lambda: (ended, 2), time.monotonic())
        with pytest.raises(KeyboardInterrupt):  # still stops the run, once reported
            with cut:
                raise KeyboardInterrupt
    (run,) = seen
    assert run["records"] == ended and run["in_flight"] == 2 and run["elapsed_s"] >= 0
    assert "busy_fraction" in run["cpu"] and "busy_fraction" in run["gpu"]
    with GpuSampler("cpu") as gpu, CpuSampler() as cpu:
        with _Cut(seen.append, gpu, cpu, lambda: (ended, 0), time.monotonic()):
            pass  # a run that ends by itself reports through its caller
    assert len(seen) == 1
