import os
import signal
import subprocess
import sys
import time

import pytest

from cuda_gym.runtime import python_child_env, run_process


def test_captures_output_and_status():
    proc = run_process([sys.executable, "-c", "print('hi'); import sys; sys.exit(3)"], timeout_s=30)
    assert proc.stdout.strip() == "hi" and proc.returncode == 3 and not proc.ok
    assert proc.describe_failure() == "failed with exit status 3"


def test_timeout_kills_the_whole_process_group(tmp_path):
    marker = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(marker)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n"
    )
    start = time.monotonic()
    proc = run_process([sys.executable, "-c", code], timeout_s=3)
    assert proc.timed_out and time.monotonic() - start < 20
    assert "timed out" in proc.describe_failure(3)
    grandchild = int(marker.read_text())
    if not _ends(grandchild, within_s=5):
        raise AssertionError("grandchild survived the group kill")


def _ends(pid: int, within_s: float) -> bool:
    """Whether process `pid` is gone (or a zombie) within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A zombie still answers kill(0); check /proc for its state.
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_signal_death_is_named():
    proc = run_process(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
        timeout_s=30,
    )
    assert proc.signal_name == "SIGSEGV"
    assert "SIGSEGV" in proc.describe_failure()


def test_huge_output_is_bounded():
    proc = run_process(
        [sys.executable, "-c", "import sys; sys.stdout.write('x' * 5_000_000)"],
        timeout_s=30,
        max_output_chars=1000,
    )
    assert len(proc.stdout) < 1200 and "bytes of output cut" in proc.stdout


def test_stdin_data_reaches_the_child():
    proc = run_process(
        [sys.executable, "-c", "import sys; print(sys.stdin.read()[::-1])"],
        timeout_s=30,
        stdin_data=b"abc",
    )
    assert proc.stdout.strip() == "cba"


def test_child_env_makes_the_package_importable(tmp_path):
    env = python_child_env({"PATH": os.environ["PATH"]})
    proc = run_process(
        [sys.executable, "-c", "import cuda_gym.runtime; print('ok')"],
        timeout_s=60,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdout.strip() == "ok", proc.stderr


# A judge (this script) that starts a worker, then dies; the worker must die with it.
ORPHANING_PARENT = """
import sys, threading, time
from cuda_gym.runtime import run_process
child = (
    "import os, sys, time; from cuda_gym.runtime.process import die_with_parent; "
    "die_with_parent(); open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"
)
argv = [sys.executable, "-c", child, sys.argv[1]]
threading.Thread(target=run_process, args=(argv,), kwargs={"timeout_s": 300}, daemon=True).start()
time.sleep(60)
"""


def test_a_worker_dies_with_the_judge_that_started_it(tmp_path):
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", ORPHANING_PARENT, str(pid_file)])
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    os.kill(child, 0)  # alive while its judge is
    parent.kill()
    parent.wait(timeout=30)
    if not _ends(child, within_s=10):
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the worker outlived its judge")


def test_nice_lowers_the_child_and_what_it_starts():
    code = (
        "import os, subprocess, sys\n"
        "child = subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'],\n"
        "                       capture_output=True, text=True).stdout.strip()\n"
        "print(os.nice(0), child)\n"
    )
    mine = os.nice(0)
    proc = run_process([sys.executable, "-c", code], timeout_s=30, nice=7)
    assert proc.ok, proc.stderr
    assert proc.stdout.split() == [str(min(19, mine + 7))] * 2


def test_nice_lowers_the_childs_scheduling_group_where_the_kernel_has_one():
    # run_process gives every child a session, and so an autogroup, of its own: the CPU is
    # shared between the groups before niceness orders tasks inside one.
    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("no autogroup scheduling in this kernel")
    if os.geteuid() != 0:
        pytest.skip("the kernel lets a user change an autogroup's niceness once per 100 ms")
    code = "print(open('/proc/self/autogroup').read().split()[-1])"
    proc = run_process([sys.executable, "-c", code], timeout_s=30, nice=7)
    assert proc.ok, proc.stderr
    assert proc.stdout.strip() == "7"


def test_nice_zero_and_a_missing_program_keep_their_behaviour(monkeypatch):
    from cuda_gym.runtime import process

    proc = run_process([sys.executable, "-c", "import os; print(os.nice(0))"], timeout_s=30)
    assert proc.stdout.strip() == str(os.nice(0))
    monkeypatch.setattr(process, "_nice_program", lambda: None)
    assert process.niced(["cc", "-c"], 10) == ["cc", "-c"]
    with pytest.raises(OSError):
        run_process(["/nonexistent/compiler"], timeout_s=5)
