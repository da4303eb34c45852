"""The build stage of solutions that compile their own extensions (load_inline, cpp_extension.load).

KernelBench-style solutions build their kernels when model_new.py is imported. Done inside the
judged process, that compile (tens of seconds) would run while the judgement holds the device's
gate, so every timer on the GPU would wait for it. Here it runs first, as a build: model_new.py
is imported once in an OS sandbox with no GPU device, no gate and the build time limit
(`python -I runner.py prebuild`), and the libraries it built are kept. The candidate's runner
then finds every extension already built and imports it without compiling; one that would
compile there is refused (cuda_gym.judge.runner `_guard_extension_builds`).

The stage's C++ compiles read the judge's precompiled torch header when the solution's flags
match one made for load_inline builds (cuda_gym.judge.pch, INLINE_VARIANTS; read-only in the
sandbox); the judge, not the sandbox, makes the variants the stage asked for and lacked.

Cache: the libraries are copied, by the judge (a trusted process), into
`<cache>/inline_builds/<key>`, keyed by the bytes of every file of the solution, the device, the
GPU architecture and the toolchain, and sealed like kernels/ builds (cuda_gym.judge.build): an
identical solution in any later episode or process skips the build. What the sandboxed import
wrote is untrusted, but it only ever serves the same files, whose own code would run in their
runner anyway.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from cuda_gym.judge import library_copies, pch
from cuda_gym.judge.build import first_errors, seal_dir, sealed_intact, toolchain_id
from cuda_gym.judge.config import JudgeConfig
from cuda_gym.judge.untrusted import runner_command, runner_env_for, runner_sandbox
from cuda_gym.runtime import python_child_env, run_process
from cuda_gym.runtime.sandbox import build_plan as sandbox_plan
from cuda_gym.runtime.sandbox import sandbox_argv, sandbox_env

_CPP_EXTENSION = re.compile(r"\bcpp_extension\b")
LIBRARY_SUFFIXES = (".so",)
DONE_FILE = "BUILD_OK"
# v2: every file of the solution is keyed, and candidate processes share one string hash seed
# (a library built under another process's hash() of its name is of no use).
# v3: collected modules are checked for copies of the machine's libraries.
INLINE_KEY_VERSION = "v3"
log = logging.getLogger(__name__)


@dataclass
class InlineBuild:
    """What the build stage found.

    Attributes:
        extensions_dir: The built libraries, laid out as under TORCH_EXTENSIONS_DIR; None when
            the stage did not run or built nothing.
        complete: model_new.py imported without error, so every extension it builds is in
            `extensions_dir`: the runner may refuse to compile. False: its import failed for
            another reason (e.g. it touched the GPU), and the runner may compile what is missing.
        error: The compiler's errors when a build failed (the solution's verdict), else None.
        duration_s: Seconds the stage took.
        cached: The libraries came from the cache.
    """

    extensions_dir: str | None = None
    complete: bool = False
    error: str | None = None
    duration_s: float = 0.0
    cached: bool = False


def builds_extensions(source: str) -> bool:
    """Whether model_new.py's source may build a torch extension when imported.

    Any mention of load_inline or cpp_extension (under whatever name it is then called): the
    build stage costs a sandboxed import where nothing is built, a build missed costs the
    solution its judgement.
    """
    return "load_inline" in source or bool(_CPP_EXTENSION.search(source))


def _builder_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(names bound to load / load_inline, names bound to the cpp_extension module)."""
    functions, modules = {"load_inline", "load"}, {"cpp_extension"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"):
            functions |= {
                a.asname or a.name for a in node.names if a.name in ("load", "load_inline")
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "") == "torch.utils":
            modules |= {a.asname or a.name for a in node.names if a.name == "cpp_extension"}
        elif isinstance(node, ast.Import):
            modules |= {
                a.asname for a in node.names if a.name.endswith("cpp_extension") and a.asname
            }
    # Plain rebinding (`build = load_inline`, `build = ce.load`), twice for chains.
    for _ in range(2):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and _is_builder(value, functions, modules):
                functions.add(target.id)
    return functions, modules


def _is_builder(func: ast.AST, functions: set[str], modules: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in functions
    if isinstance(func, ast.Attribute) and func.attr in ("load_inline", "load"):
        value = func.value
        return func.attr == "load_inline" or (
            (isinstance(value, ast.Name) and value.id in modules)
            or "cpp_extension" in ast.unparse(value)
        )
    return False


def builds_lazily(source: str) -> bool:
    """Whether model_new.py calls load_inline / cpp_extension.load inside a function body.

    Under any name it imported or bound them to (`load_inline as compile_cpp`,
    `from torch.utils import cpp_extension as ce`).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    functions, modules = _builder_names(tree)
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and _is_builder(node.func, functions, modules):
                return True
    return False


def inline_key(solution_dir: Path, config: JudgeConfig, arch: str | None) -> str:
    """SHA-256 over the solution's files, the device, GPU architecture, flags and toolchain.

    Every file, not model_new.py alone: its import may read any of them (its C++ from
    `kernels/op.inc`, say), so two solutions differing only there must not share a build.
    """
    h = hashlib.sha256()
    payload = [
        INLINE_KEY_VERSION,
        config.device,
        arch,
        toolchain_id(config.device),
        list(config.cuda_flags),
        list(config.cxx_flags),
    ]
    h.update(json.dumps(payload).encode())
    for top, dirs, files in os.walk(solution_dir):  # links to directories are not followed
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(top, d))]):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, solution_dir).encode()
            if os.path.islink(path):
                h.update(b"L%d:%s%s\0" % (len(rel), rel, os.readlink(path).encode()))
            elif os.path.isfile(path):
                data = Path(path).read_bytes()
                h.update(b"F%d:%s%d:" % (len(rel), rel, len(data)))
                h.update(data)
    return h.hexdigest()


def build_inline(
    solution_dir: Path, source: str, config: JudgeConfig, arch: str | None, work: Path
) -> InlineBuild:
    """Run the build stage for the solution in `solution_dir` (its model_new.py is `source`).

    `work` is a fresh directory of this judgement's; the stage's sandbox writes only there.
    """
    start = time.monotonic()
    cache = config.resolved_cache_dir
    key = inline_key(solution_dir, config, arch)
    entry = cache / "inline_builds" / key[:32]
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f"{key[:32]}.lock", "w") as lock:
        # One build per key at a time, across threads and processes; the rest reuse it.
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = entry / DONE_FILE
        if done.is_file() and sealed_intact(entry, cache):
            info = json.loads(done.read_text())
            return InlineBuild(
                extensions_dir=str(entry / "extensions"),
                complete=bool(info.get("complete")),
                duration_s=time.monotonic() - start,
                cached=True,
            )
        if entry.exists():
            shutil.rmtree(entry)
        headers = _pch_dirs(config) if config.use_precompiled_header else {}
        result, log = _run_stage(solution_dir, config, arch, work, headers)
        if result.get("timed_out"):
            return InlineBuild(error=result["error"], duration_s=time.monotonic() - start)
        if result.get("build_failed"):
            errors = first_errors(log + "\n" + str(result.get("error")), str(work))
            return InlineBuild(error=errors, duration_s=time.monotonic() - start)
        # An extension built inside a function (ModelNew.__init__, a lazy getter) is not built
        # by the import: the runner may compile it (outside the gate, flagged).
        complete = result.get("error") is None and not builds_lazily(source)
        built = _collect(work / "scratch" / "torch_extensions", entry / "extensions")
        copies = _copies(entry / "extensions", config) if built else []
        if copies:
            shutil.rmtree(entry, ignore_errors=True)
            error = "The build stage's libraries are not all built from the solution's sources: "
            return InlineBuild(
                error=error + "; ".join(copies) + ".", duration_s=time.monotonic() - start
            )
        if built:
            _make_wanted_pch(config, arch, headers, result.get("pch_wanted", []))
        if not built:
            shutil.rmtree(entry, ignore_errors=True)
            return InlineBuild(complete=complete, duration_s=time.monotonic() - start)
        (entry / DONE_FILE).write_text(json.dumps({"complete": complete}))
        seal_dir(entry, cache)
        return InlineBuild(
            extensions_dir=str(entry / "extensions"),
            complete=complete,
            duration_s=time.monotonic() - start,
        )


def _pch_dirs(config: JudgeConfig) -> dict[str, str]:
    """{variant: directory} of the load_inline precompiled headers made so far.

    (A directory whose binding prelude is missing is made again when a build asks for it:
    `_make_wanted_pch`.)
    """
    toolchain = toolchain_id(config.device)
    dirs = {}
    for variant in pch.INLINE_VARIANTS:
        directory = pch.inline_pch_dir(config.resolved_cache_dir, variant, toolchain)
        if pch.ready(directory):
            dirs[variant] = str(directory)
    return dirs


def _make_wanted_pch(config: JudgeConfig, arch: str | None, present: dict, wanted: list) -> None:
    """Make the variants the stage matched and lacked.

    Its report is untrusted: it can only pick among INLINE_VARIANTS, each made here from
    torch's own flags.
    """
    if not config.use_precompiled_header:
        return
    toolchain = toolchain_id(config.device)
    for variant in pch.INLINE_VARIANTS:
        directory = pch.inline_pch_dir(config.resolved_cache_dir, variant, toolchain)
        if variant in wanted and (variant not in present or not pch.prelude_ready(directory)):
            log.info(pch.make_inline_pch(directory, variant, config.build_timeout_s, arch))


def _run_stage(
    solution_dir: Path, config: JudgeConfig, arch: str | None, work: Path, headers: dict
) -> tuple[dict, str]:
    """Import model_new.py in the build sandbox: (its untrusted result, the compiler's log).

    `headers`: {variant: directory} of the precompiled headers its builds may read.
    """
    scratch = work / "scratch"
    scratch.mkdir(parents=True)
    result_path = scratch / "prebuild.json"
    env = python_child_env(LC_ALL="C", LANG="C", CUDA_VISIBLE_DEVICES="")
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = arch  # no GPU to ask: build for the judge's
    env["MAX_JOBS"] = env.get("MAX_JOBS", "4")
    if config.use_precompiled_header:
        variants = {name: [cuda, list(f)] for name, (cuda, f) in pch.INLINE_VARIANTS.items()}
        preludes = {
            name: str(Path(d) / pch.PRELUDE)
            for name, d in headers.items()
            if pch.prelude_ready(Path(d))
        }
        env[pch.INLINE_PCH_ENV] = json.dumps(
            {"variants": variants, "dirs": headers, "preludes": preludes}
        )
    argv = runner_command("prebuild", str(solution_dir), str(result_path))
    env = runner_env_for(env)
    if config.sandboxed:
        # No GPU device nodes ("cpu"): the stage compiles, it never runs anything on the device.
        readable = (str(solution_dir), *headers.values())
        keep = ("torch_extensions", result_path.name)
        spec = runner_sandbox(scratch, "cpu", readable, None, config.build_timeout_s, keep)
        env = sandbox_env(env, spec)
        argv = sandbox_argv(argv, sandbox_plan(spec, env, scratch))
    else:
        env["TORCH_EXTENSIONS_DIR"] = str(scratch / "torch_extensions")
        env["HOME"] = str(scratch)
    proc = run_process(
        argv, timeout_s=config.build_timeout_s, cwd=scratch, env=env, nice=config.build_nice
    )
    log = (proc.stdout + "\n" + proc.stderr).strip()
    result = _read_report(result_path)
    if proc.timed_out:
        return {
            "build_failed": True,
            "timed_out": True,
            "error": f"The build stage {proc.describe_failure(config.build_timeout_s)}.",
        }, log
    if not result:
        result = {"error": f"the build stage {proc.describe_failure(config.build_timeout_s)}"}
    return result, log


def _read_report(path: Path, max_bytes: int = 1 << 20) -> dict:
    """The stage's report if it is a regular file holding a JSON object, else {}.

    The sandboxed import wrote it: never follow a link, never block on a FIFO.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return {}
        report = json.loads(os.read(fd, max_bytes + 1).decode(errors="replace"))
    except ValueError:
        return {}
    finally:
        os.close(fd)
    if not isinstance(report, dict):
        return {}
    wanted = report.get("pch_wanted")
    return {"error": str(report["error"]) if report.get("error") else None} | {
        "build_failed": report.get("build_failed") is True,
        "pch_wanted": [v for v in pch.INLINE_VARIANTS if isinstance(wanted, list) and v in wanted],
    }


def is_extension_module(path: Path) -> bool:
    """Whether `path` is named as a built extension module.

    torch's extension builds lay them out as `NAME/NAME.so` (a rebuild in one process:
    `NAME/NAME_vN.so`); the judge's plain build of kernels/ makes `kernels_ext`.
    """
    stem = path.name.split(".", 1)[0]
    if stem == "kernels_ext":
        return True
    return re.fullmatch(re.escape(path.parent.name) + r"(?:_v\d+)?", stem) is not None


def _copies(extensions: Path, config: JudgeConfig) -> list[str]:
    """A line for each collected module that is a copy of a library of the machine's.

    The import that built them ran the solution's code, which may have copied a library (a
    BLAS) under an extension module's name: its compute would pass for the solution's own
    (cuda_gym.judge.library_copies).
    """
    index = library_copies.library_index(config.resolved_cache_dir)
    found = []
    for path in sorted(extensions.rglob("*")):
        if path.suffix in LIBRARY_SUFFIXES and path.is_file():
            copy = index.copy_of_file(path)
            if copy is not None:
                found.append(copy.describe(str(path.relative_to(extensions))))
    return found


def _collect(built: Path, dest: Path) -> bool:
    """Copy the extension modules under `built` to `dest`, keeping their layout; whether any were.

    Regular files only (no links followed): the sandboxed process that wrote `built` is gone.
    Nothing else the build left there comes back (another library copied beside a module
    would otherwise pass for the solution's code: cuda_gym.judge.cpu_time).
    """
    found = False
    if not built.is_dir() or built.is_symlink():  # os.walk follows a link at the top
        return False
    for root, _dirs, names in os.walk(built, followlinks=False):
        for name in names:
            path = Path(root, name)
            if path.suffix not in LIBRARY_SUFFIXES or not stat.S_ISREG(path.lstat().st_mode):
                continue
            if not is_extension_module(path):
                continue
            target = dest / path.relative_to(built)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target, follow_symlinks=False)
            found = True
    return found
