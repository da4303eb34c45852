"""The speedup spread of a run directory's records as they stand (the report's figure, between
invocations): per level, overall, GPU-bound and host-bound, plus counts, wall time and where the
problems' time went (each judge stage's seconds summed over the records).

    python -m benchmarks.kernelbench.spread OUT [--out F.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.kernelbench.report import print_summary, speedup_spread


def summarize_run(out: Path) -> dict:
    """Counts, total wall time (run.json) and the speedup spread of OUT's records."""
    records = [json.loads(p.read_text()) for p in sorted(out.glob("records/level*/*.json"))]
    if not records:
        raise FileNotFoundError(f"no records under {out}/records")
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    return {
        "run_dir": str(out),
        "records": len(records),
        "correct": sum(bool(r.get("correct")) for r in records),
        "per_level": {
            f"level{lv}": sum(r["level"] == lv for r in records)
            for lv in sorted({r["level"] for r in records})
        },
        "total_wall_s": round(sum(i["wall_s"] for i in run.get("invocations", [])), 1),
        "speedup_spread": speedup_spread(records),
        **stage_seconds(records),
    }


def stage_seconds(records: list[dict]) -> dict:
    """Each judge stage's seconds summed over the records, and what no stage accounts for.

    "candidate.gate" and the like are waits for the device's gate (another worker timing);
    "unaccounted_s" is the problems' wall time outside the build and the two workers (before
    the judge recorded the probe's time, mostly the probe).
    """
    totals: dict[str, float] = {}
    unaccounted = 0.0
    for record in records:
        stages = (record.get("verdict") or {}).get("stage_times_s") or {}
        for stage, seconds in stages.items():
            if isinstance(seconds, (int, float)):
                totals[stage] = totals.get(stage, 0.0) + seconds
        if record.get("wall_s") is not None and stages:
            whole = sum(stages.get(s) or 0.0 for s in ("build", "probe", "candidate", "reference"))
            unaccounted += record["wall_s"] - whole
    return {
        "stage_s_total": {k: round(v, 3) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
        "unaccounted_s": round(unaccounted, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    """Print the summary as JSON and write it to --out when given."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    summary = summarize_run(Path(a.run_dir))
    print_summary(summary, a.out)
    return summary


if __name__ == "__main__":
    main()
