"""Run every CPU test tier in turn and print how long each took: what `.ci/run` runs.

    python -m tests.tiers [--only fast slow exploits behind_static false_rejections] [--jobs N]
        [--out FILE]

1. fast: `python -m pytest -n N` (setup.cfg selects the fast tier: no compiling, no real
   judgement).
2. slow: `python -m pytest -m slow -n N` (C++ builds and real judgements on the CPU), less the
   test that judges a few representative cases of the exploit suite, which runs in full next.
3. exploits: `python -m benchmarks.exploits --device cpu --jobs N` (every CPU reward-hack case
   gets the verdict it expects).
4. behind_static: `python -m benchmarks.exploits --device cpu --jobs N --behind-static` (the
   cases the static rules stop, judged with those rules skipped: the runtime layers behind
   them still reject each for its Runtime reason).

Not in the default run (`.ci/run`), to keep CI within its 25 minutes: false_rejections,
`python -m benchmarks.false_rejections --device cpu --jobs N` (every honest case of the corpus
is accepted; the slow tier judges its representative cases).

Every tier runs even when an earlier one failed; the exit status is 1 if any failed. --out
writes each tier's exit status and seconds as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

# Judged in full by the suite's own tier.
REPRESENTATIVE_TESTS = ("tests/test_exploits.py::test_representative_cpu_cases_match_expectations",)
TIERS = ("fast", "slow", "exploits", "behind_static", "false_rejections")
DEFAULT_TIERS = ("fast", "slow", "exploits", "behind_static")


def command(tier: str, jobs: int) -> list[str]:
    """The command line of one tier."""
    python = [sys.executable, "-m"]
    workers = ["-n", str(jobs)] if jobs > 1 else []
    if tier == "fast":
        return [*python, "pytest", *workers]
    if tier == "slow":
        deselect = [arg for test in REPRESENTATIVE_TESTS for arg in ("--deselect", test)]
        return [*python, "pytest", "-m", "slow", *workers, "--durations=15", *deselect]
    if tier == "behind_static":
        return [*command("exploits", jobs), "--behind-static"]
    return [*python, f"benchmarks.{tier}", "--device", "cpu", "--jobs", str(jobs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=TIERS, default=list(DEFAULT_TIERS))
    parser.add_argument("--jobs", type=int, default=2, help="test workers and suite jobs")
    parser.add_argument("--out", help="write each tier's exit status and seconds here (JSON)")
    args = parser.parse_args(argv)
    results = []
    for tier in [t for t in TIERS if t in args.only]:
        argv_ = command(tier, args.jobs)
        print(f"\n=== tier {tier}: {' '.join(argv_[1:])}", flush=True)
        start = time.monotonic()
        code = subprocess.call(argv_)
        results.append((tier, code, time.monotonic() - start))
    print("\n=== tiers")
    for tier, code, seconds in results:
        status = "passed" if code == 0 else f"FAILED (exit {code})"
        print(f"{tier:17s} {status:18s} {seconds:7.1f} s")
    print(f"{'total':17s} {'':18s} {sum(s for *_, s in results):7.1f} s", flush=True)
    if args.out:
        summary = {
            "command": f"python -m tests.tiers --jobs {args.jobs} --only {' '.join(args.only)}",
            "tiers": {t: {"exit": code, "seconds": round(sec, 1)} for t, code, sec in results},
            "total_s": round(sum(sec for *_, sec in results), 1),
        }
        with open(args.out, "w") as f:
            f.write(json.dumps(summary, indent=1) + "\n")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
