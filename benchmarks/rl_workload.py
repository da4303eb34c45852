"""An RL batch for the judge: fresh tasks x labelled samples (honest, wrong, crash, hang).

Tasks are built-in tasks with scripted honest solutions (`benchmarks/scripted_solutions.py`),
each copy given new sizes (the kernels are shape-generic) and a salt constant, so its content
hash, and with it every probe and baseline, is new to the judge's cache. Every sample's kernel
sources carry the sample's salt too, so every sample is a new build, as in RL. A sample is one of

- honest "fast" (the scripted, vectorised kernel) or "naive" (same result, a slow loop order or a
  tiny grid): varied speed, all correct;
- wrong: the output scaled by 1.01;
- crash: a write through a bad pointer (SIGSEGV on the CPU, an illegal address on the GPU);
- hang: a loop that never ends;

written in one of three styles an agent uses: "ext" (kernels/ with a torch binding), "plain"
(kernels/ with `extern "C"` functions, no torch headers) and "inline" (KernelBench's
`load_inline` inside model_new.py). C++ for the cpu device, CUDA for the cuda device.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from benchmarks.scripted_solutions import ROW_SUM_CUDA_KERNEL
from cuda_gym.demo import CUDA_KERNEL as GATED_CUDA_KERNEL
from cuda_gym.tasks import Task, builtin_task

LABELS = ("honest", "wrong", "crash", "hang")
DEFAULT_MIX = {"honest": 0.70, "wrong": 0.20, "crash": 0.05, "hang": 0.05}
STYLES = ("ext", "plain", "inline")
GATED, ROW_SUM = "sigmoid_gated_multiply", "weighted_row_sum"
BASES = (GATED, ROW_SUM)

# Sizes of the fresh copies, per (task, device): the names of the task's two size constants,
# then (value, value) choices, used in turn. Odd row lengths take the kernels' scalar paths.
SIZES = {
    (GATED, "cuda"): (
        ("batch_size", "hidden_size"),
        [(4096, 16384), (8192, 8192), (2048, 32768), (8192, 16384), (4096, 16383), (16384, 4096)],
    ),
    (GATED, "cpu"): (
        ("batch_size", "hidden_size"),
        [(512, 4096), (256, 4096), (512, 2048), (384, 4096), (512, 4095)],
    ),
    (ROW_SUM, "cuda"): (
        ("num_rows", "row_length"),
        [(8192, 16384), (16384, 8192), (4096, 32768), (12288, 12288), (8192, 16383)],
    ),
    (ROW_SUM, "cpu"): (
        ("num_rows", "row_length"),
        [(768, 4096), (512, 4096), (1024, 2048), (768, 4095)],
    ),
}


@dataclass(frozen=True)
class Sample:
    """One judged solution of the batch.

    Attributes:
        index: Position in the batch.
        task: The fresh task it solves.
        label: "honest", "wrong", "crash" or "hang": what the judge must conclude.
        variant: "fast" or "naive" for honest samples, else the label.
        style: "ext", "plain" or "inline".
        files: The solution: {relative path: bytes}.
    """

    index: int
    task: Task
    label: str
    variant: str
    style: str
    files: dict[str, bytes]

    @property
    def expected(self) -> str:
        """The verdict this sample must get: "accept" for honest samples, else "reject"."""
        return "accept" if self.label == "honest" else "reject"


def split_counts(total: int, mix: dict[str, float]) -> dict[str, int]:
    """Samples per label: `total` split by `mix` (largest remainders).

    Every label with a positive share gets at least one sample when `total` allows it, so a
    tiny batch still holds a crash and a hang.
    """
    shares = {k: v for k, v in mix.items() if v > 0}
    norm = sum(shares.values())
    if norm <= 0:
        raise ValueError("the mix needs at least one positive share")
    exact = {k: total * v / norm for k, v in shares.items()}
    counts = {k: int(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True):
        if sum(counts.values()) >= total:
            break
        counts[k] += 1
    if total >= len(shares):
        for k in shares:
            if counts[k] == 0:  # take one from the largest class
                counts[max(counts, key=counts.get)] -= 1
                counts[k] = 1
    return {k: counts.get(k, 0) for k in LABELS if k in mix}


def salt_of(*parts) -> str:
    """A short hex salt derived from `parts` (deterministic: the same run makes the same batch)."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


