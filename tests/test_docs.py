"""The README and docs/ stay short, linked and runnable: length, links, CI command, quick start."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [
    README,
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "agent_trainer" / "README.md",
    ROOT / "benchmarks" / "README.md",
    ROOT / "benchmarks" / "results" / "README.md",
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in ("L", "N"))
    return kept.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(m) for m in re.findall(r"^#+\s+(.*)$", text, re.M)}


def _links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text()))


REPO_PATH = re.compile(r"`((?:cuda_gym|agent_trainer|benchmarks|tests|docs)/[\w./-]*)`")


@pytest.mark.parametrize(
    "doc", [d for d in DOCS if d.parent.name != "results"], ids=lambda p: str(p.relative_to(ROOT))
)
def test_repository_paths_exist(doc):
    """Every `cuda_gym/...`-style path quoted in the docs names a file or folder that exists."""
    missing = [p for p in REPO_PATH.findall(doc.read_text()) if not (ROOT / p).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} quotes paths that do not exist: {missing}"


def test_reward_is_where_the_readme_says():
    """The README's "Where the reward is computed" names the functions that compute it."""
    from cuda_gym.judge import verdict

    assert callable(verdict.milestone_reward) and callable(verdict.compute_reward)
    assert "compute_reward(" in (ROOT / "cuda_gym" / "judge" / "judge.py").read_text()
    assert verdict.milestone_reward(True, 1.06, 1.06) == 3.0


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail to docs/"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    assert doc.is_file(), f"{doc} is missing"
    broken = []
    for target in _links(doc):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line for line in ci if line.startswith("python3 -m venv")]
    assert len(commands) == 1, ".ci/run should hold one set-up-and-test command line"
    assert commands[0] in README.read_text().splitlines(), (
        "README.md's test command differs from .ci/run's; copy the line from .ci/run"
    )


def test_readme_code_blocks_compile():
    blocks = _python_blocks(README.read_text())
    assert len(blocks) >= 2, "the quick start and its native tool-call variant"
    for i, block in enumerate(blocks):
        compile(block, f"README.md python block {i + 1}", "exec")


def test_quick_start_script_writes_a_kernel_and_submits():
    """The quick start's scripted model (no env): its tool calls parse, in the intended order."""
    from cuda_gym.actions import parse_action

    namespace: dict = {}
    code = _python_blocks(README.read_text())[0]
    exec(compile(code.split("\nenv = gym.make(")[0], "README.md", "exec"), namespace)
    messages: list[dict] = []
    names = []
    for _ in range(4):
        reply = namespace["my_llm"](messages, [])
        parsed = parse_action(reply)
        assert not parsed.errors, parsed.errors
        names.append([(c.name, c.arguments.get("path")) for c in parsed.calls])
        messages.append({"role": "assistant", "content": reply})
    assert names == [
        [("write_file", "kernels/gated.cpp")],
        [("write_file", "model_new.py")],
        [("run", None)],
        [("submit", None)],
    ]


@pytest.mark.slow
def test_quick_start_runs_on_cpu(capsys):
    """The README's quick start as written: a correct solution, judged, reward 1 or more."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(_python_blocks(README.read_text())[0], "README.md", "exec"), namespace)
    info = namespace["info"]
    assert info["stop_reason"] == "submit"
    assert info["reward_components"]["correct"] is True, info.get("verdict")
    assert namespace["reward"] >= 1.0
