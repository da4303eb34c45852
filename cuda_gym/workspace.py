"""A per-episode private workspace: the reference and skills (read-only), the agent's files.

Layout::

    model.py              the task's reference (read-only, hash-checked)
    model_new.py          the agent's solution: class ModelNew
    kernels/              the agent's kernel sources, built into `kernels_ext`
    skills/NAME/SKILL.md  skill documents (read-only, hash-checked)

Every path the agent names goes through `resolve`, which refuses absolute paths, `..`,
symbolic links and writes outside `model_new.py` and `kernels/`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from cuda_gym.skills import Skill

REFERENCE_FILE = "model.py"
SOLUTION_FILE = "model_new.py"
KERNELS_DIR = "kernels"
SKILLS_DIR = "skills"
MAX_FILE_BYTES = 512 * 1024
MAX_KERNEL_FILES = 64
KERNEL_SUFFIXES = {
    "cuda": (".cu", ".cuh", ".cpp", ".h", ".hpp"),
    "cpu": (".cpp", ".h", ".hpp"),
}

SOLUTION_TEMPLATE = '''"""Your solution: define ModelNew with Model's constructor and forward.

Build your kernels from kernels/ with the `compile` tool, then `import kernels_ext` here and call
them from forward(). Read the `workspace` skill for a complete example.
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        raise NotImplementedError("ModelNew is not written yet")
'''


class WorkspacePathError(ValueError):
    """A path given by the agent is not allowed; the message says why (shown to the agent)."""


@dataclass(frozen=True)
class FileEntry:
    """One file in the workspace listing."""

    path: str
    size_bytes: int
    writable: bool


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Workspace:
    """A temporary directory holding one episode's files.

    Args:
        reference_source: The task code, written as read-only `model.py`.
        skills: Skill documents, written read-only under `skills/`.
        device: "cuda" or "cpu"; decides which kernel file types may be written.
        parent_dir: Where to create the temporary directory (default: the system temp dir).
    """

    def __init__(
        self,
        reference_source: str,
        skills: list[Skill],
        device: str,
        parent_dir: str | os.PathLike | None = None,
    ) -> None:
        self.device = device
        self.root = Path(tempfile.mkdtemp(prefix="cuda_gym_ws_", dir=parent_dir))
        self._protected: dict[str, bytes] = {REFERENCE_FILE: reference_source.encode()}
        for skill in skills:
            self._protected[f"{SKILLS_DIR}/{skill.name}/SKILL.md"] = skill.text.encode()
        self._hashes = {
            rel: hashlib.sha256(data).hexdigest() for rel, data in self._protected.items()
        }
        for rel in self._protected:
            self._write_protected(rel)
        (self.root / KERNELS_DIR).mkdir()
        (self.root / SOLUTION_FILE).write_text(SOLUTION_TEMPLATE)

    # -- paths --------------------------------------------------------------------------------

    def resolve(self, path: str, *, for_write: bool = False) -> Path:
        """Map an agent-supplied relative path to a file inside the workspace.

        Raises:
            WorkspacePathError: The path escapes the workspace, goes through a link, or (for
                writes) is not `model_new.py` or an allowed source file under `kernels/`.
        """
        if not isinstance(path, str) or not path.strip():
            raise WorkspacePathError("path must be a non-empty relative path like 'kernels/k.cu'")
        if "\x00" in path:
            raise WorkspacePathError("path contains a NUL byte")
        pure = PurePosixPath(path.strip())
        if pure.is_absolute() or ".." in pure.parts:
            raise WorkspacePathError(
                f"{path!r}: use a path relative to the workspace root, without '..'"
            )
        parts = [p for p in pure.parts if p != "."]
        if not parts:
            raise WorkspacePathError(f"{path!r} names the workspace root, not a file")
        target = self.root.joinpath(*parts)
        current = self.root
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise WorkspacePathError(f"{path!r}: symbolic links are not followed")
        if for_write:
            rel = "/".join(parts)
            if rel == SOLUTION_FILE:
                return target
            if parts[0] != KERNELS_DIR or len(parts) < 2:
                raise WorkspacePathError(
                    f"{path!r} is read-only: only {SOLUTION_FILE} and files under {KERNELS_DIR}/ "
                    "may be written"
                )
            allowed = KERNEL_SUFFIXES[self.device]
            if target.suffix not in allowed:
                raise WorkspacePathError(
                    f"{path!r}: kernel files on the {self.device} device must end in "
                    + ", ".join(allowed)
                )
        return target

    def relative(self, path: Path) -> str:
        """The workspace-relative POSIX path of `path`."""
        return path.relative_to(self.root).as_posix()

    # -- listing ------------------------------------------------------------------------------

    def list_files(self) -> list[FileEntry]:
        """Every regular file, sorted by path, with size and whether the agent may write it."""
        entries = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                full = Path(dirpath) / name
                if full.is_symlink() or not full.is_file():
                    continue
                rel = self.relative(full)
                writable = rel == SOLUTION_FILE or rel.startswith(KERNELS_DIR + "/")
                entries.append(FileEntry(rel, full.stat().st_size, writable))
        return entries

    def count_kernel_files(self) -> int:
        """Number of files under kernels/."""
        return sum(1 for e in self.list_files() if e.path.startswith(KERNELS_DIR + "/"))

    # -- protection ---------------------------------------------------------------------------

    def _write_protected(self, rel: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.chmod(stat.S_IWUSR | stat.S_IRUSR)
                path.unlink()
        path.write_bytes(self._protected[rel])
        path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)

    def restore_protected(self) -> list[str]:
        """Check every protected file against its hash; restore and name those that changed."""
        changed = []
        for rel, digest in self._hashes.items():
            path = self.root / rel
            ok = path.is_file() and not path.is_symlink() and _sha256(path) == digest
            if not ok:
                changed.append(rel)
                self._write_protected(rel)
        return changed

    def close(self) -> None:
        """Delete the workspace directory (safe to call twice)."""
        if self.root.exists():
            for dirpath, dirnames, filenames in os.walk(self.root):
                for name in dirnames + filenames:
                    full = os.path.join(dirpath, name)
                    if not os.path.islink(full):
                        os.chmod(full, stat.S_IRWXU)
            shutil.rmtree(self.root, ignore_errors=True)
