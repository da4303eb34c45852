"""Incremental builds: an edit recompiles only the edited unit; identical sources hit the cache."""

import re

import pytest

from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.build import build_kernels

pytestmark = pytest.mark.slow

# The kernel needs no torch headers; only the binding pays for them, once.
KERNEL = """#include <cstdint>
void scale(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * %s;
}
"""
BINDING = """#include <torch/extension.h>
void scale(const float* in, float* out, int64_t n);
torch::Tensor scaled(torch::Tensor x) {
  auto y = torch::empty_like(x);
  scale(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scaled", &scaled); }
"""


def compiled_units(log: str) -> list[str]:
    """The .cpp files the build log shows being compiled."""
    return sorted(set(re.findall(r"-c \S*/(\w+)\.cpp\b", log)))


def write(root, kernel_factor):
    kernels = root / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "kernel.cpp").write_text(KERNEL % kernel_factor)
    (kernels / "binding.cpp").write_text(BINDING)
    return kernels


def test_edits_recompile_only_the_edited_unit(tmp_path):
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache")
    cold = build_kernels(write(tmp_path / "v1", "2.0f"), config)
    assert cold.ok and not cold.cached, cold.errors
    assert compiled_units(cold.log) == ["binding", "kernel"]

    edited = build_kernels(write(tmp_path / "v2", "3.0f"), config)
    assert edited.ok and not edited.cached, edited.errors
    assert compiled_units(edited.log) == ["kernel"]
    assert edited.module_dir != cold.module_dir

    again = build_kernels(write(tmp_path / "v3", "2.0f"), config)
    assert again.ok and again.cached and again.module_dir == cold.module_dir

    broken = build_kernels(write(tmp_path / "v4", "undefined_name"), config)
    assert not broken.ok and "undefined_name" in broken.errors
    assert "kernels/kernel.cpp" in broken.errors

    fixed = build_kernels(write(tmp_path / "v5", "4.0f"), config)
    assert fixed.ok and compiled_units(fixed.log) == ["kernel"], fixed.errors
