"""Hand the candidate's outputs to the reference worker through a reusable shared-memory arena.

The candidate's worker must give its outputs (GiBs for large tasks) to a process it never runs
in. Copying them into freshly allocated host memory and pickling them to a file is slow on a
virtual machine that backs new pages lazily; copying into memory that is already backed is tens
of times faster (benchmarks/README.md, "Output transfer"). So the judge keeps
a few arena files (in /dev/shm when it has room) and lends one to each evaluation: the candidate
worker copies every output tensor straight into it and pickles only a small index; the reference
worker reads the tensors back from the same file. A file is reused by later evaluations, so its
pages are faulted in once.

Both workers register the arena's pages with the CUDA driver while they copy (cuda_gym.judge
.pinning): copies between the GPU and page-locked memory run at the bus's rate, those from
pageable memory at a few GiB/s.

Where an arena cannot hold the outputs (no room), the tensors go into the index file itself.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from cuda_gym.judge.pinning import page_down, page_up, registered

ARENA_PREFIX = "cuda_gym_arena_"
ALIGN = 256
# An arena grows to at most this many bytes (CUDA_GYM_ARENA_MAX_BYTES overrides); larger output
# sets go through the index file. The room rule below is what usually limits it. Output sets
# past the cap cost far more: host copies into fresh memory, saved into the index and loaded
# back, and held three times in host memory. KernelBench's 6 GiB level-1 outputs make 30 GiB for
# the five correctness trials.
ARENA_MAX_BYTES = 64 << 30
# An arena may only grow while this share of its filesystem (and at least 1 GiB) stays free:
# /dev/shm also serves NCCL, data loaders and the like.
ROOM_SHARE = 0.25
ROOM_MIN_BYTES = 1 << 30
MARKER = "__arena__"


def arena_dir() -> Path:
    """/dev/shm when it exists and is writable, else the temporary directory."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


class ArenaPool:
    """Arena files lent one per evaluation (thread-safe); removed by `close` or at exit.

    Files of processes that died without removing theirs are removed when a pool first makes
    one.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or arena_dir()
        self._free: list[Path] = []
        self._all: list[Path] = []
        self._lock = threading.Lock()
        self._swept = False

    @contextlib.contextmanager
    def lease(self) -> Iterator[Path]:
        """An arena path, exclusively the caller's until the block ends."""
        with self._lock:
            if self._free:
                path = self._free.pop()
            else:
                if not self._swept:
                    remove_stale_arenas(self.directory)
                    self._swept = True
                path = self.directory / f"{ARENA_PREFIX}{os.getpid()}_{secrets.token_hex(6)}"
                path.touch(mode=0o600)
                self._all.append(path)
        try:
            yield path
        finally:
            with self._lock:
                if path in self._all:
                    self._free.append(path)

    def close(self) -> None:
        """Remove every arena file of this pool."""
        with self._lock:
            for path in self._all:
                path.unlink(missing_ok=True)
            self._all.clear()
            self._free.clear()


_SHARED: ArenaPool | None = None
_SHARED_LOCK = threading.Lock()


