"""Another process's code in memory against its file, read from outside it."""

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_gym.runtime.perf_sampling import executable_maps
from cuda_gym.runtime.process_memory import mapped_code_intact, written_code

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


# Makes a page of libm's code writable, flips a byte and puts it back: the bytes are the file's
# again, the page is the process's own copy.
WRITES_LIBM = """
import ctypes, sys
ctypes.CDLL("libm.so.6")
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
lines = open("/proc/self/maps").read().splitlines()
start = next(int(l.split("-")[0], 16) for l in lines if "libm.so" in l and " r-xp " in l)
print("ready", flush=True)
if sys.stdin.readline().strip() == "write":
    assert libc.mprotect(start, 4096, 7) == 0
    byte = ctypes.c_ubyte.from_address(start + 64)
    value = byte.value
    byte.value = value ^ 0xFF
    byte.value = value
    libc.mprotect(start, 4096, 5)
print("done", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("write", [False, True])
def test_a_written_page_of_a_librarys_code_is_found_after_its_bytes_are_put_back(write):
    child = subprocess.Popen(
        [sys.executable, "-c", WRITES_LIBM],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        assert written_code(child.pid) == set()
        child.stdin.write("write\n" if write else "leave\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        found = written_code(child.pid)
    finally:
        child.kill()
        child.wait()
    if write:
        (path,) = found
        assert Path(path).name.startswith("libm")
    else:
        assert found == set()
    assert written_code(child.pid) == set()  # gone


def test_code_loaded_from_tmpfs_is_not_written_code(tmp_path):
    # (a tmpfs file's pages are dirty in the page cache: the sandbox's scratch is one)
    lib = library(tmp_path)
    shm = Path("/dev/shm") / f"cuda_gym_test_{os.getpid()}.so"
    shutil.copy(lib, shm)
    try:
        ctypes.CDLL(str(shm))
        assert written_code(os.getpid()) == set()
    finally:
        shm.unlink()
