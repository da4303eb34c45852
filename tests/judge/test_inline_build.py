"""The build stage of load_inline solutions, and what the runner does with its libraries."""

import os
from pathlib import Path  # noqa: F401

import pytest
import torch
from torch.utils import cpp_extension

from cuda_gym.judge import Judge
from cuda_gym.judge.inline_build import _collect, _read_report, builds_extensions
from cuda_gym.judge.runner import _default_build_directories, _guard_extension_builds
from tests.conftest import TEST_JUDGE

TASK = "sigmoid_gated_multiply"


def test_which_sources_build_extensions():
    assert builds_extensions("from torch.utils.cpp_extension import load_inline\nm = load_inline(")
    assert builds_extensions("import torch.utils.cpp_extension as ce\next = ce.load(name='x')")
    assert not builds_extensions("import torch\nw = torch.load('weights.pt')")
    assert not builds_extensions("import kernels_ext\n")


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
    assert _read_report(tmp_path / "r.json") == {"error": "boom", "build_failed": False}


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
