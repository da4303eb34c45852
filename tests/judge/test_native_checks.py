"""Native-code checks: preprocessing before the scan, includes, and the symbol patterns."""

import shutil
import subprocess

import pytest

from cuda_gym.judge import native_checks
from cuda_gym.judge.native_checks import include_violations, preprocess
from cuda_gym.judge.static_checks import check_native_sources
from cuda_gym.judge.verdict import ViolationKind, violation_kind


def test_backslash_newlines_are_joined_and_line_numbers_kept():
    text = "int a;\nc10::impl::ExcludeDispatch\\\nKeyGuard g;\nint b;\n"
    out = preprocess(text)
    assert "ExcludeDispatchKeyGuard" in out
    assert out.splitlines()[3] == "int b;"


def test_comments_are_dropped_but_strings_kept():
    out = preprocess('int a; /* at::cpu::add\n */ // DispatchKey\nconst char* s = "//x";\n')
    assert "at::cpu" not in out and "DispatchKey" not in out
    assert '"//x"' in out
    assert out.count("\n") == 3


def test_a_split_token_is_found_by_the_source_scan():
    found = check_native_sources({"k.cpp": "at::c\\\npu::add(a, b);\n"})
    assert [v.rule for v in found] == ["dispatcher_bypass"]


@pytest.mark.parametrize(
    "line",
    [
        '#include "/etc/passwd"',
        "#include </abs/x.h>",
        '#include "../../secret.h"',
        '# include "a/../../b"',
        "#include XSTR(c10/x.h)",
        # GCC's deprecated #import and the digraph of # (a red team's, passed before)
        '#import "/tmp/secret.txt"',
        '%:include "/tmp/secret.txt"',
        '%: import "../../cache/integrity.key"',
        "#import XSTR(x)",
    ],
)
def test_includes_outside_the_workspace_are_refused(line):
    assert include_violations(preprocess(line + "\n"))


@pytest.mark.parametrize(
    "line", ["#include <torch/extension.h>", '#include "helpers.cuh"', '#include "sub/dir.h"']
)
def test_workspace_and_toolchain_includes_are_allowed(line):
    assert include_violations(preprocess(line + "\n")) == []


def test_include_next_is_an_include_not_a_computed_one():
    assert include_violations("#include_next <cmath>\n") == []
    assert include_violations("#  include_next MACRO\n")
    assert include_violations("#include_next </etc/passwd>\n")


@pytest.mark.parametrize(
    ("where", "line", "allowed"),
    [
        ("kernels/ops/k.cu", '#include "../common.cuh"', True),
        ("kernels/a/b/k.cu", '#include "../../common.cuh"', True),
        ("kernels/a/k.cu", '#include "../ops/util.cuh"', True),
        # Out of the top folder, to a file the folder lacks, by another kind of include, or
        # back down after a folder name (the compiler walks the disk, not the text).
        ("kernels/k.cu", '#include "../common.cuh"', False),
        ("kernels/ops/k.cu", '#include "../../kernels/common.cuh"', False),
        ("kernels/ops/k.cu", '#include "../missing.cuh"', False),
        ("kernels/ops/k.cu", "#include <../common.cuh>", False),
        ("kernels/ops/k.cu", '#include_next "../common.cuh"', False),
        ("kernels/ops/k.cu", '#include "x/../../common.cuh"', False),
        ("model_new.py string 0", '#include "../common.cuh"', False),
    ],
)
def test_a_nested_kernel_file_may_include_its_folders_own_headers(where, line, allowed):
    files = {"kernels/common.cuh", "kernels/ops/util.cuh", "kernels/ops/k.cu", where}
    assert (include_violations(line + "\n", where, files) == []) == allowed
    sources = {name: line + "\n" if name == where else "" for name in files}
    assert (check_native_sources(sources) == []) == allowed


