"""The import rules of STYLE.md, read from the source (every import statement, lazy ones too).

- `cuda_gym` never imports `agent_trainer`.
- Imports point one way: env -> tools -> judge -> runtime; the env and the tools never import
  `cuda_gym.runtime` (they judge through `cuda_gym.judge.client`).
- Nothing imports `cuda_gym.synth` except the package's own modules and the CLI.
- Tasks and skills are data: they import nothing of the judge, the runtime, the env or tools.
- No import loops between modules of `cuda_gym` or of `agent_trainer`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cuda_gym", "agent_trainer")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if "builtin" not in p.parts  # task data files, not modules of the package
    }


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of MODULES that an imported dotted name refers to (longest prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    """Every module of MODULES that `module` imports, anywhere in its file."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                found.add(target)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def _in(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_cuda_gym_never_imports_agent_trainer():
    bad = {m: sorted(t for t in ts if _in(t, "agent_trainer")) for m, ts in GRAPH.items()}
    assert not {m: t for m, t in bad.items() if _in(m, "cuda_gym") and t}


@pytest.mark.parametrize("layer", ["cuda_gym.env", "cuda_gym.tools", "cuda_gym.config"])
def test_env_and_tools_never_import_the_runtime(layer):
    bad = {
        m: sorted(t for t in ts if _in(t, "cuda_gym.runtime"))
        for m, ts in GRAPH.items()
        if _in(m, layer)
    }
    assert not {m: t for m, t in bad.items() if t}


def test_only_the_cli_imports_synth():
    allowed = {"cuda_gym.cli"}
    bad = {
        m
        for m, ts in GRAPH.items()
        if not _in(m, "cuda_gym.synth")
        and m not in allowed
        and any(_in(t, "cuda_gym.synth") for t in ts)
    }
    assert not bad


@pytest.mark.parametrize("data", ["cuda_gym.tasks", "cuda_gym.skills"])
def test_tasks_and_skills_are_data(data):
    above = ("cuda_gym.judge", "cuda_gym.runtime", "cuda_gym.env", "cuda_gym.tools")
    bad = {
        m: sorted(t for t in ts if any(_in(t, a) for a in above))
        for m, ts in GRAPH.items()
        if _in(m, data)
    }
    assert not {m: t for m, t in bad.items() if t}


def test_the_judge_never_imports_the_env_or_the_tools():
    upper = ("cuda_gym.env", "cuda_gym.tools", "cuda_gym.vector", "cuda_gym.single_turn")
    bad = {
        m: sorted(t for t in ts if any(_in(t, u) for u in upper))
        for m, ts in GRAPH.items()
        if _in(m, "cuda_gym.judge") or _in(m, "cuda_gym.runtime") or _in(m, "cuda_gym.tasks")
    }
    assert not {m: t for m, t in bad.items() if t}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in GRAPH[node]:
            # A package's __init__ importing its own submodules is how a package is assembled.
            if _in(nxt, node):
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


def test_no_import_loops():
    assert _cycles() == []
