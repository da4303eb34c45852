"""`python -m cuda_gym.synth --n 20 --device cpu --out tasks.parquet` (same as `cuda-gym synth`)."""

import sys

from cuda_gym.synth.cli import main

sys.exit(main())
