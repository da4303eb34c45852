import dataclasses
import textwrap

import pytest

from cuda_gym.judge.static_checks import (
    RULES,
    StaticViolation,
    check_native_sources,
    check_solution_source,
)

# A KernelBench-style load_inline solution. The CUDA string holds words that would be
# violations as code (try, exec, os.environ, import subprocess): strings are not code.
LOAD_INLINE_SOLUTION = '''\
"""Fused ReLU with load_inline."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
// try { exec("rm"); } catch (...) {}  -- os.environ["X"]; import subprocess
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = x[i] > 0.f ? x[i] : 0.f; }
}
torch::Tensor f(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const char* msg = "don't \\"quote\\" me";
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
CPP_SOURCE = "torch::Tensor f(torch::Tensor x);"

ext = load_inline(name="x", cpp_sources=CPP_SOURCE, cuda_sources=SOURCE, functions=["f"])


class ModelNew(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, features = x.shape
        out = torch.empty_like(x)
        out = ext.f(x.contiguous())
        return out.view(batch, features) * self.weight
'''

KERNELS_EXT_SOLUTION = """\
from __future__ import annotations

import math

import torch
import torch.nn as nn

import kernels_ext

BLOCK = 256


def blocks_for(n: int) -> int:
    return math.ceil(n / BLOCK)


class ModelNew(nn.Module):
    def __init__(self, n: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n))
        if bias:
            self.bias = nn.Parameter(torch.empty(n))
        else:
            self.register_parameter("bias", None)
        self.register_buffer("scale", torch.ones(1))
        nn.init.uniform_(self.weight, -1 / math.sqrt(n), 1 / math.sqrt(n))

    @staticmethod
    def grid(x: torch.Tensor) -> int:
        return blocks_for(x.numel())

    def forward(self, x):
        bias = getattr(self, "bias", None)
        return kernels_ext.forward(x, self.weight, bias, self.grid(x))
"""

TRITON_SOLUTION = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)  # noqa: E731
        add_kernel[grid](x, out, out, x.numel(), BLOCK=1024)
        return out