def fresh_task(base: str, index: int, device: str, salt: str) -> Task:
    """A copy of built-in task `base` for `device` with new sizes and a new content hash."""
    source = builtin_task(base).for_device(device).source
    names, choices = SIZES[(base, device)]
    values = choices[index % len(choices)]
    for name, value in zip(names, values):
        source, n = re.subn(rf"(?m)^{name} = .*$", f"{name} = {value}", source, count=1)
        if n != 1:
            raise ValueError(f"task {base!r} has no top-level constant {name!r}")
    source += (
        "\n\n# rl_load: a fresh copy of this task (new sizes; the salt gives a new content hash)\n"
        f'RL_LOAD_SALT = "{salt}"\n'
    )
    return Task(task_id=f"{base}_rl{index}", source=source, origin="rl_load", device=device)


# -- kernel bodies: one entry point per op, `{entry}` is `extern "C" ` for plain builds -----------

CPU_GATED = {
    "fast": """#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      out[i] = x[i] / (1.0f + std::exp(-(g[i] + b[c])));
    }""",
    # Column-major walk, one thread, double precision: correct and several times slower.
    "naive": """for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r * cols + c;
      out[i] = (float)((double)x[i] / (1.0 + std::exp(-((double)g[i] + (double)b[c]))));
    }""",
    "wrong": """#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      out[i] = 1.01f * x[i] / (1.0f + std::exp(-(g[i] + b[c])));
    }""",
}
CPU_ROW_SUM = {
    "fast": """#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; ++c) acc += (double)x[r * cols + c] * w[r * cols + c];
    out[r] = (float)acc;
  }""",
    "naive": """std::vector<double> acc(rows, 0.0);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) acc[r] += (double)x[r * cols + c] * w[r * cols + c];
  for (int64_t r = 0; r < rows; ++r) out[r] = (float)acc[r];""",
    "wrong": """#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; ++c) acc += (double)x[r * cols + c] * w[r * cols + c];
    out[r] = (float)(1.01 * acc);
  }""",
}
CPU_BAD = {
    "crash": """volatile float* bad = nullptr;
  bad[rows] = x[0];  // SIGSEGV""",
    "hang": """volatile uint64_t spin = 0;
  while (true) spin = spin + 1;  // never returns""",
}
CPU_SIGNATURE = {
    GATED: "const float* x, const float* g, const float* b, float* out, int64_t rows, int64_t cols",
    ROW_SUM: "const float* x, const float* w, float* out, int64_t rows, int64_t cols",
}


def cpu_core(base: str, behaviour: str, entry: str) -> str:
    """C++ defining `rl_op(...)`, the sample's kernel, with `entry` before it."""
    body = (CPU_GATED if base == GATED else CPU_ROW_SUM).get(behaviour) or CPU_BAD[behaviour]
    return (
        "#include <cmath>\n#include <cstdint>\n#include <vector>\n\n"
        f"{entry}void rl_op({CPU_SIGNATURE[base]}) {{\n  {body}\n}}\n"
    )


