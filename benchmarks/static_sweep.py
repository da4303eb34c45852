"""The judge's static checks over a folder of solutions written elsewhere: what they reject.

    python -m benchmarks.static_sweep DIR [--out FILE]

Every `*.py` under DIR that defines `ModelNew` goes through `static_violations` (the rules on
model_new.py and the scan of the native sources in its string literals) with both rule sets,
the `external` one after the KernelBench harness's renaming of extension names, as the harness
runs it. Nothing is compiled or run. Prints how many each rule rejects and, with --out, writes
those counts and the rejected files' rules as JSON (the sources are not copied).

Point it at public KernelBench solutions (leaderboards, agents' run folders) to find false
rejections: a rejection of honest code is one (benchmarks/results/false_rejections_cpu.json,
"public_solutions_static_checks").
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

from benchmarks.kernelbench.solutions import unique_extension_names
from cuda_gym.judge.judge import static_violations

RULE_SETS = ("env", "external")
_RULE = re.compile(r"static:(\w+)")


def rules_broken(source: str, rules: str) -> list[str]:
    """The rules a source breaks under a rule set, sorted, each once."""
    if rules == "external":
        source = unique_extension_names(source)[0]
    found = set()
    for violation in static_violations(source, None, rules):
        rule = _RULE.match(violation)
        found.add(rule.group(1) if rule else violation[:40])
    return sorted(found)


def sweep(root: Path) -> dict:
    """Counts by rule set and rule, and each rejected file's rules."""
    files = sorted(p for p in root.rglob("*.py") if "ModelNew" in p.read_text(errors="replace"))
    report = {"files": len(files), "rule_sets": {}}
    for rules in RULE_SETS:
        by_rule: collections.Counter = collections.Counter()
        rejected = {}
        for path in files:
            broken = rules_broken(path.read_text(errors="replace"), rules)
            if broken:
                rejected[str(path.relative_to(root))] = broken
                by_rule.update(broken)
        report["rule_sets"][rules] = {
            "rejected": len(rejected),
            "by_rule": dict(by_rule.most_common()),
            "rejected_files": rejected,
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="folder of solutions (*.py defining ModelNew)")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args(argv)
    report = sweep(args.root)
    print(f"{report['files']} solutions under {args.root}")
    for rules, part in report["rule_sets"].items():
        print(f"{rules:9} rejected {part['rejected']:5}  {part['by_rule']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
