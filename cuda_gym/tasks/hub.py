"""Download a Hugging Face dataset split as parquet files, cached; clear errors when offline.

Uses the Hub's parquet listing (`/api/datasets/REPO/parquet/default/SPLIT`) and plain HTTPS, so
no extra package is needed. `HF_HUB_OFFLINE=1` makes every call fail at once with the hint.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from cuda_gym.errors import DataUnavailableError

HF_ENDPOINT = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
TIMEOUT_S = 30


def _cache_root(cache_dir: str | Path | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    from cuda_gym.cache_dir import default_cache_dir

    return default_cache_dir() / "hf"


def _get(url: str, offline_hint: str) -> bytes:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        raise DataUnavailableError(
            f"HF_HUB_OFFLINE is set, so {url} is not fetched: {offline_hint}"
        )
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:  # noqa: S310 (https only)
            return resp.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DataUnavailableError(
            f"cannot reach {url} ({exc}); offline? Instead: {offline_hint}"
        ) from exc


def hf_parquet_files(
    repo: str, split: str, *, cache_dir: str | Path | None = None, offline_hint: str = ""
) -> list[Path]:
    """Local paths of the parquet files of `repo`'s `split` (downloaded once, then cached).

    Raises:
        DataUnavailableError: The Hub cannot be reached (and nothing is cached) or has no such
            split; the message includes `offline_hint`.
    """
    root = _cache_root(cache_dir) / repo.replace("/", "--") / split
    listing = root / "files.json"
    if listing.is_file():
        paths = [root / name for name in json.loads(listing.read_text())]
        if all(p.is_file() for p in paths):
            return paths
    url = f"{HF_ENDPOINT}/api/datasets/{repo}/parquet/default/{split}"
    try:
        urls = json.loads(_get(url, offline_hint))
    except json.JSONDecodeError as exc:
        raise DataUnavailableError(f"unexpected answer from {url}: {exc}") from exc
    if not isinstance(urls, list) or not urls:
        raise DataUnavailableError(f"{repo} has no parquet files for split {split!r} ({url})")
    root.mkdir(parents=True, exist_ok=True)
    names = []
    for file_url in urls:
        name = hashlib.sha256(file_url.encode()).hexdigest()[:16] + ".parquet"
        target = root / name
        if not target.is_file():
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(_get(file_url, offline_hint))
            tmp.replace(target)
        names.append(name)
    listing.write_text(json.dumps(names))
    return [root / n for n in names]
