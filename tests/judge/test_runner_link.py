"""The driver's link to a runner: messages both ways, polled (spin) or slept for."""

import array
import json
import os
import socket
import threading
import time

import pytest

from cuda_gym.judge import runner, untrusted
from cuda_gym.judge.untrusted import RunnerFailed, RunnerLink


def _later(delay_s: float, fn) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), fn()))
    thread.start()
    return thread


@pytest.mark.parametrize("spin_s", [0.0, 0.05])
def test_the_runner_receives_messages_and_descriptors_polled_or_not(spin_s):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_end, write_end = os.pipe()
    try:
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [read_end]))]
        # Sent while the receiver polls (5 ms in) and after polling gave up (80 ms in).
        for delay_s in (0.005, 0.08):
            sender = _later(
                delay_s, lambda: ours.sendmsg([json.dumps({"kind": "call"}).encode()], rights)
            )
            message, fds = runner._receive(theirs, spin_s)
            sender.join()
            assert message == {"kind": "call"} and len(fds) == 1
            os.write(write_end, b"x")
            assert os.read(fds[0], 1) == b"x"  # the very pipe, passed over
            os.close(fds[0])
            assert theirs.getblocking()  # left blocking for whatever comes next
        ours.close()
        assert runner._receive(theirs, spin_s) == (None, [])
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        theirs.close()


def test_spin_is_taken_only_from_a_plain_positive_number():
    assert runner._spin_s({"spin_s": 0.02}) == 0.02
    for bad in ({}, {"spin_s": None}, {"spin_s": "1"}, {"spin_s": -1}, {"spin_s": float("nan")}):
        assert runner._spin_s(bad) == 0.0


@pytest.mark.parametrize("spin_s", [0.0, 0.02])
def test_a_real_runner_answers_empty_calls_and_exits(tmp_path, spin_s):
    link = RunnerLink(tmp_path, dict(os.environ), 60.0, "candidate", None, spin_s)
    try:
        link.wait_started(60.0)
        for k in range(6):
            # Through a call's steps up to "done" (the ban's guard on every other one), then
            # the empty reply.
            message = {"call_id": -1 - k, "kind": "null", "banned": k % 2 == 1}
            reply, to_done_s, finish_s = link.timed_call(message)
            assert reply.call_id == -1 - k and reply.error is None and reply.violations == []
            assert 0 < to_done_s < 5 and 0 <= finish_s < 5
        assert link.sock.gettimeout() != 0  # not left polling
    finally:
        link.close()
    assert link.proc.poll() is not None


def test_a_silent_runner_times_out_after_polling(tmp_path):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = _fake_link(tmp_path, ours, spin_s=0.02)
    try:
        start = time.perf_counter()
        with pytest.raises(RunnerFailed, match="time"):
            link.receive(0.1)
        assert 0.1 <= time.perf_counter() - start < 1.0
        theirs.send(json.dumps({"call_id": 1}).encode())
        assert link.receive(0.1) == {"call_id": 1}
    finally:
        ours.close()
        theirs.close()


def _fake_link(tmp_path, ours, spin_s: float = 0.0) -> RunnerLink:
    link = RunnerLink.__new__(RunnerLink)  # no process: only the driver's end is tested
    link.sock, link.budget_s, link.spent_s, link.spin_s = ours, 10.0, 0.0, spin_s
    link.role, link.stage, link.work_dir = "candidate", "run", tmp_path
    link._kill = lambda: None
    return link


def _answer(theirs, done) -> threading.Thread:
    """The runner's side of one call: "done" made by `done(request)` (None: none), the reply."""

    def serve():
        request = json.loads(theirs.recv(1 << 16))
        message = done(request)
        if message is not None:
            theirs.send(json.dumps(message).encode())
        theirs.send(json.dumps(runner.empty_reply(request["call_id"])).encode())

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


def test_a_message_is_dated_by_its_send_not_by_its_reading(tmp_path):
    # The CPU watch splits a call at the runner's "done": a driver scheduled late (a busy
    # host) must not move the runner's steps after "done" into forward's time.
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setsockopt(socket.SOL_SOCKET, untrusted.SO_TIMESTAMPNS, 1)
    link = _fake_link(tmp_path, ours)
    try:
        before = time.monotonic_ns()
        theirs.send(json.dumps({"call_id": 1}).encode())
        sent = time.monotonic_ns()
        time.sleep(0.1)
        assert link.receive(1.0) == {"call_id": 1}
        assert before - 1_000_000 <= link.stamp_ns <= sent + 1_000_000  # (clocks read apart)
        assert time.monotonic_ns() - link.stamp_ns >= 100_000_000
    finally:
        ours.close()
        theirs.close()


def test_a_done_must_repeat_the_calls_nonce(tmp_path):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = _fake_link(tmp_path, ours)
    try:
        honest = _answer(
            theirs, lambda r: {"call_id": r["call_id"], "done": True, "nonce": r["nonce"]}
        )
        reply, _, _ = link.timed_call({"call_id": 1, "kind": "call"})
        honest.join()
        assert reply.call_id == 1 and link.done_ns is not None
        silent = _answer(theirs, lambda r: None)  # (a failed call: its reply alone)
        link.timed_call({"call_id": 9, "kind": "call"})
        silent.join()
        assert link.done_ns is None
        guessed = _answer(theirs, lambda r: {"call_id": r["call_id"], "done": True, "nonce": 7})
        with pytest.raises(RunnerFailed, match='"done" that is not this call'):
            link.timed_call({"call_id": 2, "kind": "call"})
        guessed.join()
    finally:
        ours.close()
        theirs.close()


def test_a_done_sent_before_its_call_fails_the_runner(tmp_path):
    # A runner that queues "done" for the next call right after its reply (the clock would
    # stop as soon as the call is sent, before any of its work).
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = _fake_link(tmp_path, ours)
    try:
        theirs.send(json.dumps({"call_id": 3, "done": True}).encode())
        with pytest.raises(RunnerFailed, match="nobody asked for"):
            link.timed_call({"call_id": 3, "kind": "call"})
    finally:
        ours.close()
        theirs.close()


def test_a_message_nested_beyond_the_parsers_depth_fails_the_runner_not_the_judge(tmp_path):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = _fake_link(tmp_path, ours)
    try:
        theirs.send(b"[" * 200_000)
        with pytest.raises(RunnerFailed, match="not a message"):
            link.receive(5.0)
    finally:
        ours.close()
        theirs.close()


def test_the_log_is_read_through_the_descriptor_opened_before_the_runner(tmp_path):
    # The runner replaces its log with a link to a file of the judge's: the tail is its own.
    from cuda_gym.judge.untrusted import log_tail, open_log

    secret = tmp_path / "secret.txt"
    secret.write_text("judge-only")
    fd = open_log(tmp_path / "runner.log")
    try:
        os.write(fd, b"Traceback: the runner's own words\n")
        (tmp_path / "runner.log").unlink()
        (tmp_path / "runner.log").symlink_to(secret)
        assert log_tail(fd, 100) == "Traceback: the runner's own words"
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        open_log(tmp_path / "runner.log")  # a link left in place is not followed
    assert secret.read_text() == "judge-only"
