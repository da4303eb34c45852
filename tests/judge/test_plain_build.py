"""Kernel-only workspaces: extern "C" functions built without torch headers, called via ctypes."""

import importlib.util
import os
import sys

import pytest
import torch

from cuda_gym.judge import Judge, JudgeConfig
from cuda_gym.judge.build import build_kernels
from cuda_gym.judge.plain_build import (
    NO_ENTRY_POINTS,
    SignatureError,
    entry_points,
    is_plain,
)
from cuda_gym.tasks import builtin_task
from tests.solutions import write_kernel_only_solution

SCALE = b"""#include <cstdint>
// y = a * x + 1
extern "C" void scale(const float* __restrict__ x, float* y, int64_t n, float a) {
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + 1.0f;
}
"""
COUNT = b"""extern "C" int count(void) { return 7; }
"""


def _load(module_dir: str):
    spec = importlib.util.spec_from_file_location(
        f"kernels_ext_{abs(hash(module_dir))}", f"{module_dir}/kernels_ext.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _workspace(tmp_path, files: dict[str, bytes]):
    kernels = tmp_path / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (kernels / name).write_bytes(data)
    return kernels


def test_entry_points_are_parsed_with_their_c_types():
    source = b"""
    // extern "C" void commented_out(float* x) {}
    extern "C" __global__ void device_kernel(float* x) {}
    extern "C" void launch(const float* __restrict__ x, __half* h, int n, unsigned int m,
                           double s, cudaStream_t stream) { }
    extern "C" float value(void) { return 1.0f; }
    """
    found = entry_points({"k.cu": source})
    assert [e["name"] for e in found] == ["launch", "value"]
    params = [(p["ctype"], p["pointer"], p["name"]) for p in found[0]["params"]]
    assert params == [
        ("float", True, "x"),
        ("__half", True, "h"),
        ("int", False, "n"),
        ("unsigned int", False, "m"),
        ("double", False, "s"),
        ("cudaStream_t", False, "stream"),
    ]
    assert found[1]["returns"] == "float" and found[1]["params"] == []


def test_c_linkage_is_found_in_blocks_headers_and_attributed_definitions():
    """extern "C" { } blocks (a header's #ifdef __cplusplus form), a prototype in a header and a
    plain definition, attributes and noexcept; static, __global__ and C++-linkage helpers are
    not entry points."""
    header = b"""
    #ifdef __cplusplus
    extern "C" {
    #endif
    void from_header(const float* x, float* out, std::int64_t n);
    #ifdef __cplusplus
    }
    #endif
    """
    source = b"""
    #include "k.h"
    static inline float helper(float v) { return v; }
    float cpp_linkage(float v) { return v; }
    void from_header(const float* x, float* out, std::int64_t n) {
      for (std::int64_t i = 0; i < n; ++i) { out[i] = helper(x[i]); }
    }
    extern "C" {
    void in_block(float* x, int n) { if (n) { x[0] = 1.0f; } }
    static void hidden(float* x) {}
    __global__ void kernel(float* x) {}
    }  // extern "C"
    extern "C" __attribute__((visibility("default"))) int attributed(int n) noexcept {
      return n;
    }
    """
    found = entry_points({"k.h": header, "k.cpp": source})
    assert [e["name"] for e in found] == ["from_header", "in_block", "attributed"]
    assert [p["ctype"] for p in found[0]["params"]] == ["float", "float", "int64_t"]


@pytest.mark.parametrize(
    "source,message",
    [
        (b'extern "C" void f(float** x) {}', "only single pointers"),
        (b'extern "C" void f(std::vector<float> x) {}', "cannot be passed"),
        (b'extern "C" void f(float& x) {}', "references"),
        (b'extern "C" void f(MyStruct* s) {}', "pointers to MyStruct"),
        (b'extern "C" void f(float* x) {}\nextern "C" void f(float* x) {}', "defined twice"),
    ],
)
def test_unsupported_declarations_are_explained(source, message):
    with pytest.raises(SignatureError, match=message):
        entry_points({"k.cpp": source})


def test_torch_headers_select_the_extension_build():
    assert is_plain({"k.cpp": SCALE})
    assert not is_plain({"k.cpp": SCALE, "b.cpp": b"#include <torch/extension.h>\n"})
    assert not is_plain({"b.cpp": b"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}"})
    # A mention inside a comment does not count.
    assert is_plain({"k.cpp": SCALE + b"// #include <torch/extension.h>\n"})


def test_plain_build_is_called_with_tensors_and_checks_arguments(tmp_path):
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache")
    result = build_kernels(_workspace(tmp_path, {"scale.cpp": SCALE, "count.cpp": COUNT}), config)
    assert result.ok and not result.cached, result.errors
    again = build_kernels(tmp_path / "kernels", config)
    assert again.ok and again.cached and again.module_dir == result.module_dir
    ext = _load(result.module_dir)
    x = torch.randn(1000)
    y = torch.empty_like(x)
    assert ext.scale(x, y, x.numel(), 2.0) is None
    assert torch.equal(y, 2.0 * x + 1.0) and ext.count() == 7
    assert "int64_t n" in ext.scale.__doc__
    with pytest.raises(TypeError, match="takes 4 argument"):
        ext.scale(x, y, x.numel())
    with pytest.raises(TypeError, match="expected a tensor of float32, got float64"):
        ext.scale(x.double(), y, 3, 1.0)
    with pytest.raises(TypeError, match="expected an int, got float"):
        ext.scale(x, y, 1.5, 1.0)
    with pytest.raises(TypeError, match="use .item"):
        ext.scale(x, y, 3, torch.tensor(1.0))


def test_an_edit_recompiles_only_the_edited_file(tmp_path):
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache")
    kernels = _workspace(tmp_path, {"scale.cpp": SCALE, "count.cpp": COUNT})
    assert build_kernels(kernels, config).ok
    (kernels / "count.cpp").write_bytes(COUNT.replace(b"7", b"8"))
    result = build_kernels(kernels, config)
    assert result.ok and not result.cached
    assert "(cached) scale.cpp" in result.log and "(cached) count.cpp" not in result.log
    assert _load(result.module_dir).count() == 8


def test_compile_errors_and_missing_entry_points_are_reported(tmp_path):
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache")
    broken = _workspace(tmp_path / "a", {"k.cpp": b'extern "C" void f(float* x) { x[0] = y; }'})
    result = build_kernels(broken, config)
    assert not result.ok and "kernels/k.cpp" in result.errors and "error" in result.errors
    empty = _workspace(tmp_path / "b", {"k.cpp": b"static int helper() { return 1; }\n"})
    result = build_kernels(empty, config)
    assert not result.ok and result.errors == NO_ENTRY_POINTS


def test_compilers_run_at_the_configured_niceness(tmp_path, monkeypatch):
    """Builds yield the CPU to timing: every compile and the link run at +build_nice."""
    record = tmp_path / "niceness.txt"
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f'#!/bin/sh\nnice >> {record}\nexec c++ "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache", build_nice=5)
    assert build_kernels(_workspace(tmp_path, {"scale.cpp": SCALE, "count.cpp": COUNT}), config).ok
    seen = record.read_text().split()
    assert len(seen) == 3 and set(seen) == {str(min(19, os.nice(0) + 5))}


@pytest.mark.slow
def test_a_kernel_only_workspace_is_judged_and_accepted(tmp_path):
    write_kernel_only_solution(tmp_path, "cpu")
    judge = Judge(JudgeConfig(device="cpu", baselines=("eager",), timed_runs=3))  # shared cache
    task = builtin_task("sigmoid_gated_multiply").for_device("cpu")
    verdict = judge.evaluate(task, tmp_path, timing=False)
    assert verdict.compiled and verdict.correct, verdict.error
    assert verdict.violations == []
    assert "kernels_ext" not in sys.modules  # judged in a worker, not here


@pytest.mark.parametrize("value", [-1, 20])
def test_build_nice_out_of_range_is_refused(value):
    from cuda_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="build_nice"):
        JudgeConfig(device="cpu", build_nice=value)
