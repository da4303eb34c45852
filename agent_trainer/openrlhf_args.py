"""Check command lines against OpenRLHF's own argument parser and its post-parse checks.

OpenRLHF's CLIs build their parser inside `if __name__ == "__main__":`, next to the imports of
Ray, DeepSpeed and vLLM. This runs that block of the installed module, minus the final
`train(args)` call, with `sys.argv` set to the given flags: the flags are parsed and checked
by OpenRLHF's own code, without starting a run (so it works on a CPU-only machine).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import os
import sys
from datetime import datetime
from types import SimpleNamespace


class OpenRLHFArgsError(ValueError):
    """OpenRLHF's parser or its checks rejected a command line."""


def _main_block(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"{module} is not installed (pip install openrlhf)")
    tree = ast.parse(open(spec.origin).read(), spec.origin)
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
            body = [stmt for stmt in node.body if not _is_train_call(stmt)]
            return ast.Module(body=body, type_ignores=[])
    raise OpenRLHFArgsError(f"{module} has no __main__ block to take the parser from")


def _is_train_call(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "train")


def parse_openrlhf_args(module: str, args: list[str]) -> SimpleNamespace:
    """Parse and check `args` exactly as `python -m module args...` would before training.

    Returns:
        OpenRLHF's hierarchical args namespace (e.g. `ns.actor.adam.lr`).

    Raises:
        OpenRLHFArgsError: A flag is unknown or malformed, or a post-parse check failed.
    """
    code = compile(_main_block(module), f"<{module} __main__>", "exec")
    namespace = {"__name__": "agent_trainer_args_check", "argparse": argparse, "os": os,
                 "datetime": datetime}
    old_argv = sys.argv
    stderr = io.StringIO()
    sys.argv = [module, *args]
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            exec(code, namespace)
    except SystemExit as exc:
        lines = stderr.getvalue().strip().splitlines() or ["(no message)"]
        raise OpenRLHFArgsError(f"{module} rejected the flags: {lines[-1]}") from exc
    except (AssertionError, AttributeError, TypeError, ValueError) as exc:
        raise OpenRLHFArgsError(f"{module} check failed: {type(exc).__name__}: {exc}") from exc
    finally:
        sys.argv = old_argv
    # argparse also accepts unambiguous prefixes of flags; ours must be spelled out in full.
    known = namespace["parser"]._option_string_actions
    inexact = [a for a in args if a.startswith("--") and a not in known]
    if inexact:
        raise OpenRLHFArgsError(f"{module} knows no flag spelled {inexact} (only a prefix "
                                "of one)")
    return namespace["args"]