@pytest.mark.parametrize(
    "symbol",
    [
        "at::cpu::sigmoid(at::Tensor const&)",
        "at::native::add(at::Tensor const&, at::Tensor const&, c10::Scalar const&)",
        "at::_ops::add_Tensor::redispatch(c10::DispatchKeySet, at::Tensor const&)",
        "c10::impl::TorchDispatchModeTLS::pop_stack()",
        "at::cuda::mm(at::Tensor const&, at::Tensor const&)",
        "cblas_sgemm",
        "sgemm_",
        "dgesv_@LAPACK",
        "SGEMM",
        "sgemm_64_",
        "scipy_cblas_sgemm64_",
        "scipy_openblas_set_num_threads64_",
        "DGEMM_BATCH_64",
        "c10::impl::raw_local_dispatch_key_set",
        "TLS init function for c10::impl::raw_local_dispatch_key_set",
        "c10::Dispatcher::realSingleton()",
        "c10::Dispatcher::findSchemaOrThrow(char const*, char const*)",
        "c10::OperatorHandle::~OperatorHandle()",
        "at::enableRecordFunction(bool)",
        # RecordFunction's per-thread switch, written through its getter (the thread ban's
        # callback would not run on that thread).
        "at::get_record_function_tls_()",
        # A callback of the solution's inside the runner's ops, and a tensor's metadata
        # rewritten with no op (red-team round 32).
        "at::addGlobalCallback(at::RecordFunctionCallback)",
        "at::addThreadLocalCallback(at::RecordFunctionCallback)",
        "c10::TensorImpl::set_sizes_and_strides(c10::ArrayRef<long>, c10::ArrayRef<long>,"
        " std::optional<long>)",
        "c10::TensorImpl::_set_neg(bool)",
        # libpython's bulk buffer copies (a Fortran-order fill is a transpose: round 16).
        "PyBuffer_FromContiguous",
        "PyMemoryView_FromBuffer",
        "dl_iterate_phdr@GLIBC_2.2.5",
        "dladdr@GLIBC_2.34",
        "PyImport_ImportModule",
        "PyRun_StringFlags",
        "Py_CompileStringExFlags",
        "PyEval_EvalCode",
        # Whether a profiler observes ATen's calls (a profiled call told from the others).
        "at::hasCallbacks()",
        "at::getStepCallbacksUnlessEmpty(at::RecordScope)",
        "at::isRecordFunctionEnabled()",
        "torch::profiler::impl::profilerEnabled()",
        "torch::autograd::profiler::profilerEnabled()",
        "cuptiSubscribe",
        "cuptiActivityEnable@libcupti.so.13",
        # The CPU libraries inside libtorch_cpu, by their C++ names (red-team round 14).
        "void fbgemm::transpose_simd<float>(long, long, float const*, long, float*, long)",
        "fbgemm::cblas_sgemm_ref(fbgemm::matrix_op_t, fbgemm::matrix_op_t, int, int, int, "
        "float, float const*, int, float const*, int, float, float*, int)",
        "dnnl::impl::cpu::simple_reorder_impl<>::execute()",
        "ideep::tensor::reorder_if_differ_in(ideep::tensor::desc const&) const",
    ],
)
def test_compute_below_the_dispatcher_is_a_bad_symbol(symbol):
    assert native_checks.bad_symbol(symbol)


def test_c_functions_libtorch_exports_are_bad_symbols_but_a_few_families():
    exports = native_checks.torch_c_exports()
    assert "mkl_blas_sgemm" in exports or any(n.startswith("mkl_") for n in exports)
    compute = [n for n in exports if n.startswith(("aoti_torch_cpu_", "nnp_", "MKL_"))]
    assert compute and all(native_checks.bad_symbol(n) for n in compute)
    fine = [n for n in exports if n.startswith(("Sleef_", "aoti_torch_get_"))]
    assert fine and not any(native_checks.bad_symbol(n) for n in fine)


@pytest.mark.parametrize(
    "symbol",
    [
        "at::_ops::empty_like::call(at::Tensor const&)",
        "at::cuda::getCurrentCUDAStream(signed char)",
        "c10::impl::ExcludeDispatchKeyGuard::ExcludeDispatchKeyGuard(c10::DispatchKeySet)",
        "c10::detail::torchCheckFail(char const*, char const*, unsigned int, char const*)",
        "expf@GLIBC_2.27",
        "omp_get_num_threads@OMP_1.0",
        "vsnprintf@GLIBC_2.2.5",
        "GOMP_parallel@GOMP_4.0",
        "THPVariableClass",
        "Sleef_expf8_u10",
        "cpuinfo_isa",
        "at::TensorBase::__dispatch_contiguous(c10::MemoryFormat) const",
        "__tls_get_addr@GLIBC_2.3",
        "cudaLaunchKernel@libcudart.so.13",
        "PyEval_GetBuiltins",  # pybind11's, in every extension
        "PyEval_SaveThread",
    ],
)
def test_what_every_extension_links_is_not_a_bad_symbol(symbol):
    assert not native_checks.bad_symbol(symbol)


