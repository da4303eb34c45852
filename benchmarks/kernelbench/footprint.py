"""How much GPU memory judging a problem takes, estimated without allocating any.

KernelBench's largest level-1 problems have 6-8 GiB inputs and outputs; a judgement holds five
input sets and up to seven output sets on the GPU at once (the correctness trials, the repeat,
the timed call's), about 72 GiB for a 6 GiB problem. Two of those beside each other do not fit an
H200 (140 GiB): the second runs out of memory, costing its time and a rerun alone. The harness
uses these estimates to keep problems that would not fit together apart (executor.py).

In `strict` mode the reference worker also computes float64 outputs, and can need more than the
candidate's worker where outputs outweigh inputs (worker.run_reference): trial 0's and the timed
set's expected outputs are kept in float32 and float64 (six output sets' worth), the current
trial's in both (three more), the candidate's trial beside them (one), and the inputs in float32
and float64 (three input sets' worth) while the float64 pass runs; the weights once more in
float64. A strict estimate is the larger of the two workers'.

Two terms come from measurement rather than from counting sets. Peaks measured on the H200
(PyTorch's reserved bytes, results/kernelbench_footprint_*_h200.json) exceeded the counted sets
where a problem's outputs are much smaller than its inputs (losses, reductions, pooling): by
about four times the difference in the candidate's worker and six in the strict reference's
(the inputs cloned for every call and freed again, in cached blocks that the small outputs do
not reuse). And a forward pass holds intermediates beside its outputs (cumsum's flip and
concatenation, a loss's elementwise terms): their peak beyond the outputs is added once, twice
in float64. The sum gets 10% headroom: the measured ratios of peak to estimate sat up to 7%
above the counted sets even where inputs and outputs are the same size.

The estimate runs the problem's `get_inputs()`, `Model(...)` and `forward` on PyTorch's "meta"
device, which computes shapes and dtypes but allocates nothing. Where forward cannot run there
(data-dependent operators) or is slow there (recurrent layers), the outputs are taken to be as
large as the inputs, with no intermediates.

    python -m benchmarks.kernelbench.footprint --kernelbench-dir DIR [--levels 1,2,3] \
        [--tolerance-mode paper|strict] [--run OUT] [--out F.json]

prints every problem's estimate and, with --run, the peak each judgement measured (the judge's
`device_peak_bytes` flag: PyTorch's reserved bytes in the candidate and reference workers) beside
it, so the estimate can be checked against a GPU run.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.kernelbench.problems import Problem, discover_problems
from benchmarks.kernelbench.records import read_record
from benchmarks.kernelbench.report import print_summary
from cuda_gym.judge.config import MODES
from cuda_gym.judge.verdict import Flag

logger = logging.getLogger(__name__)

INPUT_SETS = 5  # the judge's correctness trials, each with its own input set
OUTPUT_SETS = 7  # five trials, the repeat, the timed call's output
SLACK_BYTES = 2 << 30  # the input transforms' pieces, the allocator's rounding, CUDA context
# The strict reference worker's peak, in float32 input and output sets (see the module doc).
STRICT_REFERENCE_INPUT_SETS = 3
STRICT_REFERENCE_OUTPUT_SETS = 10
# Measured, not counted (see the module doc): per byte by which the inputs outweigh the outputs.
SHRINK_SETS = 4
STRICT_REFERENCE_SHRINK_SETS = 6
HEADROOM = 1.1


class _LiveBytes(TorchDispatchMode):
    """The peak bytes of the tensors an operator sequence holds at once (on the meta device).

    Every operator's new storage counts from its creation until its tensor is collected; views
    share their base's storage and add nothing.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._storages: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor) and t._base is None:
                self._count(t)
        return out

    def _count(self, t: torch.Tensor) -> None:
        key = t.untyped_storage()._cdata
        nbytes = t.untyped_storage().nbytes()
        if not nbytes or key in self._storages:
            return
        self._storages.add(key)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(t, self._free, key, nbytes)

    def _free(self, key: int, nbytes: int) -> None:
        self._storages.discard(key)
        self.live -= nbytes


def _tensor_bytes(values) -> int:
    items = values if isinstance(values, (list, tuple)) else [values]
    return sum(v.numel() * v.element_size() for v in items if isinstance(v, torch.Tensor))


