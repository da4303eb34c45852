"""A tiny KernelBench-layout problem set (2 levels, 5 CPU-sized problems) with solutions.

Solution outcomes are designed so every metric has a hand-computable value: correct and wrong
solutions, a missing one, and baseline times (written to a baselines file) so large or small
that "faster" and "slower" do not depend on how fast the CPU is.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.kernelbench.baseline_file import BaselineFile
from benchmarks.kernelbench.config import HarnessConfig
from cuda_gym.judge.baselines import baseline_key
from cuda_gym.judge.device import device_info
from cuda_gym.tasks import task_from_file

HEADER = "import torch\nimport torch.nn as nn\n\n"

PROBLEMS = {
    "level1/1_ReLU.py": HEADER
    + '''
class Model(nn.Module):
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return []
''',
    "level1/2_Scale.py": HEADER
    + '''
class Model(nn.Module):
    """Multiplies by a constant."""

    def __init__(self, scale):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return [3.0]
''',
    "level1/3_AddBias.py": HEADER
    + '''
class Model(nn.Module):
    """Adds a learned bias."""

    def __init__(self, n):
        super(Model, self).__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x + self.bias


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return [256]
''',
    "level2/1_ReLU_Scale.py": HEADER
    + '''
class Model(nn.Module):
    """ReLU then scale."""

    def __init__(self, scale):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, x):
        x = torch.relu(x)
        return x * self.scale


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return [0.5]
''',
    "level2/2_Add_ReLU.py": HEADER
    + '''
class Model(nn.Module):
    """Sum of two tensors, then ReLU."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, a, b):
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn(32, 256), torch.randn(32, 256)]


def get_init_inputs():
    return []
''',
}

# One C++ source for every folder-form solution: built once per test session.
OPS_CPP = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

static torch::Tensor map1(torch::Tensor x, float scale, bool relu) {
  x = x.contiguous();
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = xp[i];
    if (relu && v < 0.0f) v = 0.0f;
    op[i] = v * scale;
  }
  return out;
}

torch::Tensor scale(torch::Tensor x, double s) { return map1(x, (float)s, false); }
torch::Tensor relu_scale(torch::Tensor x, double s) { return map1(x, (float)s, true); }

torch::Tensor add_relu(torch::Tensor a, torch::Tensor b, bool relu) {
  a = a.contiguous();
  b = b.contiguous();
  auto out = torch::empty_like(a);
  const float* ap = a.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    float v = ap[i] + bp[i];
    op[i] = (relu && v < 0.0f) ? 0.0f : v;
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale);
  m.def("relu_scale", &relu_scale);
  m.def("add_relu", &add_relu);
}
"""

SCALE_MODEL_NEW = """import torch.nn as nn

import kernels_ext


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return kernels_ext.FUNCTION(x, self.scale)
"""

ADD_RELU_MODEL_NEW = """import torch.nn as nn

import kernels_ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return kernels_ext.add_relu(a, b, RELU)
"""

# KernelBench style: one file, the extension built by load_inline at import.
RELU_LOAD_INLINE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cpp_source = r"""
torch::Tensor relu_forward(torch::Tensor x) {
  x = x.contiguous();
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) op[i] = xp[i] > 0.0f ? xp[i] : 0.0f;
  return out;
}
"""

relu_ext = load_inline(
    name="elementwise_relu",
    cpp_sources=relu_cpp_source,
    functions=["relu_forward"],
    extra_cflags=["-O2"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x)
'''


def folder_solution(model_new: str) -> dict[str, str]:
    return {"model_new.py": model_new, "kernels/ops.cpp": OPS_CPP}


SCALE_FILES = folder_solution(SCALE_MODEL_NEW.replace("FUNCTION", "scale"))
RELU_SCALE_FILES = folder_solution(SCALE_MODEL_NEW.replace("FUNCTION", "relu_scale"))
ADD_RELU_FILES = folder_solution(ADD_RELU_MODEL_NEW.replace("RELU", "True"))
ADD_NO_RELU_FILES = folder_solution(ADD_RELU_MODEL_NEW.replace("RELU", "False"))  # wrong

# The --solutions-dir set: 1_ReLU as a KernelBench file, the others as folders; 3_AddBias has
# none, and 2_Add_ReLU's forgets the ReLU (wrong).
SOLUTIONS = {
    "level1/1_ReLU.py": RELU_LOAD_INLINE,
    **{f"level1/2_Scale/{k}": v for k, v in SCALE_FILES.items()},
    **{f"level2/1_ReLU_Scale/{k}": v for k, v in RELU_SCALE_FILES.items()},
    **{f"level2/2_Add_ReLU/{k}": v for k, v in ADD_NO_RELU_FILES.items()},
}

FAST, SLOW = 1.0e4, 1.0e-7  # baseline ms: any CPU candidate is faster / slower than these
# problem -> (eager ms, compile ms)
BASELINE_MS = {
    "level1/1_ReLU": (FAST, SLOW),
    "level1/2_Scale": (SLOW, FAST),
    "level1/3_AddBias": (FAST, FAST),
    "level2/1_ReLU_Scale": (FAST, FAST),
    "level2/2_Add_ReLU": (SLOW, SLOW),
}

JUDGE_FLAGS = [
    "--device",
    "cpu",
    "--timed-runs",
    "3",
    "--warmup-runs",
    "1",
    "--correctness-trials",
    "2",
    "--no-plots",
]


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def write_kernelbench(root: Path) -> Path:
    """A checkout-like folder: root/KernelBench/level1/..."""
    write_tree(root / "KernelBench", PROBLEMS)
    return root


def write_baselines(path: Path, kernelbench_root: Path, cfg: HarnessConfig) -> Path:
    """A baselines file with BASELINE_MS for cfg's judge settings on this machine."""
    jc = cfg.judge_config()
    info = device_info(jc.device)
    file = BaselineFile(path)
    for key, (eager, compile_ms) in BASELINE_MS.items():
        task = task_from_file(kernelbench_root / "KernelBench" / f"{key}.py").for_device("cpu")
        file.entries[baseline_key(task.content_hash, info, jc)] = {
            "problem": key,
            "baselines": {"eager": {"median_ms": eager}, "compile": {"median_ms": compile_ms}},
        }
    file.save()
    return path


# The KernelBench CUDA style (for the GPU test): load_inline with cuda_sources.
RELU_LOAD_INLINE_CUDA = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

torch::Tensor relu_forward(torch::Tensor x) {
  x = x.contiguous();
  auto out = torch::empty_like(x);
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = (int)((n + threads - 1) / threads);
  relu_kernel<<<blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}
"""

relu_cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"

relu_ext = load_inline(
    name="elementwise_relu_cuda",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_cuda_source,
    functions=["relu_forward"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_forward(x)
'''
