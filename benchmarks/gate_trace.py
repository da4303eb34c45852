"""Where a device's time goes at its gate: a summary of a CUDA_GYM_GATE_TRACE file.

Judge workers started with CUDA_GYM_GATE_TRACE=FILE append their gate transitions and stages
there (cuda_gym.runtime.device_gate.DeviceGate.note). Swept in time order, every moment of the
window is one of:

- alone: a worker holds the device alone (timing, profiling, a baseline);
- drain: a worker waits to time while shared holders finish their step;
- handover: a worker waits to time and nobody holds the device (lock passing);
- shared: shared holders work, nobody waits to time;
- idle_waiting: nobody holds the device, yet someone waits to enter;
- idle: nobody holds or waits.

Beside those: the process-seconds shared entrants spent kept out (`kept_out_s`, the stall that
every exclusive second costs the judgements in flight), the alone time by the holder's stage,
the drain time by the stage of the last holder still working (`drain_by_stage`: whose steps the
timers wait for), and the spread of exclusive holds and of timers' waits.

    python -m benchmarks.gate_trace FILE
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

CATEGORIES = ("alone", "drain", "handover", "shared", "idle_waiting", "idle")


@dataclass
class _Holder:
    hold: str | None = None  # "shared", "exclusive"
    want: str | None = None
    stage: str = ""
    work: str = ""  # the last stage that is not a wait for the gate or memory
    since: float = 0.0  # when `want` or `hold` began


@dataclass
class _Sweep:
    seconds: dict = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    kept_out_s: float = 0.0
    shared_holder_s: float = 0.0
    alone_by_stage: dict = field(default_factory=dict)
    drain_by_stage: dict = field(default_factory=dict)
    shared_by_stage: dict = field(default_factory=dict)
    holds: list = field(default_factory=list)
    waits: list = field(default_factory=list)


def read(path: Path) -> list[tuple[float, int, str, str]]:
    """The trace's events (time, pid, event, detail), in time order; malformed lines skipped."""
    events = []
    for line in Path(path).read_text(errors="replace").splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 3:
            continue
        try:
            t, pid = float(parts[0]), int(parts[1])
        except ValueError:
            continue
        events.append((t, pid, parts[2], parts[3] if len(parts) > 3 else ""))
    events.sort(key=lambda e: e[0])
    return events


def _category(holders: Iterable[_Holder]) -> tuple[str, int, int]:
    """The moment's category, the shared holders and the shared entrants waiting."""
    holders = list(holders)
    alone = any(h.hold == "exclusive" for h in holders)
    shared = sum(h.hold == "shared" for h in holders)
    timers = any(h.want == "exclusive" for h in holders)
    entrants = sum(h.want == "shared" for h in holders)
    if alone:
        return "alone", shared, entrants
    if timers:
        return ("drain" if shared else "handover"), shared, entrants
    if shared:
        return "shared", shared, entrants
    return ("idle_waiting" if entrants else "idle"), shared, entrants


def _add(table: dict, key: str, seconds: float) -> None:
    table[key] = table.get(key, 0.0) + seconds


def _spread(values: list[float]) -> dict:
    xs = sorted(values)
    if not xs:
        return {"n": 0, "p50": None, "p95": None, "max": None, "total": 0.0}

    def rank(q: float) -> float:
        return round(xs[max(0, math.ceil(q * len(xs)) - 1)], 3)

    return {
        "n": len(xs),
        "p50": rank(0.5),
        "p95": rank(0.95),
        "max": round(xs[-1], 3),
        "total": round(sum(xs), 2),
    }


def _account(sweep: _Sweep, holders: dict[int, _Holder], dt: float) -> None:
    """Add `dt` seconds of the current state to the sweep."""
    category, shared, entrants = _category(holders.values())
    sweep.seconds[category] += dt
    sweep.kept_out_s += entrants * dt
    sweep.shared_holder_s += shared * dt
    for h in holders.values():
        if h.hold == "exclusive":
            _add(sweep.alone_by_stage, h.stage or "?", dt)
        elif h.hold == "shared":
            _add(sweep.shared_by_stage, h.work or "?", dt)
    if category == "drain":
        working = [h for h in holders.values() if h.hold == "shared"]
        key = (working[0].work or "?") if len(working) == 1 else "several"
        _add(sweep.drain_by_stage, key, dt)


def _apply(
    holders: dict[int, _Holder], sweep: _Sweep, t: float, pid: int, event: str, detail: str
) -> None:
    h = holders.setdefault(pid, _Holder(since=t))
    if event == "stage":
        h.stage = detail
        if not detail.startswith(("gate", "memory")):
            h.work = detail
    elif event.startswith("want_"):
        h.want, h.since = event[5:], t
    elif event in ("shared", "exclusive"):
        if event == "exclusive" and h.want == "exclusive":
            sweep.waits.append(t - h.since)
        h.hold, h.want, h.since = event, None, t
    elif event == "out":
        if h.hold == "exclusive":
            sweep.holds.append(t - h.since)
        h.hold = None


def summarise(
    events: list[tuple[float, int, str, str]], start: float | None = None, end: float | None = None
) -> dict:
    """The gate's time by category over [start, end] (default: the first to the last event)."""
    if not events:
        return {"events": 0}
    start = events[0][0] if start is None else start
    end = events[-1][0] if end is None else end
    window = max(end - start, 1e-9)
    holders: dict[int, _Holder] = {}
    sweep = _Sweep()
    last = start
    for t, pid, event, detail in events:
        if t > last and t > start:
            _account(sweep, holders, min(t, end) - max(last, start))
        last = max(last, t)
        _apply(holders, sweep, t, pid, event, detail)
        if t >= end:
            break
    if end > last:
        _account(sweep, holders, end - last)

    def rounded(table: dict) -> dict:
        ordered = sorted(table.items(), key=lambda kv: -kv[1])
        return {k: round(v, 2) for k, v in ordered if v >= 0.005}

    busy = window - sweep.seconds["idle"] - sweep.seconds["idle_waiting"]
    return {
        "events": len(events),
        "processes": len(holders),
        "window_s": round(window, 2),
        "seconds": {k: round(v, 2) for k, v in sweep.seconds.items()},
        "fraction": {k: round(v / window, 3) for k, v in sweep.seconds.items()},
        # processes kept out of the gate (waiting to enter or to come back), summed
        "kept_out_s": round(sweep.kept_out_s, 2),
        "mean_shared_holders": round(sweep.shared_holder_s / busy, 2) if busy > 0 else None,
        "alone_by_stage": rounded(sweep.alone_by_stage),
        "drain_by_stage": rounded(sweep.drain_by_stage),
        "shared_by_stage": rounded(sweep.shared_by_stage),
        "exclusive_holds_s": _spread(sweep.holds),
        "timer_waits_s": _spread(sweep.waits),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.gate_trace FILE", file=sys.stderr)
        return 2
    print(json.dumps(summarise(read(Path(args[0]))), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
