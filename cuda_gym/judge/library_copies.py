"""Is a shared object the solution "built" really a copy of a library the machine already has?

The judge counts a library as the solution's own code (cuda_gym.judge.cpu_time) when its build
stage or its runner produced it, and those run the solution's code: an import that copies a
BLAS library (a system one, NumPy's OpenBLAS) beside its extension and renames it like an
extension module would otherwise pass off BLAS's compute as the solution's. So the code of
every library under the trusted trees (the system's library folders, this Python's prefixes
and site-packages folders) is hashed once into an index, a 256-byte block per KiB, and a built
library that holds many of one library's blocks is that library's copy.

A built library is searched at every byte offset of its code (a rolling hash of every 256-byte
window), not only at the offsets the copied library had: a copy moved by a few bytes (an ELF
rewritten with its segments shifted, a library embedded in another's text) is found alike, and
so is a slice of one (a BLAS's compute kernels without the rest). Patching bytes here and there
only loses the blocks patched. Honest extensions share at most a handful of blocks with any
library (pybind11's and the C++ runtime's inline code; at most 10 in 65 local builds, where a
copy of a BLAS kernel is tens), so MIN_BLOCKS of them make a copy, whatever else the built
library holds (padding one's own code does not dilute it).

Not seen: code the library decrypts or writes into its own pages when it runs (the index reads
files), which only a check of the runner's memory would find.

The index lives in the judge's cache (`library_pages/`, written by trusted processes only and
sealed with the cache's HMAC key), keyed by the path, size and modification time of every
library it covers: a library installed later makes a new index.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import mmap
import os
import site
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuda_gym.judge.baselines import integrity_key, seal, unseal

BLOCK = 256  # bytes of code hashed together
INDEX_STRIDE = 1024  # the index keeps one block per KiB of each trusted library's code
# A built library is a copy when this many distinct indexed blocks of one trusted library are
# found in its code (a KiB of the library's code each); blocks of one repeated 8-byte word
# (padding) are left out on both sides.
MIN_BLOCKS = 24
INDEX_VERSION = "v3"
INDEX_FOLDER = "library_pages"
_PT_LOAD, _PF_X = 1, 1
# Folders whose shared objects the sandbox can read and a solution could copy.
SYSTEM_LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/usr/local", "/lib", "/lib64", "/opt")
# The block hash: sum of byte[j] * BASE**j over the block, modulo 2**64, then mixed. Being a
# polynomial, it rolls: every window of a built library's code costs a few operations.
_BASE = np.uint64(0x9E3779B97F4A7C15)
_CHUNK = 1 << 20  # bytes of a built library's code hashed at a time


def _inverse(a: int) -> int:
    """The inverse of odd `a` modulo 2**64 (Newton's iteration)."""
    x = a
    for _ in range(6):
        x = x * (2 - a * x) % (1 << 64)
    return x


@functools.lru_cache(maxsize=1)
def _powers() -> tuple[np.ndarray, np.ndarray]:
    """BASE**k and BASE**-k modulo 2**64, for k below _CHUNK + BLOCK."""
    n = _CHUNK + BLOCK
    with np.errstate(over="ignore"):
        up = np.cumprod(np.full(n, _BASE, dtype=np.uint64))
        down = np.cumprod(np.full(n, np.uint64(_inverse(int(_BASE))), dtype=np.uint64))
    one = np.ones(1, dtype=np.uint64)
    return np.concatenate([one, up[:-1]]), np.concatenate([one, down[:-1]])


def _mix(h: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint64(31))
        h = h * np.uint64(0xBF58476D1CE4E5B9)
        return h ^ (h >> np.uint64(29))


def _executable_ranges(data: bytes | mmap.mmap) -> list[tuple[int, int]]:
    """[start, end) file offsets of a 64-bit little-endian ELF file's executable segments."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    entsize, count = struct.unpack_from("<HH", data, 0x36)
    found = []
    for k in range(count):
        at = phoff + k * entsize
        if at + 56 > len(data):
            break
        p_type, p_flags, p_offset = struct.unpack_from("<IIQ", data, at)
        p_filesz = struct.unpack_from("<Q", data, at + 32)[0]
        if p_type == _PT_LOAD and p_flags & _PF_X:
            found.append((p_offset, min(len(data), p_offset + p_filesz)))
    return found


def index_blocks(data: bytes | mmap.mmap) -> np.ndarray:
    """Hashes of the BLOCK-byte blocks at INDEX_STRIDE-aligned file offsets of an ELF's code.

    Sorted and unique: what the index keeps of a trusted library. None for a file that is not
    a 64-bit little-endian ELF object, nor for a block of one repeated 8-byte word.
    """
    found = []
    powers = _powers()[0][:BLOCK]
    for start, end in _executable_ranges(data):
        start = -(-start // INDEX_STRIDE) * INDEX_STRIDE
        count = (end - start - BLOCK) // INDEX_STRIDE + 1
        for first in range(0, max(0, count), 4096):
            rows = min(4096, count - first)
            raw = np.frombuffer(
                data, np.uint8, count=(rows - 1) * INDEX_STRIDE + BLOCK,
                offset=start + first * INDEX_STRIDE,
            )
            block = np.lib.stride_tricks.as_strided(raw, (rows, BLOCK), (INDEX_STRIDE, 1))
            plain = (block[:, 8:] == block[:, :-8]).all(axis=1)
            with np.errstate(over="ignore"):
                hashed = (block.astype(np.uint64) * powers).sum(axis=1, dtype=np.uint64)
            found.append(_mix(hashed)[~plain])
    if not found:
        return np.empty(0, dtype=np.uint64)
    return np.unique(np.concatenate(found))


def window_hashes(data: bytes | mmap.mmap) -> Iterator[np.ndarray]:
    """Hashes of every BLOCK-byte window of a file, at every byte offset.

    The whole file, not only the segments its program headers call executable: headers can
    be rewritten once the file is loaded (or a segment made executable with mprotect), and
    the code is still there. A chunk at a time (_CHUNK bytes); windows of one repeated 8-byte
    word are left out. A window at an INDEX_STRIDE-aligned offset hashes as `index_blocks`
    does.
    """
    up, down = _powers()
    end = len(data)
    for at in range(0, end - BLOCK + 1, _CHUNK):
        n = min(_CHUNK + BLOCK - 1, end - at)
        code = np.frombuffer(data, np.uint8, count=n, offset=at)
        prefix = np.zeros(n + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.cumsum(code.astype(np.uint64) * up[:n], out=prefix[1:])
            hashed = (prefix[BLOCK:] - prefix[:-BLOCK]) * down[: n - BLOCK + 1]
        same = np.zeros(n - 7, dtype=np.int64)
        np.cumsum(code[8:] == code[:-8], out=same[1:])
        plain = same[BLOCK - 8 :] - same[: n - BLOCK + 1] == BLOCK - 8
        yield _mix(hashed)[~plain]


@dataclass(frozen=True)
class Copy:
    """A built library found to be a trusted library's copy."""

    source: str  # the trusted library's path
    shared: int  # the trusted library's indexed blocks (a KiB of its code each) found
    blocks: int  # KiB of the built library (all of the file is searched)

    def describe(self, name: str) -> str:
        """One line saying that `name` is this copy."""
        return (
            f"{name} is a copy of {self.source} ({self.shared} KiB-blocks of that library's code"
            f" found in its {self.blocks} KiB)"
        )


class LibraryIndex:
    """Code-block hashes of the trusted trees' libraries, and which library each came from."""

    def __init__(self, hashes: np.ndarray, owners: np.ndarray, paths: list[str]) -> None:
        """`hashes` sorted (as `build_index` makes them, and the file keeps them)."""
        self.hashes = hashes
        self.owners = owners
        self.paths = paths

    def shared(self, data: bytes | mmap.mmap) -> dict[int, int]:
        """Indexed blocks found anywhere in `data`'s code: {library number: distinct blocks}."""
        if not len(self.hashes):
            return {}
        found = []
        for windows in window_hashes(data):
            at = np.searchsorted(self.hashes, windows)
            at[at >= len(self.hashes)] = 0
            found.append(at[self.hashes[at] == windows])
        if not found:
            return {}
        owners, counts = np.unique(
            self.owners[np.unique(np.concatenate(found))], return_counts=True
        )
        return dict(zip(owners.tolist(), counts.tolist()))

    def copy_of(self, data: bytes | mmap.mmap) -> Copy | None:
        """The trusted library `data` (a shared object's bytes) copies, or None."""
        shared = self.shared(data)
        if not shared:
            return None
        owner = max(shared, key=shared.__getitem__)
        if shared[owner] < MIN_BLOCKS:
            return None
        return Copy(self.paths[owner], shared[owner], -(-len(data) // INDEX_STRIDE))

    def copy_of_file(self, path: Path) -> Copy | None:
        """`copy_of` for a file (read-only, by mapping it)."""
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return None
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return self.copy_of(data)


def trusted_roots() -> list[str]:
    """The folders whose libraries count as the machine's (a solution can read, not write).

    The system's library folders, this Python's prefixes and its site-packages folders: not
    every `sys.path` entry (the current folder is one, and under /tmp it would hold other
    judgements' builds, which a later identical build would then seem to copy).
    """
    roots = {*SYSTEM_LIBRARY_DIRS, sys.prefix, sys.base_prefix, sys.exec_prefix}
    with contextlib.suppress(AttributeError):  # (site's functions are missing in a few venvs)
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    roots.update(p for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages"))
    return sorted({str(Path(r).resolve()) for r in roots if os.path.isdir(r)})


def _libraries(roots: list[str], skip: tuple[str, ...] = ()) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of each shared object under `roots` (each file once).

    Folders under `skip` (the judge's cache, where solutions' builds are kept) are left out.
    """
    skip = tuple(str(Path(p).resolve()) for p in skip)
    seen: dict[tuple[int, int], tuple[str, int, int]] = {}
    for root in roots:
        for folder, dirs, names in os.walk(root):
            if skip:
                dirs[:] = [d for d in dirs if not os.path.join(folder, d).startswith(skip)]
            for name in names:
                if ".so" not in name:
                    continue
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    st = os.stat(path)
                    if st.st_size >= MIN_BLOCKS * INDEX_STRIDE and os.path.isfile(path):
                        seen.setdefault((st.st_dev, st.st_ino), (path, st.st_size, st.st_mtime_ns))
    return sorted(seen.values())


def build_index(libraries: list[tuple[str, int, int]]) -> LibraryIndex:
    """Hash the code of `libraries`, a block per KiB (unreadable or non-ELF files are skipped)."""
    hashes, owners, paths = [], [], []
    for path, _size, _mtime in libraries:
        try:
            with open(path, "rb") as handle:
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    blocks = index_blocks(data)
        except (OSError, ValueError):
            continue
        if len(blocks):
            hashes.append(blocks)
            owners.append(np.full(len(blocks), len(paths), dtype=np.uint32))
            paths.append(path)
    if not hashes:
        return LibraryIndex(np.empty(0, np.uint64), np.empty(0, np.uint32), [])
    hashes, owners = np.concatenate(hashes), np.concatenate(owners)
    order = np.argsort(hashes, kind="stable")
    return LibraryIndex(hashes[order], owners[order], paths)


def library_index(cache_dir: Path, roots: list[str] | None = None) -> LibraryIndex:
    """The index of the trusted trees' libraries, from the cache or built (once) into it."""
    loaded = load_index(index_file(cache_dir, roots))
    if loaded is None:
        raise RuntimeError("the library index the judge just wrote does not read back")
    return loaded


def index_file(cache_dir: Path, roots: list[str] | None = None) -> Path:
    """The sealed index file of the trusted trees' libraries, made when missing.

    Once per process and set of roots (walking them takes a second); the first process on a
    machine hashes the libraries (seconds, a few GB of code), later ones read its file.
    """
    roots = trusted_roots() if roots is None else roots
    return _index_file(Path(cache_dir), tuple(roots))


@functools.lru_cache(maxsize=4)
def _index_file(cache_dir: Path, roots: tuple[str, ...]) -> Path:
    libraries = _libraries(list(roots), skip=(str(cache_dir),))
    key = hashlib.sha256(json.dumps([INDEX_VERSION, roots, libraries]).encode()).hexdigest()
    folder = cache_dir / INDEX_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key[:32]}.bin"
    with open(folder / f"{key[:32]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process builds it; the others read it
        if load_index(path) is not None:
            return path
        index = build_index(libraries)
        header = json.dumps({"paths": index.paths, "count": len(index.hashes)}).encode()
        body = header + b"\n" + index.hashes.tobytes() + index.owners.tobytes()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(seal(integrity_key(cache_dir), body))
        tmp.replace(path)
    return path


def load_index(path: Path) -> LibraryIndex | None:
    """The index in `path` (a file of `index_file`), or None when missing or not intact.

    Kept once read (a process reads one index).
    """
    path = Path(path)
    if path in _LOADED:
        return _LOADED[path]
    index = _read_index(path)
    if index is not None:
        _LOADED.clear()
        _LOADED[path] = index
    return index


_LOADED: dict[Path, LibraryIndex] = {}


def _read_index(path: Path) -> LibraryIndex | None:
    try:
        stored = Path(path).read_bytes()
    except OSError:
        return None
    body = unseal(integrity_key(Path(path).parent.parent), stored)
    if body is None:
        return None
    header, _, rest = body.partition(b"\n")
    info = json.loads(header)
    count = int(info["count"])
    hashes = np.frombuffer(rest, dtype=np.uint64, count=count)
    owners = np.frombuffer(rest, dtype=np.uint32, count=count, offset=8 * count)
    return LibraryIndex(hashes.copy(), owners.copy(), list(info["paths"]))