CUDA_SIGNATURE = {
    GATED: "const float* x, const float* g, const float* b, float* out, int64_t rows, "
    "int64_t cols, cudaStream_t stream",
    ROW_SUM: "const float* x, const float* w, float* out, int64_t rows, int64_t cols, "
    "cudaStream_t stream",
}
CUDA_GATED = {
    # The demo's fused kernel (16-byte loads where aligned).
    "fast": (
        GATED_CUDA_KERNEL,
        "launch_gated_multiply(x, g, b, out, rows * cols, cols, stream);",
    ),
    # A grid-stride loop over a tiny grid: correct, far from the bandwidth.
    "naive": (
        r"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void rl_gated_naive(const float* x, const float* g, const float* b, float* out,
                               int64_t n, int64_t cols, float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = scale * x[i] / (1.0f + expf(-(g[i] + b[i % cols])));
}
""",
        "if (rows * cols > 0) rl_gated_naive<<<64, 128, 0, stream>>>(x, g, b, out, rows * cols, "
        "cols, 1.0f);",
    ),
}
CUDA_GATED["wrong"] = (
    CUDA_GATED["naive"][0],
    "if (rows * cols > 0) rl_gated_naive<<<(unsigned)((rows * cols + 255) / 256), 256, 0, "
    "stream>>>(x, g, b, out, rows * cols, cols, 1.01f);",
)
CUDA_ROW_SUM = {
    # The scripted solution's block-per-row reduction.
    "fast": (ROW_SUM_CUDA_KERNEL, "launch_weighted_row_sum(x, w, out, rows, cols, stream);"),
    # A thread per row, uncoalesced reads, double accumulation: correct and slow.
    "naive": (
        r"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void rl_row_sum_naive(const float* x, const float* w, float* out, int64_t rows,
                                 int64_t cols, double scale) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double acc = 0.0;
  for (int64_t c = 0; c < cols; ++c) acc += (double)x[r * cols + c] * w[r * cols + c];
  out[r] = (float)(scale * acc);
}
""",
        "if (rows > 0) rl_row_sum_naive<<<(unsigned)((rows + 127) / 128), 128, 0, stream>>>("
        "x, w, out, rows, cols, 1.0);",
    ),
}
CUDA_ROW_SUM["wrong"] = (
    CUDA_ROW_SUM["naive"][0],
    CUDA_ROW_SUM["naive"][1].replace("cols, 1.0)", "cols, 1.01)"),
)
CUDA_BAD = {
    "crash": (
        r"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void rl_crash(float* out) {
  float* bad = reinterpret_cast<float*>(0x10);
  *bad = out[0];  // an illegal address
}
""",
        "rl_crash<<<1, 1, 0, stream>>>(out);",
    ),
    "hang": (
        r"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void rl_hang() {
  __shared__ volatile int flag;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  while (flag == 0) { }  // nobody ever sets it
}
""",
        "rl_hang<<<1, 32, 0, stream>>>();",
    ),
}


def cuda_core(base: str, behaviour: str, entry: str) -> str:
    """CUDA defining the kernels and the host launcher `rl_op(...)`, with `entry` before it."""
    table = CUDA_GATED if base == GATED else CUDA_ROW_SUM
    kernels, launch = table.get(behaviour) or CUDA_BAD[behaviour]
    return f"{kernels}\n{entry}void rl_op({CUDA_SIGNATURE[base]}) {{\n  {launch}\n}}\n"


# -- torch bindings and model_new.py --------------------------------------------------------------

BINDING = {
    GATED: """torch::Tensor run(torch::Tensor x, torch::Tensor g, torch::Tensor b) {{
  x = x.contiguous(); g = g.contiguous(); b = b.contiguous();
  auto out = torch::empty_like(x);
  const int64_t cols = b.numel();
  rl_op(x.data_ptr<float>(), g.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
        x.numel() / cols, cols{stream});
  return out;
}}
""",
    ROW_SUM: """torch::Tensor run(torch::Tensor x, torch::Tensor w) {{
  x = x.contiguous(); w = w.contiguous();
  auto out = torch::empty({{x.size(0)}}, x.options());
  rl_op(x.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), x.size(0),
        x.size(1){stream});
  return out;
}}
""",
}
RUN_DECLARATION = {
    GATED: "torch::Tensor run(torch::Tensor x, torch::Tensor g, torch::Tensor b);\n",
    ROW_SUM: "torch::Tensor run(torch::Tensor x, torch::Tensor w);\n",
}
PYBIND = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }\n'
TORCH_HEADERS = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n"
CUDA_STREAM_HEADER = "#include <ATen/cuda/CUDAContext.h>\n"
STREAM_ARG = ", at::cuda::getCurrentCUDAStream()"

MODEL_CLASS = {
    GATED: """class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))

    def forward(self, x, gate):
{forward}""",
    ROW_SUM: """class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
{forward}""",
}
PLAIN_FORWARD = {
    GATED: """        x, gate = x.contiguous(), gate.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        kernels_ext.rl_op(x, gate, self.gate_bias, out, x.numel() // cols, cols)
        return out
""",
    ROW_SUM: """        x, w = x.contiguous(), w.contiguous()
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        kernels_ext.rl_op(x, w, out, x.shape[0], x.shape[1])
        return out
""",
}
RUN_FORWARD = {
    GATED: "        return ext.run(x, gate, self.gate_bias)\n",
    ROW_SUM: "        return ext.run(x, w)\n",
}