"""


def violations(source: str, **kwargs) -> list[tuple[str, int]]:
    return [(v.rule, v.line) for v in check_solution_source(textwrap.dedent(source), **kwargs)]


@pytest.mark.parametrize(
    "source",
    [
        LOAD_INLINE_SOLUTION,
        KERNELS_EXT_SOLUTION,
        TRITON_SOLUTION,
        # try/finally has no handler that could fall back to PyTorch.
        "import kernels_ext\ndef f(x):\n    try:\n        return kernels_ext.f(x)\n"
        "    finally:\n        pass\n",
        # `input` and `compile` are ordinary parameter names, not the builtins.
        "import kernels_ext\ndef f(input, compile=False):\n    return kernels_ext.f(input)\n",
        # Reading module-level constants, including a dict, inside forward.
        """\
        import torch
        import kernels_ext
        NAMES = {torch.float32: "f32", torch.float16: "f16"}
        def forward(x):
            return kernels_ext.f(x, NAMES[x.dtype])
        """,
        # Reading a backend flag is fine; only changing it is not.
        "import torch\nTF32 = torch.backends.cuda.matmul.allow_tf32\n",
        # A cached zero-argument loader is a lazy import, not a result cache.
        """\
        import functools
        from torch.utils.cpp_extension import load
        @functools.lru_cache
        def extension():
            return load(name="k", sources=["k.cu"], is_python_module=True)
        """,
        # autograd.Function stores on its per-call ctx; self.bias.add is a tensor op.
        """\
        import torch
        import kernels_ext
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.n = x.numel()
                return kernels_ext.f(x)
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                out = Fn.apply(x)
                out[0] = 0
                return self.bias.add(out)
        """,
        # Frozen config dataclasses, typing and collections are allowed.
        """\
        import collections
        from dataclasses import dataclass
        from typing import Optional
        ORDER = collections.OrderedDict(a=1)
        @dataclass(frozen=True)
        class Config:
            block: int = 256
            name: Optional[str] = None
        """,
    ],
    ids=[
        "load_inline",
        "kernels_ext",
        "triton",
        "try_finally",
        "builtin_names_as_params",
        "module_constants",
        "read_backend_flag",
        "lazy_loader",
        "autograd_function",
        "config_dataclass",
    ],
)
def test_legitimate_solution_has_no_violations(source):
    assert violations(source) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # try_except
        (
            """\
            import torch
            import kernels_ext
            def forward(x):
                try:
                    return kernels_ext.f(x)
                except Exception:
                    return torch.relu(x)
            """,
            [("try_except", 4)],
        ),
        ("try:\n    import kernels_ext\nexcept ImportError:\n    pass\n", [("try_except", 1)]),
        (
            "class Quiet:\n    def __enter__(self):\n        return self\n"
            "    def __exit__(self, *exc):\n        return True\n",
            [("try_except", 4)],
        ),
        # forbidden_import
        ("import threading", [("forbidden_import", 1)]),
        ("import torch\nimport os.path as p\n", [("forbidden_import", 2)]),
        ("from subprocess import run", [("forbidden_import", 1)]),
        ("from . import helpers", [("forbidden_import", 1)]),
        ("from torch import *", [("forbidden_import", 1)]),
        ("import torch._dynamo", [("forbidden_import", 1)]),
        ("from torch import jit", [("forbidden_import", 1)]),
        # reference_access
        ("from model import Model", [("reference_access", 1)]),
        ("import reference_task", [("reference_access", 1)]),
        ("import torch.nn as nn\nclass ModelNew(Model):\n    pass\n", [("reference_access", 2)]),
        ("def forward(x):\n    return Model(3)(x)\n", [("reference_access", 2)]),
        ("import torch\nref = torch.Model\n", [("reference_access", 2)]),
        # dynamic_code
        ("maps = open('/proc/self/maps').read()", [("dynamic_code", 1)]),
        ("exec('import os')", [("dynamic_code", 1)]),
        ("os = __import__('os')", [("dynamic_code", 1)]),
        ("import torch\ndef pick(name):\n    return getattr(torch, name)\n", [("dynamic_code", 3)]),
        ("import torch\nsetattr(torch, 'allclose', lambda *a, **k: True)\n", [("dynamic_code", 2)]),
        ("class M:\n    def f(self, k):\n        return getattr(self, k)\n", [("dynamic_code", 3)]),
        ("g = getattr", [("dynamic_code", 1)]),
        ("import torch\ndef f(x, o=vars):\n    return o(torch)\n", [("dynamic_code", 2)]),
        ("import torch\nT = type('T', (torch.nn.Module,), {})\n", [("dynamic_code", 2)]),
        # introspection
        (
            "import sys\ndef f():\n    return sys._getframe(1).f_globals\n",
            [
                ("forbidden_import", 1),
                ("introspection", 3),
            ],
        ),
        ("def f(x):\n    return x.__class__.__mro__\n", [("introspection", 2)]),
        ("def f(fn):\n    return getattr(fn, '__globals__')\n", [("introspection", 2)]),
        ("real_len = __builtins__['len']", [("introspection", 1)]),
        ("def f():\n    return (yield).gi_frame.f_back\n", [("introspection", 2)]),
        # monkey_patch
        ("import torch\ntorch.cuda.Event.elapsed_time = lambda *a: 0.001\n", [("monkey_patch", 2)]),
        ("import torch.nn.functional as F\nF.relu = lambda x: x\n", [("monkey_patch", 2)]),
        ("import torch\ndel torch.allclose\n", [("monkey_patch", 2)]),
        ("from torch import cuda\ncuda.synchronize = lambda: None\n", [("monkey_patch", 2)]),
        (
            "import builtins\nbuiltins.print = len\n",
            [
                ("forbidden_import", 1),
                ("monkey_patch", 2),
            ],
        ),
        # precision_flags
        ("import torch\ntorch.backends.cudnn.allow_tf32 = True\n", [("precision_flags", 2)]),
        ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n", [("precision_flags", 2)]),
        ("import torch\ntorch.set_float32_matmul_precision('medium')\n", [("precision_flags", 2)]),
        ("import torch\ntorch.backends.cuda.enable_flash_sdp(False)\n", [("precision_flags", 2)]),
        (
            "from torch import set_default_dtype\nset_default_dtype(None)\n",
            [("precision_flags", 2)],
        ),
        # torch_compile
        (
            """\
            import torch
            class ModelNew(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fn = torch.compile(torch.relu)
            """,
            [("torch_compile", 5)],
        ),
        ("import torch\n@torch.jit.script\ndef f(x):\n    return x\n", [("torch_compile", 2)]),
        ("import torch\ntorch._dynamo.reset()\n", [("torch_compile", 2)]),
        ("class M:\n    def __init__(self):\n        self.compile()\n", [("torch_compile", 3)]),
        # tensor_subclass
        ("import torch\nclass T(torch.Tensor):\n    pass\n", [("tensor_subclass", 2)]),
        ("from torch import Tensor\nclass T(Tensor):\n    pass\n", [("tensor_subclass", 2)]),
        (
            "class Spy:\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n"
            "        return f(*a)\n",
            [("tensor_subclass", 3)],
        ),
        ("def f(out, T):\n    return out.as_subclass(T)\n", [("tensor_subclass", 2)]),
        ("import torch\nt = torch.Tensor._make_subclass(T, x)\n", [("tensor_subclass", 2)]),
        # side_stream
        ("import torch\ns = torch.cuda.Stream()\n", [("side_stream", 2)]),
        ("import torch\ng = torch.cuda.CUDAGraph()\n", [("side_stream", 2)]),
        ("import torch\nstart = torch.cuda.Event(enable_timing=True)\n", [("side_stream", 2)]),
        ("from torch.cuda import Stream as S\ns = S()\n", [("side_stream", 2)]),
        # op_registration
        ("import torch\nlib = torch.library.Library('aten', 'IMPL')\n", [("op_registration", 2)]),
        ("import torch\ntorch.ops.load_library('libmy.so')\n", [("op_registration", 2)]),
        (
            """\
            from torch.utils.cpp_extension import load_inline
            load_inline(
                name="ops",
                cpp_sources="",
                is_python_module=False,
            )
            """,
            [("op_registration", 2)],
        ),
        (
            "import torch.utils.cpp_extension as ce\nce.load(name='k', sources=['k.cu'], **kw)\n",
            [("op_registration", 2)],
        ),
        # global_state
        (
            """\
            import torch.nn as nn
            import kernels_ext
            _cache = {}
            class ModelNew(nn.Module):
                def forward(self, x):
                    key = x.data_ptr()
                    if key not in _cache:
                        _cache[key] = kernels_ext.f(x)
                    return _cache[key]
            """,
            [("global_state", 6), ("global_state", 8)],
        ),
        (
            """\
            import torch.nn as nn
            import kernels_ext
            class ModelNew(nn.Module):
                def forward(self, x):
                    out = kernels_ext.f(x)
                    self.cached = out
                    return out
            """,
            [("global_state", 6)],
        ),
        (
            "class M:\n    def forward(self, x):\n        self.memo[x.shape] = x\n"
            "        setattr(self, 'last', x)\n        self.seen.append(x)\n",
            [("global_state", 3), ("global_state", 4), ("global_state", 5)],
        ),
        (
            "_last = None\nclass M:\n    def forward(self, x):\n        global _last\n"
            "        _last = x\n",
            [("global_state", 4)],
        ),
        ("OUTS = []\ndef run(x):\n    OUTS.append(x)\n", [("global_state", 3)]),
        (
            "class State:\n    pass\nSTATE = State()\ndef run(x):\n    STATE.out = x\n",
            [("global_state", 5)],
        ),
        (
            "import functools\n@functools.lru_cache(maxsize=None)\ndef run(x):\n    return x\n",
            [("global_state", 2)],
        ),
    ],
)
def test_exploit_is_flagged_with_rule_and_line(source, expected):
    assert violations(source) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # PyTorch's per-element Python loops (red-team round 20), however the method is reached
        ("def f(o, x, g):\n    o.map_(x, g)\n", [("host_compute", 2)]),
        ("import torch\nM = torch.Tensor.map2_\n", [("host_compute", 2)]),
        ("def f(x, g):\n    x.apply_(g)\n", [("host_compute", 2)]),
        # torch.Tensor's C base, past the runner's stand-ins
        (
            "import torch\ndef f(x):\n    return super(torch.Tensor, x).tolist()\n",
            [("introspection", 3)],
        ),
        (
            "import torch\ndef f(x):\n    return torch.Tensor.mro()[1].tolist(x)\n",
            [("introspection", 3)],
        ),
        ("s = super\n", [("introspection", 1)]),
        (
            "import torch\nc = torch.ctypes.c_float\n",
            [("forbidden_import", 2), ("introspection", 2)],
        ),
        # NumPy over a tensor's memory: an array protocol of the solution's (round 21)
        (
            "class Raw:\n    def __init__(self, a):\n"
            "        self.__array_interface__ = {'data': a}\n",
            [("host_compute", 3)],
        ),
        ("class Raw:\n    def __array__(self):\n        return self.a\n", [("host_compute", 2)]),
        (
            "d = dict(__array_struct__=1)\nk = '__array_interface__'\n",
            [("host_compute", 1), ("host_compute", 2)],
        ),
        (
            "class Raw:\n    def __dlpack__(self, stream=None):\n        return self.c\n",
            [("host_compute", 2)],
        ),
        # a class of the file's own: fine, with or without arguments
        (
            "class A:\n    def __init__(self):\n        super(A, self).__init__()\n"
            "        super().__init__()\n",
            [],
        ),
    ],
)
def test_ways_to_torch_data_in_python_are_refused(source, expected):
    assert violations(source) == expected


def test_side_streams_pass_when_allowed():
    source = "import torch\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    pass\n"
    assert violations(source, allow_streams=True) == []
    assert violations(source) == [("side_stream", 2), ("side_stream", 3)]


def test_aliased_names_are_resolved():
    source = "import torch\nE = torch.cuda.Event\nF = torch.set_default_dtype\ne = E()\nF(None)\n"
    assert violations(source) == [
        ("side_stream", 2),
        ("precision_flags", 3),
        ("side_stream", 4),
        ("precision_flags", 5),
    ]


def test_violations_are_sorted_by_line_and_deduplicated():
    source = "import os\nimport torch\nexec('x')\nimport sys\ntorch.jit.script(torch.jit.trace)\n"
    assert violations(source) == [
        ("forbidden_import", 1),
        ("dynamic_code", 3),
        ("forbidden_import", 4),
        ("torch_compile", 5),
    ]


@pytest.mark.parametrize(
    ("source", "line"),
    [("class ModelNew(:\n", 1), ("x = 1\n\ndef f(\n", 3), ("x = 1\x00\n", 0), ("(" * 500, 1)],
    ids=["bad_class", "unclosed_call", "null_byte", "deep_nesting"],
)
def test_unparsable_source_is_one_syntax_violation(source, line):
    result = check_solution_source(source)
    assert [(v.rule, v.line) for v in result] == [("syntax", line)]
    assert "does not parse" in result[0].message


def test_messages_are_one_sentence_and_rules_are_documented():
    source = "\n".join(
        [
            "import os",
            "os.system('ls')",
            "from model import Model",
            "import torch",
            "torch.cuda.Event.elapsed_time = None",
            "torch.backends.cudnn.benchmark = True",
            "s = torch.cuda.Stream()",
            "f = torch.compile(len)",
            "torch.ops.load_library('x.so')",
            "c = torch._C",
            "class T(torch.Tensor):",
            "    def forward(self, x):",
            "        try:",
            "            self.y = x.data_ptr()",
            "        except Exception:",
            "            return eval('x').__class__",
            "x.map_(x, max)",
            "super(torch.Tensor, x).tolist()",
        ]
    )
    result = check_solution_source(source)
    # dispatcher_bypass, native_include and token_pasting are about C++/CUDA sources.
    native = {
        "syntax",
        "dispatcher_bypass",
        "native_include",
        "token_pasting",
        "python_from_native",
        "kernel_copies",
    }
    assert {v.rule for v in result} == set(RULES) - native
    for v in result:
        assert v.message.endswith(".") and "\n" not in v.message
        assert v.message.count(". ") == 0, v.message
        assert str(v).startswith(f"{v.rule} (line {v.line}): ")


def test_static_violation_is_frozen():
    violation = StaticViolation("try_except", 3, "No.")
    with pytest.raises(dataclasses.FrozenInstanceError):
        violation.line = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "import torch\nm = torch.utils._python_dispatch._disable_current_modes()\n",
            [("introspection", 2), ("private_api", 2)],
        ),
        # The mode stack's getters reached through a module found at run time, and closures.
        (
            "import typing\nm = typing.sys.modules['torch._C']._get_dispatch_stack_at(0)\n",
            [("forbidden_import", 2), ("introspection", 2)],
        ),
        ("def f(cell):\n    return cell.cell_contents\n", [("introspection", 2)]),
        ("import operator\nget = operator.attrgetter('_C')\n", [("dynamic_code", 2)]),
        ("from operator import methodcaller\nm = methodcaller('x')\n", [("dynamic_code", 2)]),
        ("from torch.utils._python_dispatch import _pop_mode\n", [("private_api", 1)]),
        (
            "import torch\nclocks = [torch._logging._internal.time]\n",
            [("forbidden_import", 2), ("private_api", 2)],
        ),
        ("import torch\nv = torch.__version__\n", []),
        ("def forward(self, x, memo={}):\n    return x\n", [("global_state", 1)]),
        ("def f(x, *, seen=set()):\n    return x\n", [("global_state", 1)]),
        ("def f(x, memo=None, shape=(1, 2)):\n    return x\n", []),
        # A pointer read for its alignment only; any other use of it stays refused.
        ("def f(x):\n    return x.data_ptr() % 16 == 0 and x.data_ptr() & 15 == 0\n", []),
        ("def f(x):\n    return x.data_ptr() % 65536\n", [("global_state", 2)]),
        ("def f(x):\n    return x.data_ptr() & 0xFFFFFF\n", [("global_state", 2)]),
        ("def f(x, n):\n    return x.data_ptr() % n\n", [("global_state", 2)]),
        ("def f(x):\n    return x.data_ptr() // 16\n", [("global_state", 2)]),
    ],
)
def test_private_apis_and_mutable_defaults(source, expected):
    assert violations(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        # Objects found by dotted names in strings (a red team's walks to __import__ and gc).
        "import string\nget = string.Formatter().get_field\n",
        "from string import Formatter\nf = Formatter()\n",
        "import logging.config\nlogging.config.dictConfig({'version': 1})\n",
        "from logging import config\nconfig.dictConfig({'version': 1})\n",
        "from logging.config import dictConfig\ndictConfig({'version': 1})\n",
        # Code or libraries loaded from data.
        "import numpy as np\nlib = np.ctypeslib.load_library('x', '.')\n",
        "import numpy as np\nw = np.load('w.npy', allow_pickle=True)\n",
        "import torch\nw = torch.load('w.pt', weights_only=False)\n",
    ],
)
def test_names_looked_up_from_strings_are_refused_under_external_rules(source):
    assert ("dynamic_code", 2) in violations(source, rules="external")


def test_plain_logging_and_string_constants_stay_allowed():
    source = (
        "import logging\nimport string\nlog = logging.getLogger(__name__)\n"
        "A = string.ascii_letters\n"
    )
    assert violations(source, rules="external") == []


def test_native_sources_may_not_touch_dispatch_keys():
    from cuda_gym.judge.static_checks import check_native_sources, string_constants

    guarded = (
        "#include <torch/types.h>\nvoid f() {\n  c10::impl::ExcludeDispatchKeyGuard g(ks);\n}\n"
    )
    found = check_native_sources(
        {"kernels/k.cpp": guarded, "kernels/ok.cu": "__global__ void k() {}"}
    )
    assert [(v.rule, v.line) for v in found] == [("dispatcher_bypass", 3)]
    assert "kernels/k.cpp" in found[0].message
    assert string_constants("x = 'a'\ny = f('b')\n") == ["a", "b"]


def test_native_sources_may_not_export_buffers_to_python():
    # memoryview(obj).tobytes() gathers a strided buffer: a transpose by libpython (round 20)
    from cuda_gym.judge.static_checks import check_native_sources

    for line in (
        'py::class_<V>(m, "V", py::buffer_protocol())',
        ".def_buffer([](V& v) { return info(v); })",
        "static int get(PyObject* o, Py_buffer* view, int flags);",
        "#include <pybind11/numpy.h>",
        "return py::array_t<float>(shape, strides, ptr);",
        "#include <ATen/dlpack.h>",
        "auto* m = new DLManagedTensorVersioned();",
        'return PyCapsule_New(m, "dltensor_versioned", drop);',
    ):
        found = check_native_sources({"k.cpp": "void f() {}\n" + line + "\n"})
        assert [(v.rule, v.line) for v in found][:1] == [("dispatcher_bypass", 2)], line
        assert {v.rule for v in found} <= {"dispatcher_bypass", "python_from_native"}, line


@pytest.mark.parametrize(
    ("line", "token"),
    [
        ("enum class DispatchMode { kRows, kCols };", None),
        ("int findOptimalChunk(int n) { return n / 4; }", None),
        ("bool findSchemaLike = false;", None),
        ("auto op = dispatcher.findOp(name);", "findOp"),
        ('auto s = d->findSchemaOrThrow("aten::mm", "");', "findSchemaOrThrow"),
        ("at::tracer::impl::NoTracerDispatchMode guard;", "NoTracerDispatchMode"),
        ("auto k = DispatchModeKey::PROXY;", "DispatchModeKey"),
        # Python run by name from C++, and files read into the build by the assembler.
        ('auto gc = py::module_::import("gc");', "::import("),
        ('py::exec("import os", scope);', "py::exec"),
        ('__asm__(".incbin \\"/etc/hostname\\"");', "incbin"),
        # GNU as reads directives in any case
        ('__asm__(".INCBIN \\"/etc/hostname\\"");', "INCBIN"),
        ('__asm__(".INCLUDE \\"/etc/hostname\\"");', '.INCLUDE \\"'),
    ],
)
def test_native_words_match_whole_identifiers(line, token):
    from cuda_gym.judge.static_checks import check_native_sources

    found = check_native_sources({"kernels/k.cu": line})
    bypass = [v.message.split("`")[1] for v in found if v.rule == "dispatcher_bypass"]
    assert bypass == ([token] if token else [])


EXTERNAL_STYLE_SOLUTION = """\
import hashlib
import itertools
import os
import pathlib
import warnings

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = "torch::Tensor f(torch::Tensor x) { return x; }"
os.environ["TORCH_CUDA_ARCH_LIST"] = os.environ.get("ARCH", "9.0")
BUILD = os.path.join(os.environ.get("TMPDIR", "/tmp"), hashlib.sha1(SOURCE.encode()).hexdigest())
os.makedirs(BUILD, exist_ok=True)
pathlib.Path(BUILD).mkdir(exist_ok=True)
warnings.filterwarnings("ignore")
ext = load_inline(name="f", cpp_sources=SOURCE, functions=["f"], build_directory=BUILD)
PAIRS = list(itertools.product(range(2), repeat=2))


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
"""


def test_external_rules_accept_stdlib_style_and_env_rules_name_the_modules():
    assert violations(EXTERNAL_STYLE_SOLUTION, rules="external") == []
    env = check_solution_source(EXTERNAL_STYLE_SOLUTION, rules="env")
    assert [(v.rule, v.line) for v in env] == [
        ("forbidden_import", 3),
        ("forbidden_import", 4),
        ("monkey_patch", 12),
    ]
    # The message lists exactly the modules the rule set allows.
    assert "hashlib, itertools" in env[0].message and "warnings" in env[0].message


@pytest.mark.parametrize("module", ["hashlib", "warnings", "itertools", "operator", "enum", "re"])
def test_harmless_stdlib_modules_pass_env_rules(module):
    assert violations(f"import {module}\nimport torch\n") == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os\nos.system('ls')\n", [("process_control", 2)]),
        ("from os import fork\n", [("process_control", 1)]),
        ("import os\nos.kill(1, 9)\n", [("process_control", 2)]),
        ("import os\nos._exit(0)\n", [("process_control", 2)]),
        ("import os\nos.path = None\n", [("monkey_patch", 2)]),
        ("import subprocess\n", [("forbidden_import", 1)]),
        ("import ctypes\n", [("forbidden_import", 1)]),
        ("import sys\n", [("forbidden_import", 1)]),
        ("import time\n", [("forbidden_import", 1)]),
        ("import gc\n", [("forbidden_import", 1)]),
        ("import threading\n", [("forbidden_import", 1)]),
    ],
)
def test_external_rules_still_refuse_what_reaches_the_harness(source, expected):
    assert violations(source, rules="external") == expected


def test_unknown_rule_set_is_refused():
    with pytest.raises(ValueError, match="unknown rule set"):
        check_solution_source("x = 1\n", rules="loose")


def test_judge_config_names_the_rule_sets_and_the_cli_defaults_to_external():
    from cuda_gym.cli import build_parser
    from cuda_gym.errors import ConfigError
    from cuda_gym.judge.config import JudgeConfig

    assert JudgeConfig().code_rules == "env"
    with pytest.raises(ConfigError, match="code_rules"):
        JudgeConfig(code_rules="loose")
    args = build_parser().parse_args(["judge", "task.py", "solution.py"])
    assert args.rules == "external"


def test_triton_solutions_are_known_to_compile_at_their_first_call():
    from cuda_gym.judge.static_checks import compiles_at_first_call

    assert compiles_at_first_call("import torch\nimport triton\nimport triton.language as tl\n")
    assert compiles_at_first_call("from triton import language as tl\n")
    assert compiles_at_first_call("def f():\n    import triton.language\n")
    assert compiles_at_first_call("import cupy as cp\n")  # (RawKernel: NVRTC at first call)
    assert not compiles_at_first_call("import torch\nfrom torch.utils.cpp_extension import load\n")
    assert not compiles_at_first_call("from .triton import x\n")
    assert not compiles_at_first_call("import triton_helpers\n")
    assert not compiles_at_first_call("def (:\n")


# Patterns of public KernelBench solutions that the rules once rejected (2,233 checked: 111 false
# rejections under "external", of six kinds), each with a near miss that stays rejected.
HONEST_PATTERNS = {
    "fan_in_helper": """\
        import math
        import torch.nn as nn
        class ModelNew(nn.Module):
            def reset_parameters(self):
                fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
                nn.init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))
        """,
    "ntuple_helper": """\
        import torch.nn as nn
        from torch.nn.modules.utils import _triple
        class ModelNew(nn.Module):
            def __init__(self, kernel_size):
                super().__init__()
                self.kernel_size = _triple(kernel_size)
        """,
    "constant_list_default_of_init": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self, depths=[2, 2, 6, 2], heads=[3, 6, 12, 24]):
                super().__init__()
                self.depths = depths
        """,
    "rnn_parameters_by_layer": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                ws = [getattr(self.gru, "weight_ih_l%d" % k) for k in range(2)]
                ws += [getattr(self, f"weight_hh_l{k}") for k in range(2)]
                ws += [getattr(self.gru_layers, f"layer_{k}_fwd_ih") for k in range(2)]
                ws += [getattr(self, f"stage{k}") for k in range(2)]
                ws += [getattr(self, "down_" + str(k)) for k in range(2)]
                return getattr(self.lstm, "bias_ih_l" + str(0)) + ws[0]
        """,
    "batch_norm_extra_repr": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def extra_repr(self):
                return "{num_features}, eps={eps}".format(**self.__dict__)
        """,
    "weights_moved_in_forward": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                self.weight = self.weight.to(x.device)
                self.bias = self.bias.cuda()
                return x
        """,
    # (A second sweep, 5,049 files at 230e1bb: three more kinds.)
    "parameter_data_moved_in_forward": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                if not self.weight.is_contiguous():
                    self.weight.data = self.weight.data.contiguous()
                self.fc.weight.data = self.fc.weight.data.to(x.device)
                self.fc.bias.data = self.fc.bias.to(x.device)
                return x
        """,
    "batch_norm_submodule_statistics_in_forward": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                m = self.bn.momentum
                self.bn.running_mean = (1 - m) * self.bn.running_mean + m * x.mean(0)
                self.bn.running_var = (1 - m) * self.bn.running_var + m * x.var(0)
                self.bn.num_batches_tracked += 1
                return x
        """,
    "own_class_named_model": """\
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self, n):
                super(Model, self).__init__()
        class ModelNew(Model):
            def forward(self, x):
                return x
        """,
}

# Near misses of the patterns above, still rejected.
NEAR_MISSES = {
    "another_attribute_moved_in": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                self.fc.weight.data = self.cache.to(x.device)
                return x
        """,
    "other_state_on_a_submodule": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                self.bn.memo = x
                return x
        """,
    "statistics_name_on_self": """\
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                self.running_mean = x
                return x
        """,
    "model_defined_only_in_a_function": """\
        import torch.nn as nn
        def helper():
            class Model(nn.Module):
                pass
        class ModelNew(Model):
            pass
        """,
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_of_honest_patterns_stay_rejected(name):
    rules = {rule for rule, _ in violations(NEAR_MISSES[name], rules="external")}
    assert rules == {"reference_access" if "model" in name else "global_state"}


@pytest.mark.parametrize("name", sorted(HONEST_PATTERNS))
@pytest.mark.parametrize("rules", ["env", "external"])
def test_honest_patterns_of_public_solutions_pass(name, rules):
    assert violations(HONEST_PATTERNS[name], rules=rules) == []


def test_einops_is_allowed_for_code_written_elsewhere_only():
    source = "from einops import rearrange\n"
    assert violations(source, rules="external") == []
    assert [rule for rule, _ in violations(source, rules="env")] == ["forbidden_import"]


def test_a_registered_buffer_may_be_rebound_in_forward_like_running_statistics():
    source = (
        "import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
        "    def __init__(self, c):\n        super().__init__()\n"
        '        self.register_buffer("running_mean", torch.zeros(c))\n\n'
        "    def forward(self, x):\n"
        "        self.running_mean = x\n"
        "        self.memo = x\n"
        "        return x\n"
    )
    assert violations(source, rules="external") == [("global_state", 11)]


def test_numpy_in_init_is_allowed_for_code_written_elsewhere_only():
    # Inside forward the runner refuses every way of taking tensor data to NumPy.
    source = (
        "import numpy as np\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n"
        "    def __init__(self, d):\n        super().__init__()\n"
        "        self.scale = float(np.sqrt(d))\n"
    )
    assert violations(source, rules="external") == []
    assert [rule for rule, _ in violations(source, rules="env")] == ["forbidden_import"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch.nn as nn\nnn.init._no_grad_uniform_(w, 0, 1)\n", [("private_api", 2)]),
        (
            "class M:\n    def forward(self, x, memo=[]):\n        return x\n",
            [("global_state", 2)],
        ),
        (
            "class M:\n    def __init__(self, cache={}, seen=[len]):\n        pass\n",
            [("global_state", 2)],
        ),
        ("import torch\ngetattr(torch, 'comp' + 'ile')\n", [("dynamic_code", 2)]),
        (
            "class M:\n    def f(self):\n        return getattr(self.t, 'comp' + 'ile')\n",
            [("dynamic_code", 3)],
        ),
        (
            "class M:\n    def f(self, n):\n        return getattr(self, f'__{n}__')\n",
            [("dynamic_code", 3)],
        ),
        (
            "class M:\n    def f(self):\n        return '{x.__class__}'.format(**self.__dict__)\n",
            [("introspection", 3)],
        ),
        (
            "class M:\n    def f(self):\n        return dict(**self.__dict__)\n",
            [("introspection", 3)],
        ),
        (
            "class M:\n    def forward(self, x):\n        self.w = self.v.to(x.device)\n",
            [("global_state", 3)],
        ),
        (
            "class M:\n    def forward(self, x):\n        self.w = x.to(self.w.device)\n",
            [("global_state", 3)],
        ),
    ],
    ids=[
        "other_private_init",
        "list_default_of_forward",
        "dict_or_nonconstant_default_of_init",
        "getattr_module_built_name",
        "getattr_self_other_prefix",
        "getattr_self_dunder",
        "format_field_attribute",
        "self_dict_elsewhere",
        "forward_stores_another_attribute",
        "forward_stores_an_input",
    ],
)
def test_near_misses_of_the_honest_patterns_stay_rejected(source, expected):
    assert violations(source, rules="external") == expected


def test_a_kernel_named_like_a_container_method_is_no_store_on_self():
    """self.ops.update(x, lo, hi), self.ops.clear(x): more arguments than the container methods
    take, so an extension's kernels; self.cache.update(d) stores."""
    source = (
        "class ModelNew:\n"
        "    def forward(self, x):\n"
        "        y = self.ops.update(x, 0.5, 1.0)\n"
        "        self.ops.clear(x)\n"
        "        self.cache.update({1: y})\n"
        "        return y\n"
    )
    assert violations(source) == [("global_state", 5)]


