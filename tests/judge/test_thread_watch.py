"""The candidate worker's check for host threads that outlive ModelNew.forward."""

import threading
import time

from cuda_gym.judge.worker import _ThreadWatch


def test_a_thread_that_ends_after_the_call_is_deferred_work():
    watch = _ThreadWatch()
    worker = threading.Thread(target=time.sleep, args=(0.05,))
    worker.start()  # "inside forward"
    watch.sample()  # forward returned with the thread still running
    worker.join()
    # join() returns when the thread's Python work is done; the OS thread may linger a moment
    # (the worker checks after a pause, as here).
    deadline = time.monotonic() + 10
    while not watch.deferred() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watch.deferred()


def test_a_pool_thread_that_stays_is_allowed():
    watch = _ThreadWatch()
    stop = threading.Event()
    pool = threading.Thread(target=stop.wait)
    pool.start()
    watch.sample()
    assert not watch.deferred()
    stop.set()
    pool.join()


def test_a_thread_joined_inside_the_call_is_allowed():
    watch = _ThreadWatch()
    helper = threading.Thread(target=lambda: None)
    helper.start()
    helper.join()
    watch.sample()
    assert not watch.deferred()