def solution_files(base: str, device: str, behaviour: str, style: str, salt: str) -> dict:
    """The files of one sample: {relative path: bytes}."""
    tag = f"// rl_load sample {salt}\n"
    head = f'"""rl_load sample {salt}."""\n\nimport torch\nimport torch.nn as nn\n\n'
    cuda = device == "cuda"
    stream = STREAM_ARG if cuda else ""
    binding = BINDING[base].format(stream=stream)
    files: dict[str, str] = {}
    if style == "plain":
        core = (cuda_core if cuda else cpu_core)(base, behaviour, 'extern "C" ')
        files[f"kernels/rl_op.{'cu' if cuda else 'cpp'}"] = tag + core
        model = (
            head
            + "import kernels_ext\n\n\n"
            + MODEL_CLASS[base].format(forward=PLAIN_FORWARD[base])
        )
    elif style == "ext":
        if cuda:
            files["kernels/rl_op.cu"] = tag + cuda_core(base, behaviour, "")
            declaration = f"void rl_op({CUDA_SIGNATURE[base]});\n\n"
            files["kernels/binding.cpp"] = (
                tag + TORCH_HEADERS + CUDA_STREAM_HEADER + declaration + binding + PYBIND
            )
        else:
            files["kernels/rl_op.cpp"] = (
                tag + TORCH_HEADERS + cpu_core(base, behaviour, "") + binding + PYBIND
            )
        model = (
            head
            + "import kernels_ext as ext\n\n\n"
            + MODEL_CLASS[base].format(forward=RUN_FORWARD[base])
        )
    elif style == "inline":
        if cuda:
            cpp = RUN_DECLARATION[base]
            cu = tag + CUDA_STREAM_HEADER + cuda_core(base, behaviour, "") + binding
            sources = f'CPP_SOURCE = r"""\n{cpp}"""\n\nCUDA_SOURCE = r"""\n{cu}"""\n\n'
            call = "cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE"
        else:
            cpp = tag + "#include <torch/extension.h>\n" + cpu_core(base, behaviour, "") + binding
            sources = f'CPP_SOURCE = r"""\n{cpp}"""\n\n'
            call = 'cpp_sources=CPP_SOURCE, extra_cflags=["-O3", "-fopenmp"], ' + (
                'extra_ldflags=["-fopenmp"]'
            )
        model = (
            head
            + "from torch.utils.cpp_extension import load_inline\n\n"
            + sources
            + f'ext = load_inline(name="rl_{salt}", {call}, functions=["run"])\n\n\n'
            + MODEL_CLASS[base].format(forward=RUN_FORWARD[base])
        )
    else:
        raise ValueError(f"unknown style {style!r}; use one of {STYLES}")
    files["model_new.py"] = model
    return {path: text.encode() for path, text in files.items()}


def make_batch(
    tasks: int,
    samples_per_task: int,
    device: str,
    *,
    mix: dict[str, float] | None = None,
    styles: tuple[str, ...] = STYLES,
    seed: int = 0,
    salt: str = "",
) -> list[Sample]:
    """`tasks` fresh tasks x `samples_per_task` samples, labels split by `mix` over the batch.

    Args:
        tasks: Fresh tasks (copies of the built-in tasks in BASES, in turn).
        samples_per_task: Samples per task (a GRPO group).
        device: "cuda" or "cpu".
        mix: Share of each label (default DEFAULT_MIX).
        styles: Styles the samples are written in, drawn at random.
        seed: Seed of the draws; the batch is a function of (arguments, seed, salt).
        salt: Mixed into every task's and sample's salt (e.g. the concurrency level), so
            batches with different salts share no task or build.

    Returns:
        The samples in task order (a group's samples side by side, as a trainer submits them).
    """
    if tasks < 1 or samples_per_task < 1:
        raise ValueError("tasks and samples_per_task must be at least 1")
    unknown = set(styles) - set(STYLES)
    if not styles or unknown:
        raise ValueError(f"styles must be a non-empty subset of {STYLES}, got {styles}")
    rng = random.Random(f"{seed}|{salt}")
    counts = split_counts(tasks * samples_per_task, mix or DEFAULT_MIX)
    labels = [label for label, n in counts.items() for _ in range(n)]
    rng.shuffle(labels)
    batch = []
    for t in range(tasks):
        base = BASES[t % len(BASES)]
        task = fresh_task(base, t, device, salt_of(seed, salt, "task", t))
        for s in range(samples_per_task):
            index = t * samples_per_task + s
            label = labels[index]
            variant = rng.choice(("fast", "naive")) if label == "honest" else label
            style = rng.choice(styles)
            sample_salt = salt_of(seed, salt, "sample", t, s)
            files = solution_files(base, device, variant, style, sample_salt)
            batch.append(Sample(index, task, label, variant, style, files))
    return batch
