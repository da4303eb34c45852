"""KernelBench problems on disk: `KernelBench/level<L>/<id>_<Name>.py`, loaded as tasks."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from cuda_gym.errors import ConfigError
from cuda_gym.tasks import Task, task_from_file

PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")


@dataclass(frozen=True)
class Problem:
    """One KernelBench problem file.

    Attributes:
        level: The level number (1, 2, 3, ...).
        problem_id: The number before the first underscore of the file name.
        name: The file stem, e.g. "19_ReLU".
        path: The problem file.
    """

    level: int
    problem_id: int
    name: str
    path: Path

    @property
    def key(self) -> str:
        """ "level1/19_ReLU": the problem's place in records, solutions and trajectories."""
        return f"level{self.level}/{self.name}"

    @property
    def file_sha256(self) -> str:
        """SHA-256 of the file's bytes."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def task(self) -> Task:
        """The problem as a Task (id = file stem). Raises TaskFormatError for a bad file."""
        return task_from_file(self.path, task_id=self.name)


def levels_root(kernelbench_dir: Path) -> Path:
    """The folder holding level1/, level2/...: `DIR/KernelBench` or DIR itself."""
    kernelbench_dir = Path(kernelbench_dir)
    for candidate in (kernelbench_dir / "KernelBench", kernelbench_dir):
        if any(candidate.glob("level[0-9]*")):
            return candidate
    raise ConfigError(
        f"{kernelbench_dir} holds no KernelBench levels: expected KernelBench/level1/... "
        "(a KernelBench checkout) or level1/... (its KernelBench folder)"
    )


def discover_problems(
    kernelbench_dir: Path,
    levels: tuple[int, ...],
    only: tuple[str, ...] | None = None,
    limit: int | None = None,
) -> list[Problem]:
    """The problems of `levels`, sorted by level then id.

    Args:
        kernelbench_dir: A KernelBench checkout or its KernelBench folder.
        levels: Levels to take.
        only: Keep only problems whose id ("19") or stem ("19_ReLU") is listed.
        limit: Keep at most this many problems per level (lowest ids first).

    Raises:
        ConfigError: A level folder is missing or empty, or `only` matches nothing.
    """
    root = levels_root(kernelbench_dir)
    problems: list[Problem] = []
    for level in levels:
        folder = root / f"level{level}"
        if not folder.is_dir():
            raise ConfigError(f"no level{level} folder in {root}")
        found = []
        for path in folder.glob("*.py"):
            match = PROBLEM_FILE.match(path.name)
            if match:
                found.append(Problem(level, int(match.group(1)), path.stem, path))
        if not found:
            raise ConfigError(f"{folder} holds no problem files (<id>_<Name>.py)")
        found.sort(key=lambda p: (p.problem_id, p.name))
        if only:
            wanted = set(only)
            found = [p for p in found if str(p.problem_id) in wanted or p.name in wanted]
        problems += found[:limit] if limit else found
    if not problems:
        raise ConfigError(f"no problem matches {list(only or [])} in levels {list(levels)}")
    return problems
