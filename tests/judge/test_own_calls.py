"""What the runner counts as a call of the solution's own kernels (the no_own_kernel rule)."""

import importlib.util
import json
import os
import sys

import torch

from cuda_gym.judge.runner import _OwnCalls

# The shape of Triton's launch path: `JITFunction.run` in triton/runtime/jit.py, holding the
# Python function the kernel was written as in `fn`.
FAKE_JIT = """
class JITFunction:
    def __init__(self, fn):
        self.fn = fn

    def run(self, *args):
        return None
"""


def _fake_triton(tmp_path):
    path = tmp_path / "site" / "triton" / "runtime" / "jit.py"
    path.parent.mkdir(parents=True)
    path.write_text(FAKE_JIT)
    spec = importlib.util.spec_from_file_location("fake_triton_jit", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.JITFunction


def _counted(call, installed=None) -> int:
    counter = _OwnCalls(torch)
    if installed is not None:  # where the fake Triton is "installed"
        counter.not_own += (os.path.join(os.path.realpath(installed), ""),)
    with counter.active():
        call()
    return counter.count


def test_a_triton_kernel_of_the_solution_counts_as_its_own(tmp_path):
    jit = _fake_triton(tmp_path)
    solution = tmp_path / "solution" / "model_new.py"
    solution.parent.mkdir()
    solution.write_text("def softmax_kernel(x_ptr, n):\n    pass\n")
    spec = importlib.util.spec_from_file_location("fake_model_new", solution)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = jit(module.softmax_kernel)
    site = tmp_path / "site"
    assert _counted(lambda: kernel.run(1, 2), installed=site) == 1
    assert _counted(lambda: [kernel.run(1, 2) for _ in range(3)], installed=site) == 3
    # A file merely named triton/runtime/jit.py (the solution's own, say) is not Triton.
    assert _counted(lambda: kernel.run(1, 2)) == 0


def test_a_triton_kernel_of_an_installed_package_is_not_the_solutions(tmp_path):
    jit = _fake_triton(tmp_path)
    installed = jit(json.dumps)  # a function whose file is under the interpreter's prefix
    assert json.__file__.startswith(sys.base_prefix)
    assert _counted(lambda: installed.run(1), installed=tmp_path / "site") == 0


def test_python_and_torch_calls_are_not_the_solutions():
    x = torch.ones(4)
    assert _counted(lambda: (torch.empty_like(x), len([1, 2]), json.dumps({}))) == 0
