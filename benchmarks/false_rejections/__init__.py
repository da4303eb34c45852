"""The false-rejection corpus: honest solutions in the styles found in the wild, all to be accepted.

tasks/ holds KernelBench-format tasks (structured inputs, long reductions, several outputs, ...);
cases/ holds one honest solution per style, its docstring in the suite format of
benchmarks/case_suite.py with `Expect: accept`. `python -m benchmarks.false_rejections --device
cpu` judges them (see __main__); benchmarks/results/false_rejections_cpu.json holds the last full
CPU run.
"""

from pathlib import Path

from benchmarks.case_suite import Suite

_SCALED_SHIFT_INIT = """\
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([1.5]))
        self.shift = nn.Parameter(torch.tensor([0.25]))
"""

# Solutions written elsewhere: judged with the rule set `cuda-gym judge` applies by default.
SUITE = Suite(
    "false_rejections",
    Path(__file__).resolve().parent,
    inits={"tasks/scaled_shift.py": _SCALED_SHIFT_INIT},
    accept_only=True,
    code_rules="external",
)
