"""The false-rejection corpus: honest solutions in the styles found in the wild, all to be accepted.

tasks/ holds KernelBench-format tasks (structured inputs, long reductions, several outputs, ...);
cases/ holds one honest solution per style, its docstring in the exploit suite's format with
`Expect: accept`. `python -m benchmarks.false_rejections --device cpu` judges them (see __main__);
benchmarks/results/false_rejections_cpu.json holds the last full CPU run.
"""
