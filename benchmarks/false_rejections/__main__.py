"""Judge every honest solution of the false-rejection corpus through the CLI; all must be accepted.

Run from the repository root:

    python -m benchmarks.false_rejections --device cpu [--out FILE.json] [--only NAME ...]

Each case in cases/ is a solution whose docstring names the style it stands for and its task
(a KernelBench-format file in tasks/); the runner judges it as the exploit suite does
(`python -m cuda_gym.cli judge TASK CASE.py --device DEVICE --json --no-timing`, the CLI's default
"external" rule set and strict mode) and expects "accept". The table and a summary line go to
stdout, the per-case records to --out, and the exit status is 1 if any case is rejected.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from benchmarks.exploits.__main__ import DEVICES, Case, format_table, judge_case, parse_case

SUITE_DIR = Path(__file__).resolve().parent
REPO_ROOT = SUITE_DIR.parents[1]
CASES_DIR = SUITE_DIR / "cases"
TASKS_DIR = SUITE_DIR / "tasks"


def load_cases(device: str | None = None, only: Iterable[str] | None = None) -> list[Case]:
    """Every case (sorted by name), or those for `device` and named in `only`.

    Raises:
        ValueError: A case is malformed, expects anything but accept, or names a missing task;
            or a name in `only` matches no case.
    """
    cases = [parse_case(p) for p in sorted(CASES_DIR.glob("*.py"))]
    for case in cases:
        if not case.legit:
            raise ValueError(f"{case.name}: every case here must expect accept")
        if not (REPO_ROOT / case.task).is_file():
            raise ValueError(f"{case.name}: task file {case.task} not found")
    unknown = set(only or ()) - {c.name for c in cases}
    if unknown:
        raise ValueError(f"unknown case(s): {', '.join(sorted(unknown))}")
    if only:
        cases = [c for c in cases if c.name in set(only)]
    if device is not None:
        cases = [c for c in cases if device in c.devices]
    return cases


def run_suite(
    device: str,
    only: Iterable[str] | None = None,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Judge every case for `device` on `jobs` threads; return the report (records by name)."""
    cases = load_cases(device, only)
    start = time.monotonic()
    records: list[dict] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in as_completed([pool.submit(judge_case, c, device) for c in cases]):
            record = future.result()
            records.append(record)
            if progress:
                mark = "ok" if record["ok"] else "REJECTED"
                line = f"[{len(records)}/{len(cases)}] {record['case']}: {mark} "
                line += f"{record['seconds']:.1f} s"
                if not record["ok"]:
                    line += "\n    " + " ".join(record["error"].split())[:600]
                progress(line)
    records.sort(key=lambda r: r["case"])
    names = {r.get("device_name") for r in records} - {None}
    return {
        "suite": "false_rejections",
        "device": device,
        "device_name": sorted(names)[0] if names else None,
        "torch": importlib.metadata.version("torch"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "jobs": jobs,
        "wall_s": round(time.monotonic() - start, 1),
        "passed": sum(r["ok"] for r in records),
        "failed": sum(not r["ok"] for r in records),
        "cases": records,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the corpus; 0 when every case is accepted, else 1."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.false_rejections", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--device", required=True, choices=DEVICES)
    parser.add_argument("--out", type=Path, help="write the per-case records as JSON here")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these cases")
    parser.add_argument("--jobs", type=int, default=1, help="cases judged at once (default 1)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        print("error: --jobs must be at least 1", file=sys.stderr)
        return 2
    try:
        report = run_suite(
            args.device, args.only, args.jobs, lambda line: print(line, file=sys.stderr)
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_table(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
