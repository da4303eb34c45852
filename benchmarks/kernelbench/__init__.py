"""The KernelBench harness: `python -m benchmarks.kernelbench` (see __main__.py)."""