def test_a_class_name_in_a_repr_is_no_introspection():
    source = (
        "class ModelNew:\n"
        "    def __repr__(self):\n"
        "        return f'{self.__class__.__name__}()'\n"
        "    def other(self):\n"
        "        return self.__class__.__mro__\n"
    )
    assert violations(source) == [("introspection", 5)]


def test_parameters_set_and_read_by_built_names_on_self():
    source = (
        "import torch.nn as nn\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, n):\n"
        "        super().__init__()\n"
        "        for i in range(n):\n"
        "            setattr(self, f'weight_{i}', nn.Parameter(nn.init.zeros_(nn.Parameter())))\n"
        "            setattr(self, f'w{i}', None)\n"
        "    def forward(self, x):\n"
        "        setattr(self, f'w{0}', x)\n"
        "        return getattr(self, f'w{0}')\n"
    )
    # In forward the setattr is a store on the module (global_state); the reads are fine.
    assert violations(source) == [("global_state", 9)]


def test_starred_arguments_do_not_hide_a_container_update_on_self():
    source = (
        "class M:\n    def forward(self, x):\n        self.cache.update(*a, *b)\n        return x\n"
    )
    assert violations(source) == [("global_state", 3)]


@pytest.mark.parametrize(
    ("text", "pastes"),
    [
        ("#define CAT(a, b) a##b\n", True),
        ("#define CAT(a, b) \\\n  a \\\n  ## b\n", True),
        ("auto g = C10_CONCATENATE(Exclude, Guard);\n", True),
        ("-DCAT(a,b)=a##b", True),  # a compiler flag in a Python string
        ("#define LOG(fmt, ...) printf(fmt, ##__VA_ARGS__)\n", False),
        ("## Usage\nA docstring's markdown heading.\n### More\n", False),
        ('printf("##");\n', False),
        ('#define CHECK(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")\n', False),
    ],
)
def test_token_pasting_is_refused_in_native_sources(text, pastes):
    found = check_native_sources({"k.cu": text})
    assert [v.rule for v in found] == (["token_pasting"] if pastes else [])


