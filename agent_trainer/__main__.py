"""`python -m agent_trainer ...` runs the agent-trainer command."""

import sys

from agent_trainer.cli import main

sys.exit(main())
