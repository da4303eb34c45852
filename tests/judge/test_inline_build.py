"""The build stage of load_inline solutions, and what the runner does with its libraries."""

import json
import os
from pathlib import Path  # noqa: F401

import pytest
import torch
from torch.utils import cpp_extension

from cuda_gym.judge import Judge, JudgeConfig, pch
from cuda_gym.judge.inline_build import (
    _collect,
    _read_report,
    build_inline,
    builds_extensions,
    builds_lazily,
    inline_key,
)
from cuda_gym.judge.runner import (
    _default_build_directories,
    _guard_extension_builds,
    _precompiled_headers,
    binding_text,
)
from tests.conftest import TEST_JUDGE

TASK = "sigmoid_gated_multiply"


def test_which_sources_build_extensions():
    assert builds_extensions("from torch.utils.cpp_extension import load_inline\nm = load_inline(")
    assert builds_extensions("import torch.utils.cpp_extension as ce\next = ce.load(name='x')")
    assert not builds_extensions("import torch\nw = torch.load('weights.pt')")
    assert not builds_extensions("import kernels_ext\n")
    # `load as jit_load` (a stranger's report): any mention of cpp_extension builds.
    assert builds_extensions(
        "from torch.utils.cpp_extension import load as jit_load\next = jit_load(name='x')"
    )


def test_the_build_cache_key_covers_every_file_the_import_can_read(tmp_path):
    # model_new.py may read its C++ from another file: two solutions with the same
    # model_new.py and different kernels must not share a cached build.
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache")
    keys = []
    for k, kernel in enumerate(
        ["int f() { return 1; }", "int f() { return 2; }", "int f() { return 1; }"]
    ):
        root = tmp_path / f"s{k}"
        (root / "kernels").mkdir(parents=True)
        (root / "model_new.py").write_text("SOURCE = open('kernels/op.inc').read()\n")
        (root / "kernels" / "op.inc").write_text(kernel)
        keys.append(inline_key(root, config, None))
    assert keys[0] != keys[1] and keys[0] == keys[2]
    (tmp_path / "s2" / "kernels" / "op.inc").rename(tmp_path / "s2" / "kernels" / "op2.inc")
    assert inline_key(tmp_path / "s2", config, None) != keys[0]  # names count too
    flags = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache", cxx_flags=("-O2",))
    assert inline_key(tmp_path / "s0", flags, None) != keys[0]


def test_only_regular_libraries_are_collected(tmp_path):
    built = tmp_path / "built" / "ext"
    built.mkdir(parents=True)
    (built / "ext.so").write_bytes(b"\x7fELF")
    (built / "main.cpp").write_text("int x;")
    (built / "link.so").symlink_to("/etc/passwd")
    os.mkfifo(built / "pipe.so")
    dest = tmp_path / "dest"
    assert _collect(tmp_path / "built", dest)
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == ["ext.so"]
    assert not _collect(tmp_path / "nothing", tmp_path / "dest2")