def test_code_written_elsewhere_may_read_its_sources_and_keep_a_main_block():
    source = textwrap.dedent(
        """
        import os

        import torch.nn as nn

        with open(os.path.join(os.path.dirname(__file__), "k.cpp")) as f:
            SRC = f.read()


        class ModelNew(nn.Module):
            def __init__(self):
                super(self.__class__, self).__init__()


        if __name__ == "__main__":
            import sys
            import time

            import torch

            start = torch.cuda.Event(enable_timing=True)
            print(time.perf_counter(), file=sys.stderr)
        """
    )
    assert check_solution_source(source, rules="external") == []
    rules = {v.rule for v in check_solution_source(source, rules="env")}
    assert rules == {"forbidden_import", "dynamic_code"}  # os and open(): the agent's rules
    # A source that could rename itself keeps its block and the block's checks.
    renamed = source.replace("import os\n", "import os\n__name__ = '__main__'\n")
    assert {v.rule for v in check_solution_source(renamed, rules="external")} >= {
        "forbidden_import",
        "side_stream",
    }
    # Opened for writing: refused.
    writes = "f = open('k.cpp', 'w')\n"
    assert [v.rule for v in check_solution_source(writes, rules="external")] == ["dynamic_code"]


@pytest.mark.parametrize(
    "source",
    [
        "import typing\ndef f(a: \"__import__('threading')\"): pass\nh = typing.get_type_hints(f)",
        'from typing import ForwardRef\nr = ForwardRef("x")\n',
        "import functools\n@functools.singledispatch\ndef f(x): pass\n",
    ],
)
def test_evaluating_string_annotations_is_refused(source):
    assert "dynamic_code" in {v.rule for v in check_solution_source(source)}


