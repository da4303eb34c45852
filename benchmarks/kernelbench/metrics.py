"""The published KernelBench / CUDA-Agent metrics, computed from per-problem outcomes.

Definitions (n = every problem of the level, whatever happened to it; a missing or errored
problem counts as incorrect, as KernelBench patches missing results):

- pass rate: correct / n.
- faster-than-eager (compile) rate: problems correct AND with speedup_vs_eager (compile) > 1,
  over n.
- fast_p (KernelBench `score.py`): problems correct AND with speedup > p (strict), over n, for
  p in FAST_P, against eager and against compile. fast_0 is the pass rate whenever every correct
  solution was timed; a correct solution without a speedup (timing off, or flagged below the
  speed-of-light bound) is never "faster".
- geometric-mean speedup vs eager (compile): over the correct solutions with a speedup.
- overall: the same formulas over the problems of all levels together, so each level weighs by
  its number of problems (the level-count weighted mean of the level rates).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
BASELINES = ("eager", "compile")


@dataclass(frozen=True)
class Outcome:
    """What counts of one problem's scored solution.

    Attributes:
        correct: The solution passed the judge.
        speedup_vs_eager: Eager time / solution time, or None when not measured.
        speedup_vs_compile: torch.compile time / solution time, or None.
    """

    correct: bool
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None

    def speedup(self, baseline: str) -> float | None:
        """The speedup against "eager" or "compile"."""
        return self.speedup_vs_eager if baseline == "eager" else self.speedup_vs_compile

    @classmethod
    def from_record(cls, record: dict | None) -> Outcome:
        """The outcome of a problem record (None or a failed record: incorrect)."""
        if not record or record.get("status") not in ("done",):
            return cls(False)
        return cls(
            bool(record.get("correct")),
            record.get("speedup_vs_eager"),
            record.get("speedup_vs_compile"),
        )


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values; None when there are none."""
    logs = [math.log(v) for v in values]
    return math.exp(sum(logs) / len(logs)) if logs else None


def fast_p(outcomes: Sequence[Outcome], p: float, baseline: str) -> float:
    """Share of all problems that are correct with speedup > p against `baseline`."""
    if not outcomes:
        return 0.0
    hits = sum(
        1
        for o in outcomes
        if o.correct and o.speedup(baseline) is not None and o.speedup(baseline) > p
    )
    return hits / len(outcomes)


def correct_speedups(outcomes: Sequence[Outcome], baseline: str) -> list[float]:
    """Speedups of the correct solutions that have one."""
    return [
        o.speedup(baseline)
        for o in outcomes
        if o.correct and o.speedup(baseline) is not None and o.speedup(baseline) > 0
    ]


def score(outcomes: Sequence[Outcome]) -> dict:
    """Every metric of one group of problems (a level, or all levels)."""
    n = len(outcomes)
    correct = sum(1 for o in outcomes if o.correct)
    result = {
        "n": n,
        "correct": correct,
        "pass_rate": correct / n if n else 0.0,
    }
    for baseline in BASELINES:
        speedups = correct_speedups(outcomes, baseline)
        result[f"faster_than_{baseline}_rate"] = fast_p(outcomes, 1.0, baseline)
        result[f"geomean_speedup_vs_{baseline}"] = geomean(speedups)
        result[f"median_speedup_vs_{baseline}"] = statistics.median(speedups) if speedups else None
        result[f"timed_correct_vs_{baseline}"] = len(speedups)
        result[f"fast_p_vs_{baseline}"] = {_p_key(p): fast_p(outcomes, p, baseline) for p in FAST_P}
    return result


def summarize(outcomes_by_level: dict[int, Sequence[Outcome]]) -> dict:
    """Metrics per level ("level1", ...) and "overall" (all levels' problems together)."""
    levels = {f"level{lv}": score(list(o)) for lv, o in sorted(outcomes_by_level.items())}
    everything = [o for lv in sorted(outcomes_by_level) for o in outcomes_by_level[lv]]
    return {"levels": levels, "overall": score(everything)}


def spread(values: Sequence[float]) -> dict | None:
    """Median and 5th/95th percentiles (linear interpolation), min, max; None when empty."""
    if not values:
        return None
    data = sorted(values)
    return {
        "n": len(data),
        "median": statistics.median(data),
        "p05": percentile(data, 5),
        "p95": percentile(data, 95),
        "min": data[0],
        "max": data[-1],
    }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile of sorted values, interpolating linearly between ranks."""
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    frac = pos - low
    return float(sorted_values[low] * (1 - frac) + sorted_values[high] * frac)


def effort(records: Sequence[dict]) -> dict:
    """Turns, tokens and wall time over records (agent fields where present)."""
    walls = [r.get("wall_s") or 0.0 for r in records]
    agent = [r["agent"] for r in records if r.get("agent")]
    out = {
        "problems": len(records),
        "wall_s_total": sum(walls),
        "wall_s_mean": statistics.fmean(walls) if walls else None,
    }
    if agent:
        turns = [a.get("turns") or 0 for a in agent]
        tokens = [(a.get("usage") or {}).get("total_tokens", 0) for a in agent]
        prompt = [(a.get("usage") or {}).get("prompt_tokens", 0) for a in agent]
        completion = [(a.get("usage") or {}).get("completion_tokens", 0) for a in agent]
        out.update(
            episodes=len(agent),
            turns_total=sum(turns),
            turns_mean=statistics.fmean(turns),
            turns_median=statistics.median(turns),
            tokens_total=sum(tokens),
            prompt_tokens_total=sum(prompt),
            completion_tokens_total=sum(completion),
            tokens_mean=statistics.fmean(tokens),
            agent_s_total=sum(a.get("agent_s") or 0.0 for a in agent),
        )
    return out


def _p_key(p: float) -> str:
    return f"fast_{p:g}"
