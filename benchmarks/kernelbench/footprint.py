"""How much GPU memory judging a problem takes, estimated without allocating any.

KernelBench's largest level-1 problems have 6-8 GiB inputs and outputs; a judgement holds five
input sets and up to seven output sets on the GPU at once (the correctness trials, the repeat,
the timed call's), about 72 GiB for a 6 GiB problem. Two of those beside each other do not fit an
H200 (140 GiB): the second runs out of memory, costing its time and a rerun alone. The harness
uses these estimates to keep problems that would not fit together apart (executor.py).

The estimate runs the problem's `get_inputs()`, `Model(...)` and `forward` on PyTorch's "meta"
device, which computes shapes and dtypes but allocates nothing. Where forward cannot run there
(data-dependent operators) or is slow there (recurrent layers), the outputs are taken to be as
large as the inputs.
"""

from __future__ import annotations

import importlib.util
import logging

import torch

from benchmarks.kernelbench.problems import Problem

logger = logging.getLogger(__name__)

INPUT_SETS = 5  # the judge's correctness trials, each with its own input set
OUTPUT_SETS = 7  # five trials, the repeat, the timed call's output
SLACK_BYTES = 2 << 30  # the input transforms' pieces, the allocator's rounding, CUDA context


def _tensor_bytes(values) -> int:
    items = values if isinstance(values, (list, tuple)) else [values]
    return sum(v.numel() * v.element_size() for v in items if isinstance(v, torch.Tensor))


def _load(problem: Problem):
    spec = importlib.util.spec_from_file_location(f"kb_footprint_{problem.path.stem}", problem.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def estimate_bytes(problem: Problem) -> int | None:
    """Peak GPU bytes of judging `problem` (see the module doc), or None if it cannot be told."""
    try:
        module = _load(problem)
        with torch.device("meta"):
            inputs = module.get_inputs()
            in_bytes = _tensor_bytes(inputs)
            weight_bytes = 0
            out_bytes = in_bytes
            try:
                model = module.Model(*module.get_init_inputs())
                weight_bytes = _tensor_bytes([*model.parameters(), *model.buffers()])
                # Recurrent layers run step by step on the meta device (seconds each); their
                # outputs are no larger than their inputs in KernelBench.
                if not any(isinstance(m, torch.nn.RNNBase) for m in model.modules()):
                    with torch.no_grad():
                        out_bytes = _tensor_bytes(model(*inputs))
            except Exception as exc:  # data-dependent ops, or none on the meta device
                logger.debug("%s: forward not run on meta (%s)", problem.key, exc)
    except Exception as exc:  # the problem's own error is reported when it is judged
        logger.debug("%s: no memory estimate (%s)", problem.key, exc)
        return None
    return INPUT_SETS * in_bytes + OUTPUT_SETS * out_bytes + 2 * weight_bytes + SLACK_BYTES