@pytest.mark.parametrize(
    "rules, source, reached",
    [
        ("env", "import torch\nm = torch.sys.modules\n", "sys.modules"),
        ("env", "import typing\nm = typing.sys\n", "sys"),
        ("external", "from typing import sys\n", "sys"),
        ("env", "import torch\ng = torch.builtins.getattr\n", "builtins.getattr"),
        ("env", "from torch import os\n", "os"),
        ("external", "import torch\ntorch.os.system('x')\n", "os.system"),
        ("env", "import torch.utils.cpp_extension as ce\nce.os.path.join('a')\n", "os.path.join"),
        ("external", "import torch\nm = torch.importlib\n", "importlib"),
    ],
)
def test_modules_reached_through_an_allowed_modules_attributes_are_judged_as_imports(
    rules, source, reached
):
    """A module's imports are its attributes: `torch.sys` is sys under another name."""
    found = check_solution_source(source, rules=rules)
    assert any(v.rule == "forbidden_import" and f"is `{reached}`" in v.message for v in found)


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nx = [torch][0].sys\n",
        "import torch\nx = (torch if True else None).sys\n",
        "import torch\ndef f(m=torch):\n    return m.builtins\n",
        "import torch\nclass A:\n    t = torch\nx = A.t.gc\n",
        "import torch\nm = torch.__getattr__('_dynamo')\n",
        # red-team round 26: os and NumPy through a list, exec through a ForwardRef, a
        # class's own lookup serving NumPy's protocol name built by concatenation.
        "import torch\nx = [torch][0].os\n",
        "import torch.nn.functional as F\nnp = [F][0].np\n",
        "import typing\nrun = typing.List['exec'].__args__[0]._evaluate({}, {}, frozenset())\n",
        "import typing\ncode = typing.List['x'].__args__[0].__forward_code__\n",
        "class Raw:\n    def __getattr__(self, name):\n        return {}\n",
        "class Raw:\n    def __getattribute__(self, name):\n        return {}\n",
    ],
)
def test_the_interpreters_modules_are_refused_as_any_objects_attribute(source):
    """Where no path can be followed (a container, a default, a class attribute)."""
    assert "introspection" in [v.rule for v in check_solution_source(source)]


