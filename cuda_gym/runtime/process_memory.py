"""Another process's executable memory compared with the file it was mapped from.

Code loaded from a file can be changed in memory afterwards (made writable with mprotect and
overwritten, or written through /proc/self/mem, which ignores page protections): a check of the
file then says nothing of what runs from it. The bytes of a mapping are read through
/proc/PID/mem and its file's through /proc/PID/map_files (the very file mapped, whatever its
name), from outside the process, and compared by SHA-256 digests of 1 MiB chunks (hashlib and
the reads let go of the GIL: a check in a thread of the judge's does not hold up its others).
Reading another process's memory takes ptrace rights over it (root, or the same user where
Yama allows a parent); where they are missing the answer is None, never a guess.
"""

from __future__ import annotations

import hashlib
import os

from cuda_gym.runtime.perf_sampling import Mapping

CHUNK = 1 << 20


def file_digests(pid: int, m: Mapping) -> tuple[bytes, ...] | None:
    """Digests of what mapping `m` of `pid` should hold: its file from its offset, by chunk.

    Past the file's end a mapping holds zeros. None: the mapping or the process is gone.
    """
    size = m.end - m.start
    try:
        fd = os.open(f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}", os.O_RDONLY)
    except OSError:
        return None
    try:
        digests = []
        for done in range(0, size, CHUNK):
            n = min(CHUNK, size - done)
            data = os.pread(fd, n, m.offset + done)
            digests.append(hashlib.sha256(data + bytes(n - len(data))).digest())
        return tuple(digests)
    except OSError:
        return None
    finally:
        os.close(fd)


def memory_matches(pid: int, m: Mapping, digests: tuple[bytes, ...]) -> bool | None:
    """Whether mapping `m` of `pid` holds the bytes `digests` were made of (`file_digests`).

    None: the process or the mapping is gone, or its memory cannot be read from here.
    """
    size = m.end - m.start
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        return None
    try:
        for k, done in enumerate(range(0, size, CHUNK)):
            n = min(CHUNK, size - done)
            memory = os.pread(fd, n, m.start + done)
            if len(memory) != n:
                return None
            if hashlib.sha256(memory).digest() != digests[k]:
                return False
        return True
    except (OSError, IndexError):
        return None
    finally:
        os.close(fd)


def mapped_code_intact(pid: int, m: Mapping) -> bool | None:
    """Whether mapping `m` of process `pid` holds the bytes of its file at its offset."""
    digests = file_digests(pid, m)
    return None if digests is None else memory_matches(pid, m, digests)


def written_code(pid: int) -> set[str]:
    """Files of `pid`'s executable mappings that hold pages written since they were mapped.

    A written page of a private file mapping becomes the process's own copy (smaps counts it
    as Anonymous) and stays so after its bytes are put back, until the mapping goes. (Not
    Private_Dirty: a tmpfs file's pages are dirty in the page cache, written or not.) Code of
    a position-independent library is never written by the loader; a library's code changed in
    memory (another library's copied over it, so that its samples would be placed as the
    trusted file's) is. Empty if the process is gone.
    """
    try:
        with open(f"/proc/{pid}/smaps", "rb") as f:
            text = f.read()
    except OSError:
        return set()
    found: set[str] = set()
    path = None
    for line in text.split(b"\n"):
        if not line:
            continue
        if line[0] in b"0123456789abcdef" and b"-" in line.split(b" ", 1)[0]:
            fields = line.split(None, 5)
            executable = len(fields) > 1 and b"x" in fields[1]
            named = len(fields) == 6 and fields[5].startswith(b"/")
            path = fields[5].decode(errors="replace") if executable and named else None
        elif path is not None and line.startswith(b"Anonymous:"):
            if line.split()[1] != b"0":
                found.add(path)
    return found
