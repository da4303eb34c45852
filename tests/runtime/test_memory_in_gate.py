"""A judge worker takes its device memory once in the gate and waits for it outside."""

import multiprocessing
import os
import time

from cuda_gym.judge import roles
from cuda_gym.runtime.device_gate import DeviceGate, MemoryLedger

GIB = 1 << 30


class _Rep:
    """The reporter's stage API, recorded."""

    def __init__(self) -> None:
        self.stage, self.seen = "start", []

    def enter(self, stage: str, why: str | None = None) -> None:
        self.stage = stage
        self.seen.append(stage)


def _timer(directory, holding, go, done) -> None:
    """Another worker: holds 8 GiB while working, then waits to time (the gate alone)."""
    ledger = MemoryLedger("cuda-test", 10 * GIB, directory)
    ledger.reserve(8 * GIB)
    holding.set()
    go.wait(10)
    gate = DeviceGate("cuda-test", directory)
    with gate.exclusive():  # would wait forever for a worker that waits for memory inside
        done.set()
    os._exit(0)  # its memory goes with it


def test_a_worker_waiting_for_memory_does_not_hold_the_gate(tmp_path, monkeypatch):
    ctx = multiprocessing.get_context("fork")
    holding, go, done = ctx.Event(), ctx.Event(), ctx.Event()
    timer = ctx.Process(target=_timer, args=(tmp_path, holding, go, done))
    timer.start()
    assert holding.wait(10)
    gate = DeviceGate("cuda-test", tmp_path)
    ledger = MemoryLedger("cuda-test", 10 * GIB, tmp_path)
    monkeypatch.setattr(roles, "_GATE", gate)
    monkeypatch.setattr(roles, "_LEDGER", ledger)
    monkeypatch.setattr(roles, "_WANTED", 6 * GIB)
    rep = _Rep()
    start = time.monotonic()
    with gate.shared():  # in the gate before the timer asks (else it may time and exit first)
        go.set()
        with roles._shared_with_memory(rep):  # 6 + 8 > 10: waits outside the gate for the timer
            assert gate.held == "shared" and ledger.held == 6 * GIB
    timer.join(10)
    assert done.is_set() and time.monotonic() - start < 10
    assert "memory" in rep.seen
    # Stepping out for a timer keeps only the base; coming back takes the rest again.
    ledger.set_base(GIB)
    assert ledger.shrink() == 5 * GIB and ledger.held == GIB
    with gate.shared():
        roles._take_memory(rep)
        assert ledger.held == 6 * GIB
    ledger.close()
    gate.close()


def test_open_gate_reserves_before_the_gate_unless_per_step(tmp_path, monkeypatch):
    import json
    import types

    from cuda_gym.runtime import device_gate

    monkeypatch.setenv("CUDA_GYM_GATE_DIR", str(tmp_path))
    monkeypatch.setattr(device_gate, "device_identity", lambda device: "cuda-test")
    shares = []  # JudgeConfig.memory_share, through the header
    monkeypatch.setattr(
        roles, "device_memory_capacity", lambda share=0.9: shares.append(share) or 10 * GIB
    )
    for per_step in (False, True):
        monkeypatch.setattr(roles, "_LEDGER", None)  # (put back after the test, as _GATE)
        monkeypatch.setattr(roles, "_GATE", None)
        monkeypatch.setattr(roles, "_WANTED", 0)
        header = types.SimpleNamespace(
            device="cuda",
            device_gate=True,
            gate_alone=False,
            device_bytes=3 * GIB,
            memory_per_step=per_step,
            memory_share=1.5,
        )
        rep = _Rep()
        with roles.open_gate(header, rep):
            held = json.loads((tmp_path / "cuda_gym_gate_cuda-test.memory").read_text())["held"]
            assert held[str(os.getpid())] == 3 * GIB
            assert (roles._LEDGER is not None) is per_step
            assert rep.seen.index("gate") > (rep.seen.index("memory") if not per_step else -1)
        roles._GATE.close()
        # (the default's ledger is released when the worker exits; here, by hand)
        device_gate.MemoryLedger("cuda-test", 10 * GIB, tmp_path).release()
    assert shares == [1.5, 1.5]
