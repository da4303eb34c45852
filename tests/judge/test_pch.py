"""The precompiled torch header: made once from a build's own flags, used by later cold builds."""

import importlib.util
import subprocess
import sys

import pytest

from cuda_gym.judge import JudgeConfig, pch
from cuda_gym.judge.build import build_kernels
from tests.judge.test_build_incremental import BINDING, KERNEL

NINJA = """ninja_required_version = 1.3
cxx = c++

cflags = -DTORCH_EXTENSION_NAME=kernels_ext {includes} -fPIC -std=c++20 -O3
post_cflags = -DEXTRA
ldflags = -shared

rule compile
  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags
"""


def ninja_text(inc) -> str:
    return NINJA.format(includes=f"-isystem {inc} -isystem {inc}/torch/csrc/api/include")


def test_the_header_is_compiled_with_the_builds_own_flags(tmp_path):
    inc = tmp_path / "include"
    (inc / "torch").mkdir(parents=True)
    (inc / "torch" / "extension.h").write_text("#pragma once\n")
    command = pch.compile_command(ninja_text(inc), tmp_path / "out.gch")
    assert command[0] == "c++"
    assert command[1:9] == [
        "-DTORCH_EXTENSION_NAME=kernels_ext",
        "-isystem",
        str(inc),
        "-isystem",
        f"{inc}/torch/csrc/api/include",
        "-fPIC",
        "-std=c++20",
        "-O3",
    ]
    assert command[9:] == [
        "-x",
        "c++-header",
        str(inc / "torch" / "extension.h"),
        "-o",
        str(tmp_path / "out.gch"),
        "-DEXTRA",
    ]
    # A build without the torch headers has nothing to precompile.
    assert pch.compile_command(ninja_text(tmp_path / "none"), tmp_path / "x") is None


def test_no_header_no_flags_and_a_foreign_compiler_is_not_retried(tmp_path):
    assert pch.include_flags(tmp_path) == []
    inc = tmp_path / "include"
    (inc / "torch").mkdir(parents=True)
    (inc / "torch" / "extension.h").write_text("#pragma once\n")
    ninja = tmp_path / "build.ninja"
    ninja.write_text(ninja_text(inc).replace("cxx = c++", "cxx = /bin/false"))
    line = pch.make_pch(tmp_path / "pch", ninja, timeout_s=60)
    assert "not used" in line
    assert "made once, failed" in pch.make_pch(tmp_path / "pch", ninja, timeout_s=60)
    assert pch.include_flags(tmp_path / "pch") == []


def load(module_dir: str):
    spec = importlib.util.spec_from_file_location("kernels_ext", f"{module_dir}/kernels_ext.so")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def workspace(root, kernel: str, binding: str, factor: str):
    kernels = root / "kernels"
    kernels.mkdir(parents=True)
    (kernels / f"{kernel}.cpp").write_text(KERNEL % factor)
    (kernels / f"{binding}.cpp").write_text(BINDING)
    return kernels


@pytest.mark.slow
@pytest.mark.skipif(not pch.is_gcc("c++"), reason="precompiled headers are made with GCC")
def test_a_cold_build_after_the_first_uses_the_precompiled_header(tmp_path):
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache", precompiled_header=True)
    made = build_kernels(workspace(tmp_path / "first", "kernel", "binding", "2.0f"), config)
    assert made.ok, made.errors
    assert "precompiled torch header: made" in made.log
    gch = list((tmp_path / "cache" / "pch").glob("*/torch/extension.h.gch"))
    assert len(gch) == 1

    # The link to the real header beside the .gch: a second include of it must find it.
    assert (gch[0].parent / "extension.h").resolve().is_file()

    # Other file names: a new incremental lineage, so a cold build through torch; it gets -I.
    # Its binding includes torch/extension.h twice (a header of its own including it again):
    # the .gch serves the first, the real header (#pragma once) the second.
    other = workspace(tmp_path / "other", "k2", "b2", "3.0f")
    (other / "common.h").write_text("#pragma once\n#include <torch/extension.h>\n")
    binding = other / "b2.cpp"
    binding.write_text(binding.read_text() + '#include "common.h"\n')
    cold = build_kernels(other, config)
    assert cold.ok, cold.errors
    assert "not used because" not in cold.log  # -Winvalid-pch: GCC took the .gch
    import torch

    x = torch.arange(4, dtype=torch.float32)
    assert torch.equal(load(cold.module_dir).scaled(x), x * 3)
    ninja = next((tmp_path / "cache" / "incremental").glob("*/slot*/build/build.ninja"))
    texts = [
        p.read_text() for p in (tmp_path / "cache" / "incremental").glob("*/*/build/build.ninja")
    ]
    assert sum(f"-I{gch[0].parent.parent}" in t for t in texts) == 1, ninja
    # Beside the .gch, the binding prelude's. That build kept its binding as written: its own
    # header includes torch/extension.h, which after the prelude would be parsed in full.
    prelude = gch[0].parent.parent / pch.PRELUDE
    assert pch.prelude_ready(prelude.parent.parent)
    (src,) = (tmp_path / "cache" / "incremental").glob("*/slot*/src/b2.cpp")
    assert src.read_text() == binding.read_text()
    # Without such a header, the binding includes the prelude first; GCC takes its .gch.
    third = workspace(tmp_path / "third", "k3", "b3", "4.0f")
    light = build_kernels(third, config)
    assert light.ok, light.errors
    assert "not used because" not in light.log
    (src,) = (tmp_path / "cache" / "incremental").glob("*/slot*/src/b3.cpp")
    assert src.read_text().startswith(f'#include "{prelude}"\n#line 1\n')
    # (Another process: one process cannot load two modules named kernels_ext.)
    check = (
        "import sys, torch; sys.path.insert(0, sys.argv[1]); import kernels_ext;"
        "x = torch.arange(4.0); assert torch.equal(kernels_ext.scaled(x), x * 4)"
    )
    done = subprocess.run([sys.executable, "-c", check, light.module_dir], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
