"""The judge's library index (cuda_gym.judge.library_copies): its cost, and built libraries.

    python -m benchmarks.library_index [BUILT_DIR ...] [--out FILE]

Builds the index of this machine's libraries into a fresh cache and reads it back (the two
costs a judge pays: once per machine, once per process), then checks every shared object
under the BUILT_DIRs (judge caches holding solutions' builds): how many are copies of a
machine library and with what share of their blocks, and the most blocks any other one
shares with a single library (the margin below MIN_BLOCKS).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from cuda_gym.judge import library_copies


def most_shared(index: library_copies.LibraryIndex, path: Path) -> int:
    """The most indexed blocks of any one library found in `path`'s code."""
    return max(index.shared(path.read_bytes()).values(), default=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("built", nargs="*", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    cache = Path(tempfile.mkdtemp())
    start = time.perf_counter()
    index = library_copies.library_index(cache)
    build_s = time.perf_counter() - start
    library_copies._LOADED.clear()
    library_copies._index_file.cache_clear()
    start = time.perf_counter()
    library_copies.library_index(cache)
    reload_s = time.perf_counter() - start
    built = sorted({p for root in args.built for p in root.rglob("*.so") if p.is_file()})
    shares, others = [], []
    for path in built:
        copy = index.copy_of_file(path)
        if copy is not None:
            shares.append(round(copy.shared / copy.blocks, 3))
        else:
            others.append(most_shared(index, path))
    report = {
        "benchmark": "library_index",
        "blocks": len(index.hashes),
        "libraries": len(index.paths),
        "build_s": round(build_s, 2),
        "reload_s": round(reload_s, 2),
        "file_mb": round(sum(p.stat().st_size for p in cache.rglob("*.bin")) / 1e6, 1),
        "built_checked": len(built),
        "copies": len(shares),
        "copy_share_range": [min(shares), max(shares)] if shares else None,
        "most_blocks_shared_by_a_non_copy": max(others or [0]),
        "min_blocks_for_a_copy": library_copies.MIN_BLOCKS,
    }
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