@pytest.mark.parametrize(
    "rules, source",
    [
        ("external", "import os\np = os.path.join('a', 'b')\n"),
        ("external", "import torch.utils.cpp_extension as ce\np = ce.os.path.join('a')\n"),
        ("external", "from torch import os\nv = os.environ.get('X')\n"),
        ("env", "import torch\ntorch.random.manual_seed(0)\nw = torch.signal.windows\n"),
        ("env", "import torch.nn.functional as F\nimport torch\ny = F.relu(torch.ones(1))\n"),
        ("external", "import numpy as np\nn = int(np.prod((2, 3)))\n"),
    ],
)
def test_submodules_and_allowed_modules_under_other_names_pass(rules, source):
    assert check_solution_source(source, rules=rules) == []


def test_memoryview_and_raw_bytes_for_python_are_refused():
    """A strided memoryview's tobytes() of a tensor's bytes is a transpose done by Python."""
    source = "def f(b):\n    return memoryview(b).cast('f')[::3].tobytes()\n"
    assert [(v.rule, v.line) for v in check_solution_source(source)] == [("host_compute", 2)]
    for cpp in ("py::bytes to_bytes(torch::Tensor x);", "PyBytes_FromStringAndSize(p, n);"):
        assert [v.rule for v in check_native_sources({"k.cpp": cpp})][0] == "dispatcher_bypass"


