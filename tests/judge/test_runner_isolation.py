"""The untrusted runner holds nothing of the judge: no cuda_gym import, started isolated."""

import ast
import subprocess
import sys

from cuda_gym.judge import protocol, runner
from cuda_gym.judge.untrusted import RUNNER_PATH


def test_the_runner_imports_no_cuda_gym_module():
    tree = ast.parse(RUNNER_PATH.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    assert not any(n.split(".")[0] == "cuda_gym" for n in names), names


def test_the_runners_replies_have_the_protocols_fields():
    """The runner builds its replies by hand; they must decode as the protocol's dataclasses."""
    ready = {"error": None, "build_failed": False, "weights_not_copied": []}
    protocol.decode(protocol.RunnerReady, ready)
    source = RUNNER_PATH.read_text()
    for field in ("call_id", "error", "violations", "values", "own_calls", "profile_rows"):
        assert f'"{field}"' in source
    assert runner.ERROR_CHARS > 0


def test_the_fallback_ban_neither_imports_dynamo_nor_lets_compute_through():
    """Torch wraps a dispatch mode's handler in torch._dynamo.disable unless told not to; its
    first call then imports torch._dynamo (seconds of CPU in every candidate's first call)."""
    code = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(RUNNER_PATH.parent)!r})\n"
        "import runner\n"
        "ban = runner._Ban(torch, {'aten::empty_like'})\n"
        "x = torch.ones(4)\n"
        "with ban.active():\n"
        "    torch.empty_like(x)\n"
        "    try:\n"
        "        torch.sigmoid(x)\n"
        "    except RuntimeError:\n"
        "        pass\n"
        "print('torch._dynamo' in sys.modules, len(ban.violations))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "1"]