@pytest.mark.skipif(not shutil.which("cc") or not shutil.which("nm"), reason="needs cc and nm")
def test_symbol_violations_reads_a_real_shared_object(tmp_path):
    src = tmp_path / "k.c"
    src.write_text("void sgemm_(void);\nvoid f(void) { sgemm_(); }\n")
    lib = tmp_path / "libk.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    found = native_checks.symbol_violations(lib)
    assert len(found) == 1 and "sgemm_" in found[0]
    assert violation_kind(found[0]) is ViolationKind.NATIVE_SYMBOLS


def test_on_the_cpu_an_extension_may_refer_only_to_the_allowed_operators():
    from cuda_gym.judge.fallback import ALLOWED_OPS

    allowed = frozenset(ALLOWED_OPS)
    addmm = "at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor const&)"
    assert native_checks.bad_symbol(addmm, allowed)  # e.g. from a thread of its own
    assert native_checks.bad_symbol("at::_ops::mul_Tensor::call(at::Tensor const&)", allowed)
    assert not native_checks.bad_symbol(addmm)  # (on a GPU the profile's origins see it)
    # (`x.to(kFloat)` and `t.item<float>()` decompose into allowed ones before the ban sees them)
    for fine in (
        "empty_like",
        "empty_memory_format",
        "zeros",
        "view",
        "t",
        "clone",
        "to_dtype",
        "item",
    ):
        assert not native_checks.bad_symbol(f"at::_ops::{fine}::call(x)", allowed), fine
    # A data-movement task: copies are its computation (an extension's thread would call them
    # unseen by the ban); contiguous stays allowed (inline in every x.contiguous()).
    from cuda_gym.judge.fallback import COPY_OPS

    moving = allowed - COPY_OPS
    for copy in ("clone", "copy_", "_to_copy"):
        assert native_checks.bad_symbol(f"at::_ops::{copy}::call(x)", moving), copy
        assert not native_checks.bad_symbol(f"at::_ops::{copy}::call(x)", allowed), copy
    assert not native_checks.bad_symbol("at::_ops::contiguous::call(x)", moving)
    # The interpreters that run operators of their own; not AutogradMeta's vtable.
    assert native_checks.bad_symbol("torch::jit::compile(std::string const&)")
    assert not native_checks.bad_symbol("vtable for torch::autograd::AutogradMeta", allowed)


@pytest.mark.parametrize(
    "symbol",
    [
        "cublasSgemm_v2@libcublas.so.13",
        "cublasGemmEx",
        "cublasLtMatmul@libcublasLt.so.13",
        "cudnnConvolutionForward",
        "cufftExecC2C",
        "cusparseSpMM",
        "cusolverDnSgetrf",
    ],
)
def test_nvidia_compute_libraries_are_refused_unless_the_task_allows_them(symbol):
    assert native_checks.bad_symbol(symbol, vendor_allowed=False)
    assert not native_checks.bad_symbol(symbol, vendor_allowed=True)


@pytest.mark.parametrize(
    "symbol", ["cudaLaunchKernel@libcudart.so.13", "cuLaunchKernel", "curandCreateGenerator"]
)
def test_the_cuda_runtime_is_not_a_vendor_library(symbol):
    assert not native_checks.bad_symbol(symbol, vendor_allowed=False)


@pytest.mark.skipif(not shutil.which("cc") or not shutil.which("nm"), reason="needs cc and nm")
def test_a_cublas_call_in_a_real_shared_object_is_refused(tmp_path):
    src = tmp_path / "k.c"
    src.write_text("int cublasSgemm_v2(void);\nint f(void) { return cublasSgemm_v2(); }\n")
    lib = tmp_path / "libk.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    assert native_checks.symbol_violations(lib) == []
    (found,) = native_checks.symbol_violations(lib, vendor_allowed=False)
    assert "cublasSgemm_v2" in found and violation_kind(found) is ViolationKind.NATIVE_SYMBOLS


def test_libtorch_pythons_numpy_conversions_are_refused_by_symbol():
    """Called from C++ they pass the runner's Python stand-ins for Tensor.numpy (round 23)."""
    from cuda_gym.judge.native_checks import bad_symbol

    assert bad_symbol("torch::utils::tensor_to_numpy(at::Tensor const&, bool)")
    assert bad_symbol("torch::utils::tensor_from_numpy(_object*, bool)")
    assert not bad_symbol("torch::utils::device_lazy_init(c10::DeviceType)")