@pytest.mark.parametrize("rules", ["env", "external"])
def test_os_process_control_is_refused_as_any_objects_attribute(rules):
    """`[torch][0].os.system(...)` ran a command at import (red-team round 26)."""
    found = check_solution_source("import torch\no = [torch][0]\nf = o.system\n", rules=rules)
    assert "process_control" in [v.rule for v in found]


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("py::handle b(PyEval_GetBuiltins());", [("python_from_native", "PyEval_GetBuiltins")]),
        ("auto g = py::globals();", [("python_from_native", "globals(")]),
        (
            "PyObject* g = PyEval_GetGlobals();",
            [("dispatcher_bypass", "PyEval_GetGlobals"), ("python_from_native", "PyObject")],
        ),
        ('auto m = py::module_::import ("numpy");', [("dispatcher_bypass", "::import (")]),
        # a token spelled in a C string's escapes, hex or octal
        (
            'const char* s = "\\x50yRun_SimpleString";',
            [("dispatcher_bypass", "PyRun_"), ("python_from_native", "PyRun_SimpleString")],
        ),
        ('const char* s = "\\137\\137import__";', [("dispatcher_bypass", "__import__")]),
        ('printf("%d\\n", 3);', []),
    ],
)
def test_native_sources_may_not_reach_the_builtins_or_hide_tokens_in_escapes(line, found):
    """C++ ran exec found in PyEval_GetBuiltins() on source escaped byte by byte (round 26)."""
    from cuda_gym.judge.static_checks import check_native_sources

    seen = check_native_sources({"kernels/k.cpp": line})
    assert [(v.rule, v.message.split("`")[1]) for v in seen] == found


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ('h.attr("fx").attr(name.c_str())(src);', "python_from_native"),  # (round 29)
        ("auto f = py::getattr(obj, name);", "python_from_native"),
        ("PyObject* v = PyObject_GetAttrString(o, n);", "python_from_native"),
        ("auto t = Py_TYPE(o)->tp_getattro;", "python_from_native"),
        ("auto* i = pybind11::detail::get_internals();", "python_from_native"),
        # round 30: pybind11 beyond binding, however it is spelled
        ('auto v = py::detail::str_attr_accessor(o, "x");', "python_from_native"),
        ("void f(py::object fn) { fn(); }", "python_from_native"),
        ('auto v = o.\n    attr("x");', "python_from_native"),
        ("#define A(o, n) o.attr\nint z;", "python_from_native"),
        ("namespace q = pybind11;\nq::handle h;", "python_from_native"),
        ("#include <pybind11/functional.h>", "python_from_native"),
        ("auto t = h.cast<torch::Tensor>();", "python_from_native"),
        ("auto* p = impl->pyobj_slot();", "python_from_native"),
        ('PYBIND11_MODULE(n, m) {\n  auto u = m.def_submodule("utils");\n}', "python_from_native"),
        (
            'PYBIND11_MODULE(n, m) {\n  m.def("f", [](decltype(m) q) { return 1; });\n}',
            "python_from_native",
        ),
        (
            'void reg(pybind11::module_& m) {\n  m.def("g", &g);\n}\n'
            'PYBIND11_MODULE(n, m) {\n  m.doc() = "ops";\n  reg(m);\n'
            '  m.def("f", &f, py::arg("x"), py::call_guard<py::gil_scoped_release>());\n}\n'
            "int k(int m) { return m * 2; }",
            None,
        ),
        (
            'void reg(py::module_& m, const char* prefix) {\n  m.def("g", &g);\n}\n'
            'PYBIND11_MODULE(n, m) {\n  reg(m, "ops");\n}',
            None,
        ),
        (
            "void reg(py::module_& m, int k) {\n  auto s = m;\n}\n"
            "PYBIND11_MODULE(n, m) { reg(m, 1); }",
            "python_from_native",
        ),
        ('PYBIND11_MODULE(n, m) {\n  other(m, "ops");\n}', "python_from_native"),
        ("bool fast = (flags & kAligned) != 0 && (t.dtype() == at::kFloat) & ok;", None),
        ("int copyobj = 0; auto* p = x->pyobj_slot();", "python_from_native"),
        ("int copyobj = 0; int mypyobject_count = 1;", None),
        ("#include <pybind11/stl.h>", None),
        # (red-team round 32: a RecordFunction callback re-strided the output inside the
        # runner's copy into its slot; a negative bit made it copy through PyTorch)
        (
            "auto h = at::addGlobalCallback(at::RecordFunctionCallback(start, end));",
            "dispatcher_bypass",
        ),
        ("out.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);", "dispatcher_bypass"),
        ("out.unsafeGetTensorImpl()->_set_neg(true);", "dispatcher_bypass"),
        ("ssize_t n = writev(fds[1], iov, count);", "kernel_copies"),  # (round 29's transpose)
        ("splice(a, nullptr, b, nullptr, n, 0);", "kernel_copies"),
        ("long r = syscall(SYS_readv, fd, iov, n);", "kernel_copies"),
        # (round 33: scatter-gather over a socketpair; the instruction in inline assembly)
        ("struct msghdr m{}; m.msg_iov = iov; sendmsg(fds[0], &m, 0);", "kernel_copies"),
        (
            'asm volatile("syscall" : "=a"(r) : "a"(20L), "D"(fd), "S"(iov), "d"(n));',
            "kernel_copies",
        ),
        ('__asm__("int $0x80");', "kernel_copies"),
        ('PyErr_SetString(PyExc_ValueError, "bad shape"); Py_RETURN_NONE;', None),
        ('int tp_size = 2; float readv_buffer = 0; m.def("f", &f);', None),
        ("void load_globals(float* g);", None),
    ],
)
def test_native_sources_may_not_reach_pythons_objects_or_the_kernels_copies(line, rule):
    """No public KernelBench solution uses either (2615 files, benchmarks/static_sweep.py)."""
    from cuda_gym.judge.static_checks import check_native_sources

    assert [v.rule for v in check_native_sources({"k.cpp": line})] == ([rule] if rule else [])
