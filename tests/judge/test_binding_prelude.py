"""Binding code is built with the judge's light binding prelude first, as written when it fails."""

import json
import os

import pytest

from cuda_gym.judge import pch, runner
from cuda_gym.judge.build import _with_prelude
from cuda_gym.judge.runner import _lighter_cuda_builds, binding_text
from tests.judge import test_light_header

MAIN = """#include <torch/extension.h>
torch::Tensor run(torch::Tensor x);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
m.def("run", torch::wrap_pybind_function(run), "run");
}"""
CUDA = """#include <torch/types.h>
#include <cuda_runtime.h>
__global__ void k(float* y) { y[0] = 1.f; }
"""


def test_binding_code_includes_the_prelude_first_and_keeps_its_line_numbers():
    light = binding_text(MAIN, "/cache/pch/x/cuda_gym/binding_prelude.h")
    first, line, rest = light.split("\n", 2)
    assert first == '#include "/cache/pch/x/cuda_gym/binding_prelude.h"'
    assert line == "#line 1"
    # torch/extension.h's include is gone, its line kept: errors point at the user's lines.
    assert rest.splitlines() == [""] + MAIN.splitlines()[1:]
    # No precompiled prelude yet: its headers, as text.
    text = binding_text(MAIN, None)
    assert text.startswith("#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n")
    assert "torch/extension.h" not in text


@pytest.mark.parametrize(
    "source",
    [
        MAIN.replace("torch::Tensor run", "torch::nn::Linear l; torch::Tensor run"),
        MAIN + "\nTORCH_LIBRARY(ns, m) {}\n",
        'extern "C" void add(const float* a, float* b, int n) { b[0] = a[0]; }\n',
    ],
    ids=["frontend", "op-library", "no-torch"],
)
def test_code_naming_the_frontend_or_not_torch_at_all_is_built_as_written(source):
    assert binding_text(source, "/p.h") is None


class FakeTorchBuild(test_light_header.FakeTorchBuild):
    """torch's build step: records the files' texts, makes an object for each file whose text
    `compiles(name, text)` accepts (as ninja would: only when its source is newer), and fails
    when any does not."""

    def __init__(self, compiles) -> None:
        super().__init__()
        self.compiles = compiles

    def compile(self, name, sources):
        texts = {os.path.basename(s): open(s).read() for s in sources}
        self.seen.append(texts)
        failed = False
        for source in sources:
            stem, suffix = os.path.splitext(source)
            obj = f"{stem}.cuda.o" if suffix == ".cu" else f"{stem}.o"
            ok = self.compiles(os.path.basename(source), texts[os.path.basename(source)])
            fresh = os.path.exists(obj) and os.path.getmtime(obj) >= os.path.getmtime(source)
            if ok and not fresh:
                with open(obj, "w") as handle:
                    handle.write("object")
            failed |= not ok
        if failed:
            raise RuntimeError(f"Error building extension '{name}' (build {len(self.seen)})")


def _build(fake, directory, prelude=None, gch=None):
    """A load_inline build; `gch`: the -I DIR of its torch/extension.h .gch (prelude beside)."""
    (directory / "main.cpp").write_text(MAIN)
    (directory / "cuda.cu").write_text(CUDA)
    runner._BINDING_PRELUDES.clear()
    if prelude or gch:
        runner._BINDING_PRELUDES[gch or "/pch/ext"] = prelude
    _lighter_cuda_builds(fake.module)
    fake.module._write_ninja_file_and_build_library(
        "ext",
        [str(directory / "main.cpp"), str(directory / "cuda.cu")],
        [f"-I{gch or '/pch/ext'}", "-Winvalid-pch"] if prelude or gch else [],
        [],
        [],
        [],
        [],
        str(directory),
        False,
        True,
        False,
    )


def test_main_cpp_is_built_with_the_precompiled_prelude_and_put_back(tmp_path):
    fake = FakeTorchBuild(lambda name, text: True)
    _build(fake, tmp_path, prelude="/pch/cuda_gym/binding_prelude.h")
    assert len(fake.seen) == 1
    assert fake.seen[0]["main.cpp"].startswith('#include "/pch/cuda_gym/binding_prelude.h"\n')
    assert fake.seen[0]["cuda.cu"].startswith("#include <ATen/core/Tensor.h>")
    assert (tmp_path / "main.cpp").read_text() == MAIN
    assert (tmp_path / "cuda.cu").read_text() == CUDA