def test_the_untrusted_report_is_read_safely(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    assert _read_report(tmp_path / "fifo.json") == {}  # never blocks
    (tmp_path / "list.json").write_text("[1]")
    assert _read_report(tmp_path / "list.json") == {}
    (tmp_path / "r.json").write_text('{"error": "boom", "build_failed": "yes", "extra": 1}')
    assert _read_report(tmp_path / "r.json") == {
        "error": "boom",
        "build_failed": False,
        "pch_wanted": [],
    }
    # Which precompiled headers to make: only names of the judge's own variants.
    (tmp_path / "w.json").write_text('{"pch_wanted": ["cpp-O3", "../../etc", "cuda", 7]}')
    assert _read_report(tmp_path / "w.json")["pch_wanted"] == ["cpp-O3", "cuda"]


@pytest.fixture
def guarded():
    original = cpp_extension._write_ninja_file_and_build_library
    yield
    cpp_extension._write_ninja_file_and_build_library = original


@pytest.fixture
def loaders():
    saved = cpp_extension.load, cpp_extension.load_inline
    yield
    cpp_extension.load, cpp_extension.load_inline = saved


def test_a_build_directory_of_the_solutions_own_is_replaced_by_the_default(loaders, monkeypatch):
    # The build stage and the runner have different temp directories: a solution's own
    # build_directory (hashed under TMPDIR, say) would differ between them.
    seen = []
    monkeypatch.setattr(
        cpp_extension, "load_inline", lambda name, cpp_sources, **kw: seen.append(kw)
    )
    monkeypatch.setattr(cpp_extension, "load", lambda name, sources, **kw: seen.append(kw))
    _default_build_directories(torch)
    cpp_extension.load_inline("ext", "int x;", functions=["f"], build_directory="/tmp/own")
    cpp_extension.load("ext", ["a.cpp"], build_directory="/tmp/own", verbose=False)
    cpp_extension.load_inline("ext", "int x;")
    assert seen == [{"functions": ["f"]}, {"verbose": False}, {}]


def test_the_build_stage_reads_the_precompiled_header_whose_settings_match(loaders, monkeypatch):
    seen = []
    monkeypatch.setattr(
        cpp_extension,
        "load_inline",
        lambda name, cpp_sources, cuda_sources=None, extra_cflags=None, with_cuda=None: seen.append(
            extra_cflags
        ),
    )
    monkeypatch.setattr(
        cpp_extension,
        "load",
        lambda name, sources, extra_cflags=None, with_cuda=None: seen.append(extra_cflags),
    )
    variants = {name: [c, list(f)] for name, (c, f) in pch.INLINE_VARIANTS.items()}
    table = {"variants": variants, "dirs": {"cpp-O3-openmp": "/pch/a", "cuda": "/pch/b"}}
    monkeypatch.setenv(pch.INLINE_PCH_ENV, json.dumps(table))
    wanted = _precompiled_headers()
    cpp_extension.load_inline("e", "int x;", extra_cflags=["-O3", "-fopenmp"])
    cpp_extension.load_inline("e", "int x;", cuda_sources="__global__ void k() {}")
    cpp_extension.load_inline("e", "int x;", extra_cflags=[""])  # KernelBench's: none
    cpp_extension.load_inline("e", "int x;", extra_cflags=["-O3", "-ffast-math"])
    cpp_extension.load("e", ["k.cu", "b.cpp"], extra_cflags=["-O3"])
    assert seen == [
        ["-O3", "-fopenmp", "-I/pch/a", "-Winvalid-pch"],
        ["-I/pch/b", "-Winvalid-pch"],
        [""],  # "cpp": not made yet
        ["-O3", "-ffast-math"],  # no variant: no header
        ["-O3"],  # "cuda-O3": not made yet
    ]
    assert wanted == {"cpp-O3-openmp", "cuda", "cpp", "cuda-O3"}
    assert pch.INLINE_PCH_ENV not in os.environ  # read once, not left for others


def test_without_the_judges_table_the_build_stage_changes_nothing(loaders, monkeypatch):
    monkeypatch.delenv(pch.INLINE_PCH_ENV, raising=False)
    before = cpp_extension.load_inline
    assert _precompiled_headers() == set()
    assert cpp_extension.load_inline is before


def test_runner_imports_a_prebuilt_library_and_refuses_to_compile(tmp_path, guarded):
    _guard_extension_builds(torch, allow_compile=False)
    build = cpp_extension._write_ninja_file_and_build_library
    (tmp_path / "ready.so").write_bytes(b"")
    assert build(name="ready", sources=[], build_directory=str(tmp_path)) is None
    with pytest.raises(RuntimeError, match="would be compiled while the solution is judged"):
        build(name="missing", sources=[], build_directory=str(tmp_path))


def _solution(directory: Path, name: str, broken: bool = False) -> None:
    """The exploit suite's legitimate load_inline case, under a fresh extension name."""
    from benchmarks.exploits import SUITE

    (case,) = [c for c in SUITE.load_cases() if c.name == "legit_load_inline"]
    source = SUITE.solution_text(case).replace("exploit_suite_legit_gated", name)
    if broken:
        source = source.replace("return out;", "return out  // missing semicolon")
    (directory / "model_new.py").write_text(source)


@pytest.mark.slow
def test_a_compile_error_is_the_verdict_before_any_device_work(tmp_path):
    from cuda_gym.tasks import load_task

    _solution(tmp_path, f"broken_{os.urandom(4).hex()}", broken=True)
    verdict = Judge(TEST_JUDGE).evaluate(load_task(TASK), tmp_path, timing=False)
    assert verdict.verdict == "reject" and not verdict.compiled
    assert verdict.error.startswith("Build failed (the torch extensions model_new.py builds)")
    assert "error" in verdict.error
    assert not any(k.startswith("candidate") for k in verdict.stage_times_s)


@pytest.mark.slow
def test_a_load_inline_solution_is_built_once_and_loaded_without_compiling(tmp_path):
    from cuda_gym.tasks import load_task

    _solution(tmp_path, f"gated_{os.urandom(4).hex()}")
    judge = Judge(TEST_JUDGE)
    first = judge.evaluate(load_task(TASK), tmp_path, timing=False)
    assert first.verdict == "accept", first.error
    assert "extensions_compiled_at_load" not in first.flags
    again = judge.evaluate(load_task(TASK), tmp_path, timing=False)
    assert again.verdict == "accept", again.error
    # The second build stage is a cache hit; neither load compiled anything.
    assert again.stage_times_s["build.inline"] < 1.0 < first.stage_times_s["build.inline"]
    assert first.stage_times_s["candidate.load"] < 30


@pytest.mark.slow
@pytest.mark.skipif(not pch.is_gcc("c++"), reason="precompiled headers are made with GCC")
def test_a_load_inline_build_after_the_first_reads_the_precompiled_header(tmp_path):
    import subprocess

    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache", precompiled_header=True)
    builds = []
    for k in range(2):
        root = tmp_path / f"s{k}"
        root.mkdir()
        _solution(root, f"gated_pch_{k}_{os.urandom(4).hex()}")
        source = (root / "model_new.py").read_text()
        built = build_inline(root, source, config, None, tmp_path / f"work{k}")
        assert built.extensions_dir and built.complete, built.error
        builds.append(tmp_path / f"work{k}")
    # The first build asked for its variant (-O3 -fopenmp); the judge made it from torch's own
    # flags, in the cache, not from the sandbox's build.ninja.
    gch = list((tmp_path / "cache" / "pch").glob("*/torch/extension.h.gch"))
    assert len(gch) == 1
    directory = gch[0].parent.parent
    assert (directory / "probe" / "build.ninja").is_file()
    # The second build's C++ compile read it: its build.ninja has -I DIR, and GCC takes the
    # .gch with that compile's flags.
    (ninja,) = builds[1].glob("scratch/torch_extensions/*/build.ninja")
    text = ninja.read_text()
    assert f"-I{directory}" in text
    command = pch.compile_command(text, tmp_path / "check.gch")
    cflags = command[1 : command.index("-x")]
    main = next(ninja.parent.glob("main.cpp"))

    def takes_the_gch(source):
        check = subprocess.run(
            [command[0], *cflags, "-Winvalid-pch", "-fsyntax-only", str(source)],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stderr[-2000:]
        assert "not used because" not in check.stderr and "invalid" not in check.stderr.lower()

    takes_the_gch(main)
    # Beside it, the binding prelude, which the second build's main.cpp tried first: GCC takes
    # its .gch with the same flags.
    assert pch.prelude_ready(directory)
    light = tmp_path / "light.cpp"
    light.write_text(binding_text(main.read_text(), str(directory / pch.PRELUDE)))
    takes_the_gch(light)


def test_builds_inside_functions_leave_the_runner_free_to_compile():
    assert not builds_lazily(
        "from torch.utils.cpp_extension import load_inline\next = load_inline(name='a')\n"
    )
    assert builds_lazily(
        "class ModelNew:\n    def __init__(self):\n        self.e = load_inline(name='a')\n"
    )
    assert builds_lazily(
        "from torch.utils import cpp_extension\n"
        "def get():\n    return cpp_extension.load(name='a')\n"
    )
    assert not builds_lazily("import json\ndef read(f):\n    return json.load(f)\n")
    # Under another name (a stranger's report): imported as, a module alias, a rebinding.
    assert builds_lazily(
        "from torch.utils.cpp_extension import load_inline as compile_cpp\n"
        "class ModelNew:\n    def __init__(self):\n        self.e = compile_cpp(name='a')\n"
    )
    assert builds_lazily(
        "from torch.utils import cpp_extension as ce\ndef get():\n    return ce.load(name='a')\n"
    )
    assert builds_lazily(
        "import torch.utils.cpp_extension as ce\nbuild = ce.load_inline\n"
        "def get():\n    return build(name='a')\n"
    )
    assert not builds_lazily("import torch\ndef get(p):\n    return torch.load(p)\n")


def test_the_runner_works_in_a_writable_view_of_the_solutions_folder(tmp_path, monkeypatch):
    from cuda_gym.judge.runner import _enter_solution_folder

    solution = tmp_path / "solution"
    (solution / "csrc").mkdir(parents=True)
    (solution / "csrc" / "op.cpp").write_text("int f();\n")
    (solution / "model_new.py").write_text("")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    _enter_solution_folder(str(solution))
    assert Path.cwd().parent == scratch
    assert Path("csrc/op.cpp").read_text() == "int f();\n"  # relative names as in its folder
    Path("written.txt").write_text("x")  # and files of its own beside them
    assert not (solution / "written.txt").exists()


@pytest.mark.slow
def test_a_cpp_extension_load_of_sources_named_relative_to_the_solution_is_accepted(tmp_path):
    # A stranger's report: `load(sources=["csrc/x.cpp"])` failed with FileNotFoundError
    # because the build stage and the runner started in their scratch directories.
    from cuda_gym.tasks import load_task

    _solution(tmp_path, "unused")
    source = (tmp_path / "model_new.py").read_text()
    cpp = source.split('r"""', 1)[1].split('"""', 1)[0]
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "gated.cpp").write_text(
        cpp + "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
        '  m.def("gated_multiply", &gated_multiply);\n}\n'
    )
    name = f"gated_relative_{os.urandom(4).hex()}"
    start = source.index("gated_ext = load_inline(")
    end = source.index("\n)\n", start) + 3
    load = f"gated_ext = load(name={name!r}, sources=['csrc/gated.cpp'])\n"
    source = source[:start] + load + source[end:]
    source = source.replace("import load_inline", "import load")
    (tmp_path / "model_new.py").write_text(source)
    task = load_task(TASK)
    verdict = Judge(TEST_JUDGE).evaluate(task, tmp_path, timing=False)
    assert verdict.verdict == "accept", verdict.error