def shared_arena_pool() -> ArenaPool:
    """The process's arena pool, shared by every Judge in it; its files go at exit."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ArenaPool()
            atexit.register(_SHARED.close)
        return _SHARED


def remove_stale_arenas(directory: Path) -> int:
    """Remove arena files whose owning process no longer exists; return how many."""
    return remove_stale(directory, ARENA_PREFIX)


def remove_stale(directory: Path, prefix: str) -> int:
    """Remove files and directories named `<prefix><pid>_...` whose process no longer exists.

    Returns:
        How many were removed.
    """
    removed = 0
    for path in Path(directory).glob(f"{prefix}*"):
        try:
            pid = int(path.name[len(prefix) :].split("_")[0])
        except ValueError:
            continue
        if not _alive(pid):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _walk(tree, visit):
    """Rebuild lists/dicts with `visit` applied to every leaf (an arena entry is a leaf)."""
    if isinstance(tree, list):
        return [_walk(x, visit) for x in tree]
    if isinstance(tree, dict) and MARKER not in tree:
        return {k: _walk(v, visit) for k, v in tree.items()}
    return visit(tree)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class OutputWriter:
    """Puts the candidate's output tensors into the arena (or host memory) for the reference.

    `put` may be called several times (so device memory can be released between calls); `save`
    writes the index file `load_outputs` reads.
    """

    def __init__(self, arena_path: str | None) -> None:
        self.arena_path = arena_path
        self.offset = 0
        self.arena_bytes = 0
        self.host_bytes = 0
        self.pinned_bytes = 0  # of arena_bytes, those copied through registered pages

    def put(self, tree):
        """`tree` with every tensor replaced by an arena entry, or else by a host copy."""
        import torch

        tensors = []
        _walk(tree, lambda x: tensors.append(x) if type(x) is torch.Tensor else None)
        needed = sum(_aligned(t.numel() * t.element_size()) for t in tensors)
        end = self.offset + needed
        if self.arena_path and tensors and _reserve(self.arena_path, end):
            # The whole file (its size is whole pages), so the pages written can be registered.
            size = os.path.getsize(self.arena_path)
            buf = torch.from_file(self.arena_path, shared=True, size=size, dtype=torch.uint8)

            def place(x):
                if type(x) is not torch.Tensor:
                    return x
                nbytes = x.numel() * x.element_size()
                if nbytes:
                    buf[self.offset : self.offset + nbytes].view(x.dtype).view(x.shape).copy_(
                        x.detach()
                    )
                entry = {MARKER: self.offset, "shape": list(x.shape), "dtype": str(x.dtype)}
                self.offset += _aligned(nbytes)
                return entry

            on_gpu = any(t.device.type == "cuda" for t in tensors)
            pages = buf[page_down(self.offset) : min(size, page_up(end))]
            with registered(pages) if on_gpu else contextlib.nullcontext(False) as pinned:
                self.pinned_bytes += needed if pinned else 0
                placed = _walk(tree, place)
            self.arena_bytes += needed
            return placed
        self.host_bytes += needed
        # Always a copy: on the CPU, .cpu() would return the very tensor the candidate holds.
        return _walk(
            tree, lambda x: x.detach().to("cpu", copy=True) if type(x) is torch.Tensor else x
        )

    def save(self, tree, index_path: str) -> None:
        """Write the index (arena entries, host tensors and plain values) to `index_path`."""
        import torch

        torch.save({"tree": tree}, index_path)


def _reserve(arena_path: str, needed: int) -> bool:
    """Grow the arena file to `needed` bytes or more, its pages allocated; False if no room."""
    try:
        fd = os.open(arena_path, os.O_RDWR)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        if size >= needed:
            return True
        limit = int(os.environ.get("CUDA_GYM_ARENA_MAX_BYTES", ARENA_MAX_BYTES))
        stats = os.fstatvfs(fd)
        keep = max(ROOM_MIN_BYTES, ROOM_SHARE * stats.f_blocks * stats.f_frsize)
        if needed > limit or (needed - size) + keep > stats.f_bavail * stats.f_frsize:
            return False
        # Allocate now: a tmpfs that fills up later would kill the writer with SIGBUS. Whole
        # pages, so that every page written can be registered with the CUDA driver.
        os.posix_fallocate(fd, 0, page_up(needed))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def load_outputs(
    index_path: str,
    arena_path: str | None,
    device: str | None,
    hold: contextlib.ExitStack | None = None,
):
    """The tree `OutputWriter.save` wrote, its tensors on `device` (always private copies).

    With `device` None, arena tensors stay views of the arena and others stay on the host:
    `to_device` then copies one part at a time (outputs of many GiB need not all be on the
    device at once). With `hold` (a CUDA context current), the arena's pages those views use
    stay registered with the CUDA driver until `hold` closes, for fast `to_device` copies.

    Raises:
        ValueError: The index or the arena does not hold what the index says (the candidate's
            worker wrote both, so their content is untrusted).
    """
    import torch

    saved = torch.load(index_path, map_location=device or "cpu", weights_only=True)
    if not isinstance(saved, dict) or "tree" not in saved:
        raise ValueError("unexpected layout")
    size = os.path.getsize(arena_path) if arena_path and os.path.exists(arena_path) else 0
    buf = torch.from_file(arena_path, shared=True, size=size, dtype=torch.uint8) if size else None
    used = 0

    def take(x):
        nonlocal used
        if not (isinstance(x, dict) and MARKER in x):
            return x
        dtype = getattr(torch, str(x.get("dtype")).removeprefix("torch."), None)
        shape = x.get("shape")
        offset = x[MARKER]
        if not isinstance(dtype, torch.dtype) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"bad arena entry {x!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"bad arena entry {x!r}")
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * dtype.itemsize
        if numel == 0:
            return torch.empty(shape, dtype=dtype, device=device or "cpu")
        if buf is None or offset + nbytes > size:
            raise ValueError("an arena entry lies outside the arena")
        view = buf[offset : offset + nbytes].view(dtype).view(shape)
        used = max(used, offset + nbytes)
        return view if device is None else view.to(device, copy=True)

    tree = _walk(saved["tree"], take)
    if hold is not None and device is None and used:
        hold.enter_context(registered(buf[: min(size, page_up(used))]))
    return tree


def to_device(tree, device: str):
    """A `load_outputs(..., None)` tree with private copies of its tensors on `device`."""
    import torch

    return _walk(tree, lambda x: x.to(device, copy=True) if isinstance(x, torch.Tensor) else x)
