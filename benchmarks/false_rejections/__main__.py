"""Judge every honest solution of the false-rejection corpus; all must be accepted.

Run from the repository root:

    python -m benchmarks.false_rejections --device cpu [--out FILE.json] [--only NAME ...]

Each case in cases/ is a solution whose docstring names the style it stands for and its task
(a KernelBench-format file in tasks/); it is judged as the exploit suite judges its cases (in
this process, strict mode, without timing), with the "external" static rules that `cuda-gym
judge` applies by default, and must be accepted. The table
and a summary line go to stdout, the per-case records to --out, and the exit status is 1 if any
case is rejected.
"""

import sys

from benchmarks.case_suite import main
from benchmarks.false_rejections import SUITE

if __name__ == "__main__":
    sys.exit(main(SUITE, __doc__))
