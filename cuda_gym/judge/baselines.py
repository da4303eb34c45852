"""Disk caches for per-task facts: baseline timings and task probes, one JSON file per key.

Only trusted processes write them (candidate code runs in the OS sandbox, which cannot see the
cache directory), and every entry is checked when read: an entry is a line holding the
HMAC-SHA256 of the document's bytes, under a key kept in the cache directory (`integrity.key`,
readable by its owner only), then the document. A truncated or altered entry, or one in the
older unsigned format, is discarded with a log line, and the caller computes it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

from cuda_gym.judge.config import (
    CPU_SAMPLE_PERIOD_NS,
    JudgeConfig,
    samples_host_cpu,
    samples_per_cpu,
)
from cuda_gym.judge.device import DeviceInfo

logger = logging.getLogger(__name__)

KEY_FILE = "integrity.key"


def baseline_key(task_hash: str, info: DeviceInfo, config: JudgeConfig) -> str:
    """Key of a task's baselines: task, device model, driver and versions, timing method.

    Not the tolerance mode: it changes how outputs are compared, not how the reference is
    timed, so runs in `paper` and `strict` mode share one set of baselines.
    """
    parts = [
        task_hash,
        info.device,
        info.name,
        info.torch_version,
        str(info.cuda_version),
        str(info.driver_version),
        str(config.warmup_runs),
        str(config.timed_runs),
        "tf32-off",
        "rotating-inputs",
        "l2-flush-persisting-off",
        "driver-done-finish-fresh-inputs-polled-empty-call-steps-fastest-finish-min",
    ]
    if samples_host_cpu(info.device):  # cuda_gym.judge.cpu_time: sampling costs time
        parts.append(f"perf-sampled-{CPU_SAMPLE_PERIOD_NS}")
        if info.device == "cpu" and samples_per_cpu():
            parts.append("per-cpu-rearmed")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def has_baselines(cached: dict | None, names) -> bool:
    """Whether a task's cached baselines hold a time for every one of `names`."""
    return bool(cached) and all("median_ms" in (cached.get(n) or {}) for n in names)


def probe_key(task_hash: str, info: DeviceInfo) -> str:
    """Key of a task's probe (usable distributions, fp64 support, trivial answers)."""
    # v3: the speed-of-light bound uses the GPU's nominal bandwidth (cuda_gym.judge.roofline).
    # v4: a float64 pass that disagrees with the task's own pass is not used (fp64_disagrees).
    # v5: the speed-of-light bound counts no convolution flops (cuda_gym.judge.roofline).
    # v7: input invariants and transform masks, strict mode's accumulation units (judge/contract).
    # v8: whether the task only moves data (data_movement: PyTorch's copies refused in forward).
    parts = [task_hash, info.device, info.name, info.torch_version, "probe-v8"]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def integrity_key(root: Path) -> bytes:
    """The cache directory's HMAC key, made on first use (mode 0600; linked in atomically)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / KEY_FILE
    if not path.exists():
        tmp = root / f".{KEY_FILE}.{os.getpid()}.{threading.get_ident()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_bytes(32))
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # the first process to link wins; the others read its key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    key = path.read_bytes()
    if len(key) != 32:
        raise OSError(f"{path} is not a cache integrity key (delete it to start afresh)")
    return key


def seal(key: bytes, data: bytes) -> bytes:
    """`data` prefixed by its HMAC line, as stored in the cache."""
    return hmac.new(key, data, hashlib.sha256).hexdigest().encode() + b"\n" + data


def unseal(key: bytes, stored: bytes) -> bytes | None:
    """The data of a sealed entry, or None when the entry is not intact."""
    mac, sep, data = stored.partition(b"\n")
    if not sep:
        return None
    expected = hmac.new(key, data, hashlib.sha256).hexdigest().encode()
    return data if hmac.compare_digest(mac, expected) else None


class JsonCache:
    """Small JSON documents stored as `<root>/<kind>/<key>.json`, sealed, written atomically."""

    def __init__(self, root: Path, kind: str) -> None:
        self.root = Path(root) / kind
        self._key_root = Path(root)
        self._key: bytes | None = None

    @property
    def key(self) -> bytes:
        """The HMAC key of this cache's directory."""
        if self._key is None:
            self._key = integrity_key(self._key_root)
        return self._key

    def get(self, key: str) -> dict | None:
        """The cached document, or None (missing, or discarded as not intact)."""
        path = self.root / f"{key}.json"
        try:
            stored = path.read_bytes()
        except OSError:
            return None
        data = unseal(self.key, stored)
        document = None
        if data is not None:
            try:
                document = json.loads(data)
            except ValueError:
                document = None
        if not isinstance(document, dict):
            logger.warning("discarding %s: a tampered, truncated or unsigned cache entry", path)
            path.unlink(missing_ok=True)
            return None
        return document

    def put(self, key: str, document: dict) -> None:
        """Store a document atomically (safe with concurrent writers)."""
        self.root.mkdir(parents=True, exist_ok=True)
        data = seal(self.key, json.dumps(document, indent=1).encode())
        # Unique per process and thread: two envs of one process may store the same key at once.
        tmp = self.root / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_bytes(data)
        tmp.replace(self.root / f"{key}.json")

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold `key`'s lock across processes (an flock on `<root>/<key>.lock`).

        Used so that one process computes a missing document while others wait and then read
        it, instead of all computing it at once (on one GPU, concurrent probes of a large task
        can exhaust its memory).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