def _load(problem: Problem):
    spec = importlib.util.spec_from_file_location(f"kb_footprint_{problem.path.stem}", problem.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def estimate_bytes(problem: Problem, tolerance_mode: str = "paper") -> int | None:
    """Peak GPU bytes of judging `problem` in `tolerance_mode` (see the module doc), or None."""
    try:
        module = _load(problem)
        with torch.device("meta"):
            inputs = module.get_inputs()
            in_bytes = _tensor_bytes(inputs)
            weight_bytes = 0
            out_bytes = in_bytes
            held_bytes = 0  # the forward's intermediates beyond its outputs, at their peak
            try:
                model = module.Model(*module.get_init_inputs())
                weight_bytes = _tensor_bytes([*model.parameters(), *model.buffers()])
                # Recurrent layers run step by step on the meta device (seconds each); their
                # outputs are no larger than their inputs in KernelBench.
                if not any(isinstance(m, torch.nn.RNNBase) for m in model.modules()):
                    live = _LiveBytes()
                    with torch.no_grad(), live:
                        out_bytes = _tensor_bytes(model(*inputs))
                    held_bytes = max(live.peak - out_bytes, 0)
            except Exception as exc:  # data-dependent ops, or none on the meta device
                logger.debug("%s: forward not run on meta (%s)", problem.key, exc)
    except Exception as exc:  # the problem's own error is reported when it is judged
        logger.debug("%s: no memory estimate (%s)", problem.key, exc)
        return None
    shrink = max(in_bytes - out_bytes, 0)
    peak = (
        INPUT_SETS * in_bytes
        + OUTPUT_SETS * out_bytes
        + 2 * weight_bytes
        + SHRINK_SETS * shrink
        + held_bytes
    )
    if tolerance_mode == "strict":
        reference = (
            STRICT_REFERENCE_INPUT_SETS * in_bytes
            + STRICT_REFERENCE_OUTPUT_SETS * out_bytes
            + 3 * weight_bytes
            + STRICT_REFERENCE_SHRINK_SETS * shrink
            + 2 * held_bytes
        )
        peak = max(peak, reference)
    return int(HEADROOM * peak) + SLACK_BYTES


def measured_bytes(record: dict | None) -> int | None:
    """The larger of a judgement's two workers' peak reserved bytes, if its record has them."""
    peaks = (((record or {}).get("verdict") or {}).get("flags") or {}).get(Flag.DEVICE_PEAK_BYTES)
    if not isinstance(peaks, dict):
        return None
    values = [p.get("reserved") for p in peaks.values() if isinstance(p, dict)]
    values = [v for v in values if type(v) is int]
    return max(values) if values else None


def check_estimates(
    kernelbench_dir: Path, levels: tuple[int, ...], run: Path | None, tolerance_mode: str = "paper"
) -> dict:
    """Each problem's estimate (GiB), with the run's measured peak and their ratio where known."""
    gib = float(1 << 30)
    rows = []
    for problem in discover_problems(kernelbench_dir, levels):
        est = estimate_bytes(problem, tolerance_mode)
        meas = measured_bytes(read_record(run, problem)) if run else None
        rows.append(
            {
                "problem": problem.key,
                "estimate_gib": None if est is None else round(est / gib, 3),
                "measured_gib": None if meas is None else round(meas / gib, 3),
                "measured_over_estimate": round(meas / est, 3) if est and meas else None,
            }
        )
    ratios = [r["measured_over_estimate"] for r in rows if r["measured_over_estimate"]]
    return {
        "kernelbench_dir": str(kernelbench_dir),
        "run": str(run) if run else None,
        "tolerance_mode": tolerance_mode,
        "problems": len(rows),
        "estimated": sum(r["estimate_gib"] is not None for r in rows),
        "measured": len(ratios),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
        # Where the estimate was too low, problems it let run together could still collide.
        "under_estimated": [r["problem"] for r in rows if (r["measured_over_estimate"] or 0) > 1],
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict:
    """Print the check as JSON (and write it to --out)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernelbench-dir", required=True)
    p.add_argument("--levels", default="1,2,3")
    p.add_argument(
        "--tolerance-mode",
        "--mode",  # the old name, kept as an alias
        dest="tolerance_mode",
        choices=MODES,
        default="paper",
        help="precision (--mode is a deprecated alias)",
    )
    p.add_argument("--run", default=None, help="a harness output directory with records")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    levels = tuple(int(x) for x in a.levels.split(",") if x.strip())
    run = Path(a.run) if a.run else None
    result = check_estimates(Path(a.kernelbench_dir), levels, run, a.tolerance_mode)
    print_summary(result, a.out)
    return result


if __name__ == "__main__":
    main()
