"""Ready-made KernelBench-style solutions: find the one for a problem, lay it out for the judge.

A KernelBench solution is one Python file defining `ModelNew`, usually building its kernels
with `torch.utils.cpp_extension.load_inline(name=...)` at import. The judge takes a solution
directory (`model_new.py` + optional `kernels/`), so the file becomes `model_new.py` unchanged
but for one adaptation: the extension's `name` gets a suffix from the file's hash. Solutions
often share names (most copy the prompt's `elementwise_add`), and the judge's extension cache is
keyed by that name, so two solutions built at once could otherwise load each other's library.
A folder `level1/19_ReLU/` holding model_new.py and kernels/ is used as it is.
"""

from __future__ import annotations

import ast
import hashlib
import shutil
from pathlib import Path

from benchmarks.kernelbench.problems import Problem

BUILDERS = frozenset({"load_inline", "load"})


def find_solution(solutions_dir: Path, problem: Problem) -> Path | None:
    """The solution of `problem` in `solutions_dir`, or None.

    Looked up, in order: `level<L>/<stem>.py`, the folder `level<L>/<stem>/`, and
    KernelBench's generation layout `level_<L>_problem_<id>_sample_0_kernel.py`.
    """
    level_dir = solutions_dir / f"level{problem.level}"
    candidates = (
        level_dir / f"{problem.name}.py",
        level_dir / problem.name,
        solutions_dir / f"level_{problem.level}_problem_{problem.problem_id}_sample_0_kernel.py",
    )
    for path in candidates:
        if path.is_file() and path.suffix == ".py":
            return path
        if path.is_dir() and (path / "model_new.py").is_file():
            return path
    return None


def unique_extension_names(source: str) -> tuple[str, list[str]]:
    """Give every literal `name=` of a load_inline/load call a suffix from the source's hash.

    Returns:
        The adapted source and one note per renamed extension. A source that does not parse
        is returned unchanged (the judge reports the syntax error).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, []
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    targets = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called not in BUILDERS:
            continue
        name_node = next((k.value for k in node.keywords if k.arg == "name"), None)
        if name_node is None and node.args:
            name_node = node.args[0]
        if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str):
            targets.append(name_node)
    if not targets:
        return source, []
    lines = source.splitlines(keepends=True)
    notes = []
    # Right to left, so earlier offsets stay valid; offsets are UTF-8 byte columns.
    for node in sorted(targets, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        new_name = f"{node.value}_{digest}"
        first = lines[node.lineno - 1].encode()
        last = lines[node.end_lineno - 1].encode()
        replaced = first[: node.col_offset] + repr(new_name).encode() + last[node.end_col_offset :]
        lines[node.lineno - 1 : node.end_lineno] = [replaced.decode()]
        notes.append(f"extension name {node.value!r} -> {new_name!r}")
    return "".join(lines), notes[::-1]


def solution_files(solution: Path) -> tuple[dict[str, str], list[str]]:
    """The workspace files of a solution (path -> text) and the adaptations made.

    Args:
        solution: A KernelBench-style `.py` file, or a folder with model_new.py and kernels/.
    """
    if solution.is_dir():
        files = {"model_new.py": (solution / "model_new.py").read_text()}
        kernels = solution / "kernels"
        if kernels.is_dir():
            for path in sorted(kernels.rglob("*")):
                if path.is_file():
                    files[f"kernels/{path.relative_to(kernels)}"] = path.read_text()
        return files, []
    source, notes = unique_extension_names(solution.read_text())
    return {"model_new.py": source}, notes


def write_solution_dir(files: dict[str, str], dest: Path) -> Path:
    """Write solution files into a fresh judge solution directory `dest`."""
    if dest.exists():
        shutil.rmtree(dest)
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return dest
