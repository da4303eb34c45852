"""Data synthesis: compose torch operators into KernelBench-format tasks and filter them.

Stages, one module each: `catalogue` (operators and their rules), `compose` (operator chains
into task files), `filters` (execution filters, run in workers), `dedup` (decontamination and
near-duplicates), `pool` (where filters run), `pipeline` (the loop), `store` (parquet output).
`cuda-gym synth` is the command line.
"""

from cuda_gym.synth.catalogue import OpSpec, catalogue
from cuda_gym.synth.compose import Candidate, compose
from cuda_gym.synth.config import SynthConfig
from cuda_gym.synth.pipeline import SynthRun, synthesize
from cuda_gym.synth.store import write_output, write_parquet

__all__ = [
    "Candidate",
    "OpSpec",
    "SynthConfig",
    "SynthRun",
    "catalogue",
    "compose",
    "synthesize",
    "write_output",
    "write_parquet",
]
