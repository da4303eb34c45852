"""Another process's code in memory against its file, read from outside it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_gym.runtime.perf_sampling import executable_maps
from cuda_gym.runtime.process_memory import mapped_code_intact

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")

# Loads a library, then on "patch" flips a byte of one of its functions through
# /proc/self/mem (which ignores the page's protection), as code that rewrites itself would.
CHILD = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
address = ctypes.cast(lib.twice, ctypes.c_void_p).value
print("ready", flush=True)
if sys.stdin.readline().strip() == "patch":
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(address)
        byte = mem.read(1)[0]
        mem.seek(address)
        mem.write(bytes([byte ^ 0xFF]))
    print("patched", flush=True)
sys.stdin.readline()
"""


def library(tmp_path: Path) -> Path:
    src = tmp_path / "k.c"
    src.write_text("int twice(int x) { return 2 * x; }\n")
    lib = tmp_path / "libk.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(src), "-o", str(lib)], check=True)
    return lib


def child_with(lib: Path) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(lib)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    return child


def code_of(pid: int, lib: Path) -> list:
    return [m for m in executable_maps(pid) if m.path == str(lib)]


def test_code_as_loaded_is_intact_and_a_flipped_byte_is_seen(tmp_path):
    lib = library(tmp_path)
    child = child_with(lib)
    try:
        (mapping,) = code_of(child.pid, lib)
        intact = mapped_code_intact(child.pid, mapping)
        if intact is None:
            pytest.skip("this process may not read the child's memory")
        assert intact is True
        child.stdin.write("patch\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "patched"
        assert mapped_code_intact(child.pid, mapping) is False
        # (the system's libraries of the same process are untouched)
        libc = [m for m in executable_maps(child.pid) if "libc.so" in m.path]
        assert libc and all(mapped_code_intact(child.pid, m) for m in libc)
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(10)


def test_a_gone_process_is_not_a_verdict(tmp_path):
    lib = library(tmp_path)
    child = child_with(lib)
    (mapping,) = code_of(child.pid, lib)
    child.stdin.write("\n\n")
    child.stdin.close()
    child.wait(10)
    assert mapped_code_intact(child.pid, mapping) is None
