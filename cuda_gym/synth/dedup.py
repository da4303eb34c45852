"""Decontamination and near-duplicate removal: AST similarity and operator-chain signatures.

Similarity compares the token sequences of two task files' `Model` classes (plus `get_inputs`):
node types, torch API names (attributes and keywords) and normalised local names, with numbers
and strings erased — so renaming variables, changing sizes or comments does not hide a copy.
The score is difflib's ratio of the two sequences (1.0 = the same structure).
"""

from __future__ import annotations

import ast
import difflib
import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

KEPT_ROOTS = {"torch", "nn", "F", "self"}
SECTIONS = ("Model", "get_inputs")


def _interesting(tree: ast.Module) -> list[ast.AST]:
    nodes = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))]
    picked = [n for n in nodes if n.name in SECTIONS]
    return picked or nodes


def ast_tokens(source: str) -> list[str]:
    """The normalised token sequence of a task's Model class and get_inputs.

    Raises:
        SyntaxError: The source does not parse.
    """
    tree = ast.parse(source)
    tokens: list[str] = []
    for top in _interesting(tree):
        local_names: dict[str, str] = {}
        for node in ast.walk(top):
            if isinstance(node, ast.Expr) and isinstance(
                getattr(node, "value", None), ast.Constant
            ):
                continue  # docstrings
            if isinstance(node, (ast.Load, ast.Store, ast.Del)):
                continue
            tokens.append(type(node).__name__)
            if isinstance(node, ast.Attribute):
                tokens.append(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                tokens.append(node.arg)
            elif isinstance(node, ast.Name):
                if node.id in KEPT_ROOTS:
                    tokens.append(node.id)
                else:
                    tokens.append(local_names.setdefault(node.id, f"v{len(local_names)}"))
            elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
                tokens.append(str(node.value))
    return tokens


def similarity(a: list[str], b: list[str]) -> float:
    """Similarity of two token sequences, 0 to 1 (difflib ratio)."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@dataclass(frozen=True)
class Match:
    """The closest reference problem to a task."""

    score: float
    path: str


class ReferenceIndex:
    """Token sequences of every KernelBench-format `.py` file under a directory.

    Args:
        root: A directory, searched recursively (e.g. a KernelBench checkout).

    Raises:
        FileNotFoundError: `root` is not a directory.
    """

    def __init__(self, root: str | Path) -> None:
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"decontamination directory not found: {root}")
        self.root = root
        self.entries: list[tuple[str, list[str]]] = []
        for path in sorted(root.rglob("*.py")):
            try:
                text = path.read_text(errors="replace")
                if "class Model" not in text:
                    continue
                self.entries.append((str(path), ast_tokens(text)))
            except (SyntaxError, ValueError, OSError):
                logger.debug("skipping unparsable reference %s", path)

    def __len__(self) -> int:
        return len(self.entries)

    def closest(self, source: str, threshold: float = 0.0) -> Match:
        """The most similar reference (quick bounds skip those that cannot beat `threshold`)."""
        tokens = ast_tokens(source)
        best = Match(0.0, "")
        for path, ref in self.entries:
            matcher = difflib.SequenceMatcher(None, tokens, ref, autojunk=False)
            floor = max(best.score, threshold)
            if matcher.real_quick_ratio() <= floor or matcher.quick_ratio() <= floor:
                continue
            score = matcher.ratio()
            if score > best.score:
                best = Match(score, path)
        return best


def chain_signature(ops: list[str]) -> str:
    """Near-duplicate key: the operator chain (two tasks with the same chain are duplicates)."""
    return " -> ".join(ops)
