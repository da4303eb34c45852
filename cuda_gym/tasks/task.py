"""The task format: a KernelBench-style PyTorch module with its inputs, and its loaders.

A task file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`. Built-in
tasks may also define a top-level dict literal `CPU_SIZES = {"name": value, ...}`: for the CPU
device the named top-level constants take those values, so one file serves both devices. A task
may declare judge options in a top-level dict literal `JUDGE_OPTIONS`, e.g.
`JUDGE_OPTIONS = {"allow_vendor_libraries": True}` to let solutions call cuBLAS GEMMs and cuDNN
convolutions through ATen (the published rule), or `{"input_domain": "real"}` to let the judge's
input transforms scale the inputs beyond the range of the task's own draws (judge/contract.py;
"observed", the default, keeps them within it; a list gives one domain per input).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

from cuda_gym.errors import TaskFormatError, UnknownTaskError

BUILTIN_DIR = Path(__file__).parent / "builtin"
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
DEVICES = ("cuda", "cpu")
JUDGE_OPTION_NAMES = ("allow_vendor_libraries", "input_domain")


@dataclass(frozen=True)
class Task:
    """One KernelBench-format problem.

    Attributes:
        task_id: Stable identifier, e.g. the file stem `softmax_rows`.
        source: Python source of the task. After `for_device`, the exact code the agent sees as
            `model.py` and the judge runs as the reference.
        origin: Where the task came from: "builtin", a file path, or "string".
        device: "any" for a raw task, or the device it was specialised for.
    """

    task_id: str
    source: str
    origin: str = "string"
    device: str = "any"

    def __post_init__(self) -> None:
        _check_format(self.source, self.task_id)

    @property
    def content_hash(self) -> str:
        """SHA-256 of the parsed source; comments, blank lines and formatting do not change it."""
        tree = ast.parse(self.source)
        return hashlib.sha256(ast.dump(tree).encode()).hexdigest()

    @property
    def description(self) -> str:
        """The module docstring's first line, or an empty string."""
        doc = ast.get_docstring(ast.parse(self.source)) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    @property
    def judge_options(self) -> dict:
        """The task's `JUDGE_OPTIONS` dict literal, or an empty dict."""
        for node in ast.parse(self.source).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "JUDGE_OPTIONS"
            ):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError as exc:
                    raise TaskFormatError("JUDGE_OPTIONS must be a dict literal") from exc
                unknown = set(value) - set(JUDGE_OPTION_NAMES) if isinstance(value, dict) else {0}
                if unknown:
                    raise TaskFormatError(
                        f"JUDGE_OPTIONS must be a dict with keys from {JUDGE_OPTION_NAMES}"
                    )
                return value
        return {}

    def for_device(self, device: str) -> Task:
        """Return the task specialised for `device`: CPU sizes applied, `CPU_SIZES` removed.

        Args:
            device: "cuda" or "cpu".

        Returns:
            A new Task whose source is the code for that device.
        """
        if device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
        if self.device == device:
            return self
        if self.device != "any":
            raise ValueError(f"task {self.task_id!r} is already specialised for {self.device!r}")
        return replace(self, source=_specialise(self.source, device), device=device)


def _check_format(source: str, task_id: str) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TaskFormatError(f"task {task_id!r} is not valid Python: {exc}") from exc
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    missing = [name for name in REQUIRED_NAMES if name not in defined]
    if missing:
        raise TaskFormatError(
            f"task {task_id!r} is not in KernelBench format: missing {', '.join(missing)} "
            "(define class Model(nn.Module), get_inputs() and get_init_inputs())"
        )


# Full-line comments about GPU timings and hardware (e.g. "# H200 eager ~2.1 ms (...)"): true of
# the CUDA sizes only, so the CPU version of a task leaves them out.
_GPU_COMMENT = re.compile(r"^\s*#.*\b(H100|H200|HBM|cuDNN|TF32|GPU)\b")


def _specialise(source: str, device: str) -> str:
    """Apply (cpu) or drop (cuda) the `CPU_SIZES` overrides; on cpu drop GPU-only comments."""
    source = _apply_sizes(source, device)
    if device == "cpu":
        lines = source.splitlines(keepends=True)
        source = "".join(line for line in lines if not _GPU_COMMENT.match(line))
    return source


def _apply_sizes(source: str, device: str) -> str:
    """Apply (cpu) or drop (cuda) the `CPU_SIZES` overrides, editing only the affected lines."""
    tree = ast.parse(source)
    sizes_node = None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "CPU_SIZES"
        ):
            sizes_node = node
    if sizes_node is None:
        return source
    try:
        sizes = ast.literal_eval(sizes_node.value)
    except ValueError as exc:
        raise TaskFormatError("CPU_SIZES must be a dict literal of constants") from exc
    if not isinstance(sizes, dict):
        raise TaskFormatError("CPU_SIZES must be a dict literal of constants")
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = [(sizes_node.lineno, sizes_node.end_lineno, "")]
    if device == "cpu":
        assigned = set()
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in sizes
            ):
                name = node.targets[0].id
                assigned.add(name)
                indent = lines[node.lineno - 1][: node.col_offset]
                edits.append((node.lineno, node.end_lineno, f"{indent}{name} = {sizes[name]!r}\n"))
        unknown = set(sizes) - assigned
        if unknown:
            raise TaskFormatError(
                f"CPU_SIZES names {sorted(unknown)} that are not top-level constants of the task"
            )
    for start, end, text in sorted(edits, reverse=True):
        lines[start - 1 : end] = [text] if text else []
    return "".join(lines)


def builtin_task_ids() -> list[str]:
    """Ids of the built-in tasks, sorted."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.py") if not p.stem.startswith("_"))


def builtin_task(task_id: str) -> Task:
    """Load a built-in task by id.

    Raises:
        UnknownTaskError: No built-in task has that id; the message suggests close matches.
    """
    path = BUILTIN_DIR / f"{task_id}.py"
    if not path.is_file() or task_id.startswith("_"):
        ids = builtin_task_ids()
        close = difflib.get_close_matches(task_id, ids, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownTaskError(
            f"Unknown built-in task {task_id!r}.{hint} `cuda-gym tasks list --source builtin` "
            "shows all."
        )
    return Task(task_id=task_id, source=path.read_text(), origin="builtin")


def task_from_file(path: str | Path, task_id: str | None = None) -> Task:
    """Load a task from a KernelBench-format `.py` file; the id defaults to the file stem."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"task file not found: {path}")
    return Task(task_id=task_id or path.stem, source=path.read_text(), origin=str(path))


def task_from_string(source: str, task_id: str = "custom") -> Task:
    """Make a task from KernelBench-format source text."""
    return Task(task_id=task_id, source=source, origin="string")