def test_while_only_the_extension_gch_is_made_main_cpp_is_built_as_written(tmp_path):
    # torch/extension.h precompiled beats the prelude's headers parsed as text (by hand on the
    # 2-core box, not a benchmark: about 12 against 17 s): until the prelude's .gch is made
    # beside it, main.cpp reads that one.
    fake = FakeTorchBuild(lambda name, text: True)
    _build(fake, tmp_path, gch="/pch/only_extension")
    assert fake.seen[0]["main.cpp"] == MAIN


def test_the_build_stage_maps_each_gch_directory_to_its_prelude(monkeypatch):
    table = {
        "variants": {"cuda": [True, []], "cuda-O3": [True, ["-O3"]]},
        "dirs": {"cuda": "/pch/a", "cuda-O3": "/pch/b"},
        "preludes": {"cuda": "/pch/a/cuda_gym/binding_prelude.h"},
    }
    monkeypatch.setenv(pch.INLINE_PCH_ENV, json.dumps(table))
    runner._BINDING_PRELUDES.clear()
    runner._precompiled_headers()
    assert runner._BINDING_PRELUDES == {
        "/pch/a": "/pch/a/cuda_gym/binding_prelude.h",
        "/pch/b": None,
    }


def test_a_file_that_compiled_keeps_its_text_while_the_other_tries_the_next(tmp_path):
    # cuda.cu fails with ATen's headers and compiles with torch/types.h; main.cpp compiled with
    # the prelude at once and is neither rewritten nor compiled again.
    def compiles(name, text):
        return name == "main.cpp" or not text.startswith("#include <ATen/core/Tensor.h>")

    fake = FakeTorchBuild(compiles)
    _build(fake, tmp_path)
    assert len(fake.seen) == 2
    assert [t["main.cpp"] for t in fake.seen] == [binding_text(MAIN, None)] * 2
    assert fake.seen[1]["cuda.cu"] == CUDA  # its only lighter text failed: as written
    assert (tmp_path / "main.cpp").read_text() == MAIN


def test_a_file_that_fails_as_written_is_reported_beside_one_that_compiled_light(tmp_path):
    fake = FakeTorchBuild(lambda name, text: name == "main.cpp")
    with pytest.raises(RuntimeError, match=r"build 2\)"):
        _build(fake, tmp_path)
    assert fake.seen[-1] == {"main.cpp": binding_text(MAIN, None), "cuda.cu": CUDA}


def test_when_the_prelude_fails_main_cpp_is_built_as_written(tmp_path):
    def compiles(name, text):
        return name != "main.cpp" or "torch/extension.h" in text

    fake = FakeTorchBuild(compiles)
    _build(fake, tmp_path, prelude="/pch/p.h")
    assert fake.seen[0]["main.cpp"].startswith('#include "/pch/p.h"')
    assert fake.seen[-1] == {"main.cpp": MAIN, "cuda.cu": fake.seen[0]["cuda.cu"]}

    broken = FakeTorchBuild(lambda name, text: False)
    (tmp_path / "x").mkdir()
    with pytest.raises(RuntimeError, match=r"build 2\)"):
        _build(broken, tmp_path / "x")
    assert broken.seen[-1] == {"main.cpp": MAIN, "cuda.cu": CUDA}


def test_a_link_failure_after_every_light_file_compiled_is_reported_as_written(tmp_path):
    class LinkFails(FakeTorchBuild):
        def compile(self, name, sources):
            super().compile(name, sources)
            raise RuntimeError(f"Error building extension '{name}': undefined symbol")

    fake = LinkFails(lambda name, text: True)
    with pytest.raises(RuntimeError, match="undefined symbol"):
        _build(fake, tmp_path, prelude="/pch/p.h")
    assert len(fake.seen) == 2
    assert fake.seen[-1] == {"main.cpp": MAIN, "cuda.cu": CUDA}


def test_kernels_units_that_include_torch_get_the_prelude_once_it_is_made(tmp_path):
    files = {
        "binding.cpp": MAIN.encode(),
        "add.cpp": b'extern "C" void add(float* x) { x[0] += 1.f; }\n',
        "kernel.cu": CUDA.encode(),
    }
    assert _with_prelude(files, tmp_path) is None  # not made yet
    (tmp_path / pch.PRELUDE).parent.mkdir(parents=True)
    (tmp_path / pch.PRELUDE).write_text(pch.PRELUDE_TEXT)
    (tmp_path / f"{pch.PRELUDE}.gch").write_bytes(b"gch")
    light = _with_prelude(files, tmp_path)
    assert light["binding.cpp"].decode() == binding_text(MAIN, str(tmp_path / pch.PRELUDE))
    assert light["add.cpp"] == files["add.cpp"] and light["kernel.cu"] == files["kernel.cu"]
    assert _with_prelude({"add.cpp": files["add.cpp"]}, tmp_path) is None
