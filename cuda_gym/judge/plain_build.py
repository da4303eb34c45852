"""Kernel-only workspaces: kernels/ without torch headers, built into a plain shared library.

When no source under kernels/ includes a torch header or defines a PYBIND11_MODULE, and at
least one declares an `extern "C"` function, the workspace is built without PyTorch: each
compilation unit goes straight to `nvcc` (CUDA) or the C++ compiler, its object file is cached
by content (the unit, every header, flags, toolchain), and the objects are linked into
`libkernels.so`. An edit to one file recompiles that file alone; nothing ever parses the torch
headers, which is where most of a torch extension's build time goes.

`kernels_ext` is then a generated module that binds each `extern "C"` function
(`cuda_gym.judge.launch`): `kernels_ext.launch_scale(x, y, n)` checks its arguments against
`void launch_scale(const float* x, float* y, int64_t n)` and calls it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cuda_gym.judge import launch
from cuda_gym.judge.launch import POINTER_DTYPES, RETURN_TYPES, Param, scalar_kinds
from cuda_gym.runtime import run_process

LIBRARY = "libkernels.so"
MODULE_FILE = "kernels_ext.py"
LAUNCH_FILE = "kernels_launch.py"
_TORCH_MARKERS = re.compile(
    r"#\s*include\s*[<\"](torch/|ATen/|c10/|pybind11/|Python\.h)|PYBIND11_MODULE|PyInit_"
)
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct"}


NO_ENTRY_POINTS = (
    'kernels/ has neither a torch binding (PYBIND11_MODULE) nor an extern "C" host function to '
    "call from Python. Either write a binding against torch/extension.h, or define host "
    'functions such as\n  extern "C" void launch_scale(const float* x, float* y, int64_t n)'
    " { ... scale_kernel<<<grid, block>>>(x, y, n); }\nand call kernels_ext.launch_scale(x, y, "
    "n) with tensors for pointers."
)


class SignatureError(ValueError):
    """An `extern "C"` declaration the launcher cannot call."""


def uses_torch(files: dict[str, bytes]) -> bool:
    """Whether any source includes torch/ATen/c10/pybind11 headers or defines a Python module."""
    texts = (_strip_comments(b.decode(errors="replace")) for b in files.values())
    return any(_TORCH_MARKERS.search(t) for t in texts)


def _strip_comments(text: str) -> str:
    return _COMMENTS.sub(" ", text)


def _parse_param(text: str, index: int) -> Param:
    words = text.replace("*", " * ").replace("&", " & ").replace("std::", "").split()
    if "&" in words:
        raise SignatureError(f"parameter {index + 1} ({text.strip()}): references cannot be passed")
    stars = words.count("*")
    words = [w for w in words if w != "*" and w not in _QUALIFIERS]
    if stars > 1:
        raise SignatureError(f"parameter {index + 1} ({text.strip()}): only single pointers")
    if not words:
        raise SignatureError(f"parameter {index + 1} is empty")
    # The last word is the name when more than a type is left ("const float* x" -> x).
    name = words[-1] if len(words) > 1 else f"arg{index}"
    ctype = " ".join(words[:-1] if len(words) > 1 else words)
    if ctype.startswith("signed ") and ctype != "signed char":
        ctype = ctype.removeprefix("signed ")
    if stars:
        if ctype not in POINTER_DTYPES:
            raise SignatureError(
                f"parameter {index + 1} ({text.strip()}): pointers to {ctype} cannot be passed; "
                f"use one of {', '.join(sorted(POINTER_DTYPES))}"
            )
        return Param(ctype, True, name)
    if ctype not in scalar_kinds():
        raise SignatureError(
            f"parameter {index + 1} ({text.strip()}): type {ctype} cannot be passed; use a "
            f"pointer, {', '.join(sorted(scalar_kinds()))}"
        )
    return Param(ctype, False, name)


# Function declarations and definitions: the words and stars before the name, the name, the
# parameters, and what follows (";" declares, "{" defines).
_DECLARATION = re.compile(
    r"(?P<head>(?:[A-Za-z_][\w:]*[\s*]+)+?)(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)"
    r"\s*(?:const\s*)?(?:noexcept\s*)?(?P<end>[{;])"
)
_ATTRIBUTES = re.compile(
    r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)|__declspec\s*\([^)]*\)|\[\[[^\]]*\]\]"
)
_EXTERN_C_BLOCK = "__extern_c_block__"
_EXTERN_C_ONE = "__extern_c__"
_LEADING = frozenset(
    "static inline __inline__ __forceinline__ __host__ __global__ __device__ extern constexpr "
    f"{_EXTERN_C_ONE}".split()
)
_UNITS = (".cu", ".cpp", ".cc", ".cxx")


def _declarations(text: str):
    """Top-level function declarations of a comment-free source.

    Yields (name, leading words, return type, parameter text, defines, C linkage).
    """
    text = _ATTRIBUTES.sub(" ", text)
    text = re.sub(r"^[ \t]*#.*$", " ", text, flags=re.MULTILINE)  # preprocessor lines
    text = re.sub(r'extern\s+"C"\s*\{', _EXTERN_C_BLOCK + "{", text)
    text = re.sub(r'extern\s+"C"\s+', _EXTERN_C_ONE + " ", text)
    # Brace depth at each position, and the depth at which each extern "C" block's body is.
    depth, level, c_levels, c_depth_at = 0, [], [], []
    blocks = {m.end() - 1 for m in re.finditer(re.escape(_EXTERN_C_BLOCK) + r"\{", text)}
    for i, ch in enumerate(text):
        level.append(depth)
        c_depth_at.append(bool(c_levels) and c_levels[-1] == depth)
        if ch == "{":
            depth += 1
            if i in blocks:
                c_levels.append(depth)
        elif ch == "}":
            if c_levels and c_levels[-1] == depth:
                c_levels.pop()
            depth = max(0, depth - 1)
    for m in _DECLARATION.finditer(text):
        at = m.start("name")
        in_block = c_depth_at[at]
        if level[at] != 0 and not in_block:
            continue
        words = m.group("head").replace("*", " * ").split()
        lead = {w for w in words if w in _LEADING}
        rest = [w for w in words if w not in _LEADING and w != _EXTERN_C_BLOCK]
        c_linkage = in_block or _EXTERN_C_ONE in lead
        yield (
            m.group("name"),
            lead,
            " ".join(rest),
            m.group("params"),
            m.group("end") == "{",
            c_linkage,
        )


def entry_points(files: dict[str, bytes]) -> list[dict]:
    """The host functions with C linkage defined in the compilation units, in file order.

    C linkage: declared `extern "C"` (one declaration, or inside an `extern "C" { }` block, in
    any file, headers included) before or at the definition. Not `static`, `__global__` or
    device-only functions.

    Raises:
        SignatureError: A declaration uses a type the launcher cannot pass, or a name repeats.
    """
    texts = {rel: _strip_comments(data.decode(errors="replace")) for rel, data in files.items()}
    declared_c = {
        name
        for text in texts.values()
        for name, _, _, _, _, c_linkage in _declarations(text)
        if c_linkage
    }
    found: list[dict] = []
    for rel in sorted(texts):
        if not rel.endswith(_UNITS):
            continue
        for name, lead, returns, params_text, defines, _ in _declarations(texts[rel]):
            if not defines or name not in declared_c or "static" in lead or "__global__" in lead:
                continue
            if "__device__" in lead and "__host__" not in lead:
                continue
            where = f"kernels/{rel}: {name}"
            returns = " ".join(returns.split()).removeprefix("std::")
            if returns not in RETURN_TYPES:
                raise SignatureError(f"{where}: return type {returns} (use void, int or float)")
            raw = [p for p in params_text.split(",") if p.strip()]
            if [r.strip() for r in raw] == ["void"]:
                raw = []
            try:
                params = [_parse_param(p, i) for i, p in enumerate(raw)]
            except SignatureError as exc:
                raise SignatureError(f"{where}: {exc}") from None
            if any(e["name"] == name for e in found):
                raise SignatureError(f"{where}: defined twice")
            found.append(
                {
                    "name": name,
                    "returns": returns,
                    "params": [p.__dict__ for p in params],
                    "source": rel,
                }
            )
    return found


def is_plain(files: dict[str, bytes]) -> bool:
    """A kernel-only workspace: no source includes torch (or Python) headers."""
    return not uses_torch(files)


def _compile_command(unit: Path, obj: Path, device: str, flags: dict, arch: str | None) -> list:
    if device == "cuda" and unit.suffix == ".cu":
        cmd = ["nvcc", "-std=c++17", "-Xcompiler", "-fPIC", *flags["cuda"]]
        if arch:
            # Hopper builds target sm_90a, so wgmma and the other arch-specific PTX are usable.
            sm = {"90": "90a"}.get(arch.replace(".", ""), arch.replace(".", ""))
            cmd += [f"-gencode=arch=compute_{sm},code=sm_{sm}"]
        return [*cmd, "-c", str(unit), "-o", str(obj)]
    cmd = [os.environ.get("CXX", "c++"), "-std=c++17", "-fPIC", *flags["cxx"]]
    if device == "cuda":
        cmd += [f"-I{_cuda_home()}/include"]
    return [*cmd, "-c", str(unit), "-o", str(obj)]


def _cuda_home() -> str:
    nvcc = shutil.which("nvcc")
    return os.environ.get("CUDA_HOME") or (str(Path(nvcc).resolve().parent.parent) if nvcc else "")


# No link-time optimisation, and no linker plugin: an object carrying LTO sections (bytes a
# source can emit as data) would have GCC's LTO plugin replay the options recorded in it
# (`-Xassembler -al=FILE` wrote any file the judge can: a red team's) at this unsandboxed link.
NO_LTO_LINK = ("-fno-lto", "-fno-use-linker-plugin")


def _link_command(objects: list[Path], out: Path, device: str, flags: dict) -> list:
    if device == "cuda":
        host = ["-Xcompiler", ",".join(NO_LTO_LINK)]
        return ["nvcc", "-shared", "-cudart", "shared", *host, *map(str, objects), "-o", str(out)]
    cxx = os.environ.get("CXX", "c++")
    ld = [*NO_LTO_LINK, *(f for f in flags["ld"] if f not in NO_LTO_LINK)]
    return [cxx, "-shared", *ld, *map(str, objects), "-o", str(out)]


def _run(
    cmd: list, cwd: Path, timeout_s: float, nice: int = 0, env: Mapping[str, str] | None = None
) -> tuple[bool, str]:
    env = dict(os.environ if env is None else env, LC_ALL="C", LANG="C")
    try:
        proc = run_process(cmd, timeout_s=timeout_s, cwd=cwd, env=env, nice=nice)
    except OSError as exc:
        return False, f"{cmd[0]}: {exc}"
    if proc.timed_out:
        return False, f"{' '.join(cmd[:2])}: timed out after {timeout_s:g} s"
    return proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"


def build_plain(
    src_dir: Path,
    files: dict[str, bytes],
    units: list[str],
    device: str,
    flags: dict,
    arch: str | None,
    toolchain: str,
    objects_dir: Path,
    out_dir: Path,
    timeout_s: float,
    nice: int = 0,
    env: Mapping[str, str] | None = None,
) -> tuple[str | None, str]:
    """Compile `units` (relative to src_dir, which holds `files`) and link them into out_dir.

    Object files are cached in objects_dir, keyed by the unit, every header, flags and
    toolchain; the compilers run at niceness +`nice` in `env` (default: this process's).
    Returns (None, log) on success, else (what failed, log).
    """
    try:
        entries = entry_points(files)
    except SignatureError as exc:
        return str(exc), ""
    if not entries:
        return NO_ENTRY_POINTS, ""
    headers = sorted(r for r in files if not r.endswith((".cu", ".cpp")))
    common = hashlib.sha256(json.dumps([device, flags, arch, toolchain]).encode())
    for r in headers:
        common.update(r.encode() + b"\0" + hashlib.sha256(files[r]).digest())
    objects_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s

    def compile_unit(rel: str) -> tuple[Path, bool, str]:
        h = common.copy()
        h.update(rel.encode() + b"\0" + files[rel])
        obj = objects_dir / f"{h.hexdigest()[:32]}.o"
        if obj.exists():
            return obj, True, f"(cached) {rel}\n"
        tmp = objects_dir / f".{obj.name}.{os.getpid()}.{id(rel)}.tmp.o"
        cmd = _compile_command(src_dir / rel, tmp, device, flags, arch)
        ok, log = _run(cmd, src_dir, max(1.0, deadline - time.monotonic()), nice, env)
        if ok:
            tmp.replace(obj)
        else:
            tmp.unlink(missing_ok=True)
        return obj, ok, log

    with ThreadPoolExecutor(max_workers=max(1, min(len(units), os.cpu_count() or 1))) as pool:
        results = list(pool.map(compile_unit, units))
    log = "".join(r[2] for r in results)
    if not all(ok for _, ok, _ in results):
        return "compile", log
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp_lib = out_dir / f".{LIBRARY}.tmp"
    ok, link_log = _run(
        _link_command([r[0] for r in results], tmp_lib, device, flags),
        out_dir,
        max(1.0, deadline - time.monotonic()),
        nice,
        env,
    )
    log += link_log
    if not ok:
        return "link", log
    tmp_lib.replace(out_dir / LIBRARY)
    spec = {"library": LIBRARY, "device": device, "entry_points": entries}
    (out_dir / "entry_points.json").write_text(json.dumps(spec, indent=1))
    # The binder is copied beside the module: the candidate's process imports no judge module.
    shutil.copyfile(launch.__file__, out_dir / LAUNCH_FILE)
    (out_dir / MODULE_FILE).write_text(
        '"""The workspace\'s extern "C" functions (generated by cuda_gym.judge.plain_build)."""\n\n'
        "import importlib.util as _util\n"
        "import os as _os\n"
        "import sys as _sys\n\n"
        f'_path = _os.path.join(_os.path.dirname(__file__), "{LAUNCH_FILE}")\n'
        f'_spec = _util.spec_from_file_location("{Path(LAUNCH_FILE).stem}", _path)\n'
        "_launch = _sys.modules[_spec.name] = _util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_launch)\n"
        "_launch.bind(globals(), __file__)\n"
    )
    return None, log
