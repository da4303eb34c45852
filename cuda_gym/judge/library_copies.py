"""Is a shared object the solution "built" really a copy of a library the machine already has?

The judge counts a library as the solution's own code (cuda_gym.judge.cpu_time) when its build
stage or its runner produced it, and those run the solution's code: an import that copies a
BLAS library (a system one, NumPy's OpenBLAS) beside its extension and renames it like an
extension module would otherwise pass off BLAS's compute as the solution's. A copy keeps the
copied library's machine code: its executable pages are byte for byte the original's, whatever
strings (names, sonames) were patched elsewhere in the file. So every executable page of the
libraries under the trusted trees (the system's library folders, this Python's prefixes and
site-packages folders) is hashed once into an index, and a built library whose code pages
are mostly found there, in one library, is that library's copy.

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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuda_gym.judge.baselines import integrity_key, seal, unseal

PAGE = 4096
# A built library is a copy when this share of its code pages (and at least MIN_PAGES of
# them) is one trusted library's code. Honest extensions share none: a page of machine code
# compiled elsewhere, at the same file offset alignment, never matches by chance; pages of one
# repeated byte (padding) are left out.
COPY_SHARE = 0.5
MIN_PAGES = 4
INDEX_VERSION = "v1"
INDEX_FOLDER = "library_pages"
_PT_LOAD, _PF_X = 1, 1
# Folders whose shared objects the sandbox can read and a solution could copy.
SYSTEM_LIBRARY_DIRS = ("/usr/lib", "/usr/lib64", "/usr/local", "/lib", "/lib64", "/opt")


def code_pages(data: bytes | mmap.mmap) -> np.ndarray:
    """64-bit hashes of the whole pages of an ELF file's executable segments (none if not ELF)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return np.empty(0, dtype=np.uint64)  # only 64-bit little-endian ELF (x86_64, aarch64)
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    entsize, count = struct.unpack_from("<HH", data, 0x36)
    found = []
    for k in range(count):
        at = phoff + k * entsize
        if at + 56 > len(data):
            break
        p_type, p_flags, p_offset = struct.unpack_from("<IIQ", data, at)
        p_filesz = struct.unpack_from("<Q", data, at + 32)[0]
        if p_type != _PT_LOAD or not p_flags & _PF_X:
            continue
        end = min(len(data), p_offset + p_filesz)
        for start in range(-(-p_offset // PAGE) * PAGE, end - PAGE + 1, PAGE):
            page = data[start : start + PAGE]
            if page.count(page[:1]) == PAGE:
                continue
            digest = hashlib.blake2b(page, digest_size=8).digest()
            found.append(int.from_bytes(digest, "little"))
    return np.unique(np.array(found, dtype=np.uint64))


@dataclass(frozen=True)
class Copy:
    """A built library found to be a trusted library's copy."""

    source: str  # the trusted library's path
    shared: int  # code pages found in it
    pages: int  # code pages of the built library

    def describe(self, name: str) -> str:
        """One line saying that `name` is this copy."""
        return f"{name} is a copy of {self.source} ({self.shared} of its {self.pages} code pages)"


class LibraryIndex:
    """Code-page hashes of the trusted trees' libraries, and which library each came from."""

    def __init__(self, hashes: np.ndarray, owners: np.ndarray, paths: list[str]) -> None:
        order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[order]
        self.owners = owners[order]
        self.paths = paths

    def copy_of(self, data: bytes | mmap.mmap) -> Copy | None:
        """The trusted library `data` (a shared object's bytes) copies, or None."""
        pages = code_pages(data)
        if len(pages) < MIN_PAGES or not len(self.hashes):
            return None
        at = np.searchsorted(self.hashes, pages)
        at[at >= len(self.hashes)] = 0
        hit = self.hashes[at] == pages
        if not hit.any():
            return None
        owners, counts = np.unique(self.owners[at[hit]], return_counts=True)
        best = int(np.argmax(counts))
        shared = int(counts[best])
        if shared < MIN_PAGES or shared < COPY_SHARE * len(pages):
            return None
        return Copy(self.paths[int(owners[best])], shared, len(pages))

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
                    if st.st_size >= MIN_PAGES * PAGE and os.path.isfile(path):
                        seen.setdefault((st.st_dev, st.st_ino), (path, st.st_size, st.st_mtime_ns))
    return sorted(seen.values())


def build_index(libraries: list[tuple[str, int, int]]) -> LibraryIndex:
    """Hash every code page of `libraries` (unreadable or non-ELF files are skipped)."""
    hashes, owners, paths = [], [], []
    for path, _size, _mtime in libraries:
        try:
            with open(path, "rb") as handle:
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    pages = code_pages(data)
        except (OSError, ValueError):
            continue
        if len(pages):
            hashes.append(pages)
            owners.append(np.full(len(pages), len(paths), dtype=np.uint32))
            paths.append(path)
    if not hashes:
        return LibraryIndex(np.empty(0, np.uint64), np.empty(0, np.uint32), [])
    return LibraryIndex(np.concatenate(hashes), np.concatenate(owners), paths)


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
