"""The assembler the judge's compiles run: the system's, once its input is seen to read no file.

GNU as copies any file it can read into the object it makes (`.incbin "/path"`) or reads it as
more assembly (`.include`), and a solution's C++ reaches the assembler through `asm("...")`: a
kernels/ build, which the judge runs outside the sandbox, would embed the judge's cache key or
another episode's sources in a library whose errors the agent reads. Spelling tricks (string
pieces joined by the compiler, escapes, assembler macros) defeat a scan of the source, so the
check reads what the assembler reads: GCC runs the first `as` it finds on COMPILER_PATH, which
`guarded_env` points at a script that refuses input with those directives (or assembler macros,
which can spell them) and otherwise runs the real assembler.

The script lives in the judge's cache (written by trusted processes only).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

FOLDER = "assembler"
# Directives that read files, and the macro facilities that could spell them (matched in any
# case: GNU as reads `.INCBIN` as `.incbin`).
REFUSED = r"\.(incbin|include|macro|irp|irpc|altmacro)([[:space:]\"]|$)"
_SCRIPT = """#!/bin/sh
# cuda_gym's assembler guard (cuda_gym/judge/assembler_guard.py): refuse assembly that reads
# files, then run the real assembler with the same arguments.
real={real}
inputs=""
for arg in "$@"; do
  case "$arg" in
    -*) ;;
    *.s|*.S|*.asm) inputs="$inputs
$arg" ;;
  esac
done
if [ -z "$inputs" ]; then
  tmp=$(mktemp) || exit 1
  cat > "$tmp"
  if grep -Eiq '{refused}' "$tmp"; then
    rm -f "$tmp"
    echo "cuda_gym: the assembly reads files (.incbin/.include) or defines macros: refused" >&2
    exit 1
  fi
  exec 3< "$tmp"
  rm -f "$tmp"
  exec "$real" "$@" <&3
fi
printf '%s\\n' "$inputs" | while IFS= read -r file; do
  [ -n "$file" ] || continue
  if grep -Eiq '{refused}' "$file"; then
    echo "cuda_gym: $file reads files (.incbin/.include) or defines assembler macros: refused" >&2
    exit 1
  fi
done || exit 1
exec "$real" "$@"
"""


def guard_dir(cache_dir: Path) -> Path | None:
    """The folder holding the guard script (made when missing), or None without an assembler."""
    real = shutil.which("as")
    if real is None:
        return None
    folder = Path(cache_dir) / FOLDER
    script = folder / "as"
    text = _SCRIPT.format(real=shlex.quote(real), refused=REFUSED)
    if not script.is_file() or script.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        # A name of its own per writer: the judge's threads share one pid.
        fd, name = tempfile.mkstemp(prefix="as.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w") as tmp:
            tmp.write(text)
        os.chmod(name, 0o755)
        os.replace(name, script)
    return folder


def guarded_env(env: Mapping[str, str], cache_dir: Path) -> dict[str, str]:
    """`env` with COMPILER_PATH leading GCC (and nvcc's host compiles) to the guard first."""
    out = dict(env)
    folder = guard_dir(cache_dir)
    if folder is not None:
        rest = [p for p in out.get("COMPILER_PATH", "").split(os.pathsep) if p]
        out["COMPILER_PATH"] = os.pathsep.join([str(folder), *rest])
    return out
