"""The judges' device-memory ledger: reservations across processes, in turn, freed at exit."""

import json
import multiprocessing
import os
import threading
import time

from cuda_gym.runtime.device_gate import MemoryLedger

GIB = 1 << 30


def _hold(directory, nbytes, held, release, done) -> None:
    ledger = MemoryLedger("cuda-test", 10 * GIB, directory)
    ledger.reserve(nbytes)
    held.set()
    release.wait(10)
    done.set()
    os._exit(0)  # no release: the ledger drops a dead process's share


def _start(ctx, directory, nbytes):
    held, release, done = ctx.Event(), ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(directory, nbytes, held, release, done))
    proc.start()
    return proc, held, release


def test_a_reservation_waits_until_it_fits_and_a_dead_holder_frees_its_share(tmp_path):
    ctx = multiprocessing.get_context("fork")
    proc, held, release = _start(ctx, tmp_path, 8 * GIB)
    assert held.wait(10)
    ledger = MemoryLedger("cuda-test", 10 * GIB, tmp_path)
    start = time.monotonic()
    release_later = ctx.Process(target=lambda: (time.sleep(0.5), release.set()))
    release_later.start()
    ledger.reserve(4 * GIB)  # 8 + 4 > 10: waits for the holder to exit
    waited = time.monotonic() - start
    proc.join(10)
    release_later.join(10)
    assert waited >= 0.4
    state = json.loads(ledger.path.read_text())
    assert state["held"] == {str(os.getpid()): 4 * GIB}
    ledger.close()
    assert json.loads(ledger.path.read_text())["held"] == {}


def test_small_reservations_fit_side_by_side(tmp_path):
    a = MemoryLedger("cuda-test", 10 * GIB, tmp_path)
    a.reserve(3 * GIB)
    a.reserve(3 * GIB)  # the same process adds to its share
    assert json.loads(a.path.read_text())["held"] == {str(os.getpid()): 6 * GIB}
    a.close()


def test_an_oversized_reservation_runs_alone(tmp_path):
    ledger = MemoryLedger("cuda-test", 10 * GIB, tmp_path)
    ledger.reserve(50 * GIB)  # nobody else holds any: it may go
    assert ledger.held == 50 * GIB
    ledger.close()


def test_the_oldest_waiter_goes_first(tmp_path):
    ledger = MemoryLedger("cuda-test", 10 * GIB, tmp_path)
    # pid 1 holds 2 GiB; a live process (this test's parent) waits in line for 9 GiB.
    state = {"held": {"1": 2 * GIB}, "waiting": [[os.getppid(), 9 * GIB]]}
    ledger.path.write_text(json.dumps(state))
    reserved = threading.Event()
    thread = threading.Thread(target=lambda: (ledger.reserve(GIB), reserved.set()), daemon=True)
    thread.start()
    assert not reserved.wait(0.5)  # 1 GiB would fit, but an older waiter is first in line
    ledger._update(lambda s: s["waiting"].pop(0))  # the older waiter leaves
    assert reserved.wait(5)
    assert json.loads(ledger.path.read_text())["held"][str(os.getpid())] == GIB
    ledger.close()


def test_a_worker_keeps_its_base_between_steps_and_tries_for_the_rest(tmp_path):
    ledger = MemoryLedger("cuda-test", 10 * GIB, tmp_path)
    # pid 1 (another worker) holds 6 GiB, working: 6 GiB of ours does not fit beside it.
    ledger.path.write_text(json.dumps({"held": {"1": 6 * GIB}, "base": {"1": GIB}}))
    assert not ledger.try_reserve(6 * GIB) and ledger.held == 0
    assert ledger.try_reserve(3 * GIB)
    ledger.set_base(GIB)
    assert ledger.shrink() == 2 * GIB and ledger.held == GIB
    state = json.loads(ledger.path.read_text())
    assert state["held"][str(os.getpid())] == GIB and state["base"][str(os.getpid())] == GIB
    # The other worker steps out to its base: now the whole 6 GiB may go beside it (and even
    # more than fits, as nobody else is working).
    ledger._update(lambda s: s["held"].update({"1": GIB}))
    assert ledger.try_reserve(12 * GIB) and ledger.held == 13 * GIB
    ledger.close()
    state = json.loads(ledger.path.read_text())
    assert str(os.getpid()) not in state["held"] and str(os.getpid()) not in state["base"]


def test_a_try_does_not_pass_a_waiter(tmp_path):
    ledger = MemoryLedger("cuda-test", 10 * GIB, tmp_path)
    state = {"held": {}, "waiting": [[os.getppid(), 9 * GIB]]}
    ledger.path.write_text(json.dumps(state))
    assert not ledger.try_reserve(GIB)
    ledger.close()
