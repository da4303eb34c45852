"""`python -m cuda_gym ...`: the `cuda-gym` command line (see cuda_gym/cli.py)."""

import sys

from cuda_gym.cli import main

sys.exit(main())
