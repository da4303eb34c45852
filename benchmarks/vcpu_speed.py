"""How alike a machine's CPUs are: one Python loop timed on each CPU alone and beside a busy one.

The trusted driver's host clock counts the runner's host work inside each timed call, so a runner
on a slower CPU reads slower (results/timing_fidelity_h200.json, key per_runner_offset_traced).
Printed: each CPU's time for the loop alone (best of 3), and for every ordered pair (busy CPU i,
measured CPU j) the slowdown against j alone; the summary JSON keeps both.

    python -m benchmarks.vcpu_speed --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time


def _spin(flag) -> None:
    while flag.value:
        pass


def _loop_s(n: int = 200_000) -> float:
    start = time.perf_counter()
    total = 0
    for k in range(n):
        total += k
    return time.perf_counter() - start


def _best_on(cpu: int) -> float:
    os.sched_setaffinity(0, {cpu})
    _loop_s()
    return min(_loop_s() for _ in range(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs at least two CPUs")
    flag = mp.Value("i", 1, lock=False)
    busy = mp.Process(target=_spin, args=(flag,))
    busy.start()
    try:
        os.sched_setaffinity(busy.pid, {cpus[-1]})
        alone = {j: _best_on(j) for j in cpus[:-1]}
        os.sched_setaffinity(busy.pid, {cpus[0]})
        alone[cpus[-1]] = _best_on(cpus[-1])
        ratios = {}
        for i in cpus:
            os.sched_setaffinity(busy.pid, {i})
            for j in cpus:
                if j != i:
                    ratios[f"{i},{j}"] = round(_best_on(j) / alone[j], 2)
    finally:
        flag.value = 0
        busy.join()
    summary = {
        "command": f"python -m benchmarks.vcpu_speed --out {args.out}",
        "cpus": len(cpus),
        "alone_ms": {str(j): round(1e3 * t, 2) for j, t in alone.items()},
        "alone_ms_range": [
            round(1e3 * min(alone.values()), 2),
            round(1e3 * max(alone.values()), 2),
        ],
        "pair_slowdown_range": [min(ratios.values()), max(ratios.values())],
        "pairs_over_1_3": sum(r > 1.3 for r in ratios.values()),
        "pairs": len(ratios),
    }
    print(json.dumps(summary, indent=1))
    with open(args.out, "w") as f:
        json.dump({**summary, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
