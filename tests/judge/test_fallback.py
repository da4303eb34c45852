"""The fallback ban's own cost."""

import subprocess
import sys


def test_the_ban_does_not_import_dynamo():
    # TorchDispatchMode's dynamo wrapper would import torch._dynamo on the first dispatch
    # (seconds in every candidate worker); the ban skips it.
    code = (
        "import sys, torch\n"
        "from cuda_gym.judge.fallback import FallbackBan\n"
        "with FallbackBan():\n"
        "    torch.empty(3)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
