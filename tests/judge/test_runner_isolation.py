"""The untrusted runner holds nothing of the judge: no cuda_gym import, started isolated."""

import ast

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
