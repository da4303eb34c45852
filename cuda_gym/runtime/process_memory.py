"""Another process's executable memory compared with the file it was mapped from.

Code loaded from a file can be changed in memory afterwards (made writable with mprotect and
overwritten, or written through /proc/self/mem, which ignores page protections): a check of the
file then says nothing of what runs from it. `mapped_code_intact` reads a mapping's bytes
through /proc/PID/mem and the file's through /proc/PID/map_files (the very file mapped, whatever
its name), from outside the process. Reading another process's memory takes ptrace rights over
it (root, or the same user where Yama allows a parent); where they are missing the answer is
None, never a guess.
"""

from __future__ import annotations

import os

from cuda_gym.runtime.perf_sampling import Mapping

_CHUNK = 1 << 20


def mapped_code_intact(pid: int, m: Mapping) -> bool | None:
    """Whether mapping `m` of process `pid` holds the bytes of its file at its offset.

    The part of the mapping past the file's end must be zeros. None: the process or the
    mapping is gone, or its memory cannot be read from here.
    """
    size = m.end - m.start
    try:
        file_fd = os.open(f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}", os.O_RDONLY)
    except OSError:
        return None
    try:
        mem_fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        os.close(file_fd)
        return None
    try:
        done = 0
        while done < size:
            n = min(_CHUNK, size - done)
            try:
                memory = os.pread(mem_fd, n, m.start + done)
            except OSError:
                return None
            if len(memory) != n:
                return None
            disk = os.pread(file_fd, n, m.offset + done)
            if memory[: len(disk)] != disk or memory[len(disk) :].count(0) != n - len(disk):
                return False
            done += n
        return True
    except OSError:
        return None
    finally:
        os.close(file_fd)
        os.close(mem_fd)
