"""Where forward's CPU time went: places of code, PyTorch's compute kernels, the rule."""

import contextlib
import hashlib
import mmap
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_gym.judge.cpu_time import (
    _PYTHON_DATA_MOVEMENT,
    BETWEEN_SAMPLES,
    CPU_BAD_SAMPLES,
    MAX_SHARE,
    MIN_SAMPLES,
    OPENMP_WAIT_S_PER_CALL,
    PERIOD_NS,
    Attribution,
    Attributor,
    CpuWatch,
    Symbolizer,
    assess,
    file_hashes,
    is_torch_compute,
    plt_ranges,
    torch_library_dir,
    virtual_address,
)
from cuda_gym.judge.inline_build import is_extension_module
from cuda_gym.runtime.perf_sampling import (
    KERNEL_IP,
    Mapping,
    PerfUnavailable,
    Samples,
    executable_maps,
    tree_cpu_s,
)


@pytest.mark.parametrize(
    "name",
    [
        "mkl_blas_avx512_sgemm_kernel_0",
        "sgemm_",
        "SGEMM",
        "cblas_sgemm",
        # MKL's kernels without its prefix (its sparse, DFT and batched GEMM code; a red team's
        # block-sparse matrix-vector product did a linear layer's GEMM in the first)
        "xbsr_gnxn_row_mv_def_ker",
        "xcsr_gnxn_mv_def_ker",
        "owngDFTFwdBatch_32f",
        "gemm_batch_internal.omp_fn.0",
        "LN_loop_j",
        "zero_regs",  # a C symbol named like an allowed operator is no operator
        "at::native::AVX2::add_kernel(at::TensorIteratorBase&, c10::Scalar const&)",
        "at::native::(anonymous namespace)::index_copy_kernel(at::TensorIterator&, long)",
        "at::native::AVX2::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)",
        "at::cpu::mm(at::Tensor const&, at::Tensor const&)",
        "dnnl::impl::cpu::x64::jit_brgemm_kernel_t::generate()",
        "void at::native::(anonymous namespace)::basic_loop_non_separable<float, long, 2, 1>"
        "(char**, long const*, long)",
        # an allowed operator's name inside another identifier is not that operator
        "at::native::(anonymous namespace)::index_select_out_cpu_(at::Tensor const&, long)",
        "at::native::AVX2::tanh_kernel(at::TensorIteratorBase&)",
        # a parallel-for's OpenMP body is judged by the kernel it runs
        "void at::internal::invoke_parallel<at::parallel_for<at::native::(anonymous namespace)::"
        "host_softmax<float>(at::Tensor, at::Tensor const&, long)::{lambda(long, long)#1}>"
        "(long, long, long, at::native::(anonymous namespace)::host_softmax<float>)::"
        "{lambda(long, long)#1}>(long, long, long, ...) [clone ._omp_fn.0]",
        # a vendor library's function named like an allowed op is the library's compute
        "void fbgemm::transpose_simd<float>(long, long, float const*, long, float*, long)",
        "dnnl::impl::cpu::copy_res_layer_fwd_template<float, float, char>()",
        # an allowed op's name followed by another op's is that other op (red-team round 35)
        "at::native::(anonymous namespace)::unfold_backward_cpu_kernel(at::Tensor&, "
        "at::Tensor const&, long, long, long)",
        "void c10::function_ref<void (char**, long const*, long, long)>::callback_fn<"
        "at::TensorIteratorBase::loop_2d_from_1d<void at::native::(anonymous namespace)::"
        "_unfold_backward_internal_kernel<float>(at::TensorIterator&, long, long, long, long, "
        "long, long)::{lambda(char**, long const*, long)#1}> >(long, char**, long const*, long, "
        "long)",
        "at::native::slice_backward(at::Tensor const&, c10::ArrayRef<long>, long, long, long, "
        "long)",
        "at::Tensor at::native::(anonymous namespace)::_flatten_indices_impl<false>("
        "at::Tensor const&, c10::ArrayRef<long>)",
        "_ZN2at6native12_GLOBAL__N_126unfold_backward_cpu_kernelERNS_6TensorERKS2_lll",
        # collective and JIT code no eager forward runs (red-team round 37: gloo's loops)
        "void gloo::sum<float>(void*, void const*, void const*, unsigned long)",
        "void gloo::product<float>(void*, void const*, void const*, unsigned long)",
        "_ZN4gloo3sumIfEEvPvPKvS3_m",
        "c10d::ProcessGroupGloo::allreduce(std::vector<at::Tensor>&)",
        "torch::jit::tensorexpr::SimpleIREvaluator::call(std::vector<torch::jit::tensorexpr::"
        "CodeGen::CallArg> const&)",
    ],
)
def test_torch_compute_kernels(name):
    assert is_torch_compute(name)


@pytest.mark.parametrize(
    "name",
    [
        "at::native::AVX2::copy_kernel(at::TensorIterator&, bool)",
        "at::native::(anonymous namespace)::fill_kernel(at::TensorIterator&, c10::Scalar const&)",
        "void c10::function_ref<void (char**, long const*, long, long)>::callback_fn<at::native::"
        "AVX2::direct_copy_kernel(at::TensorIteratorBase&)::{lambda()#3}>(long, char**)",
        "at::native::empty_cpu(c10::ArrayRef<long>, std::optional<c10::ScalarType>)",
        "at::native::resize_(at::Tensor const&, c10::ArrayRef<long>)",
        "at::native::DispatchStub<void (*)(at::TensorIterator&, bool), at::native::"
        "copy_stub_DECLARE_DISPATCH_type>::get_call_ptr(c10::DeviceType)",
        "c10::impl::OperatorEntry::lookup(c10::DispatchKeySet) const",
        "at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)",
        "at::TensorIteratorBase::build(at::TensorIteratorConfig&)",
        "Sleef_expf8_u10",
        "at::internal::invoke_parallel(long, long, long, std::function<void (long, long)> const&)",
        "void at::internal::invoke_parallel<at::parallel_for<at::native::AVX2::copy_kernel("
        "at::TensorIterator&, bool)::{lambda(long, long)#1}>(long, long, long)> [clone ._omp_fn.0]",
        "at::native::slice(at::Tensor const&, long, std::optional<long>, long)",
        "at::native::view_dtype(at::Tensor const&, c10::ScalarType)",
        "at::native::transpose_(at::Tensor&, long, long)",
        "at::native::arange_out(c10::Scalar const&, c10::Scalar const&, at::Tensor&)",
        "torch::jit::tracer::getTracingState()",  # the dispatcher asks it on every call
        "at::native::t(at::Tensor const&)",
        "at::native::to(at::Tensor const&, std::optional<c10::ScalarType>, bool, bool)",
        "at::native::item(at::Tensor const&)",
        "at::native::inferSqueezeGeometry(at::Tensor const&)",
        "mkl_serv_get_max_threads",
        "at::internal::OpaqueOptionalTensorRef::getTensor() const",
        "void at::native::checkInBoundsForStorage<long>(c10::ArrayRef<long>, c10::ArrayRef<long>)",
    ],
)
def test_allowed_and_bookkeeping_code_of_pytorch(name):
    assert not is_torch_compute(name)


def test_mangled_names_are_demangled_before_the_rules():
    # at::native::AVX2::copy_kernel(at::TensorIterator&, bool) / at::cpu::mm(...)
    assert not is_torch_compute("_ZN2at6native4AVX211copy_kernelERNS_14TensorIteratorEb")
    assert is_torch_compute("_ZN2at3cpu2mmERKNS_6TensorES3_")


# softmax's OpenMP body in libtorch_cpu: c++filt cannot demangle it (a red-team find)
SOFTMAX_BODY = (
    "_ZN2at8internal15invoke_parallelIZNS_12parallel_forIZNS_6native12_GLOBAL__N_120_vec_"
    "softmax_lastdimIN3c104HalfEEENSt9enable_ifIXnt9is_same_vIT_NS_10OpMathTypeIS9_E4typeEEEvE4"
    "typeEPKS9_PS9_llEUlllE_EEvlllRSF_EUlllE_EEvlllSJ_._omp_fn.0"
)


def test_names_c_plus_plus_filt_cannot_demangle_are_read_mangled():
    assert is_torch_compute(SOFTMAX_BODY)
    copy_body = SOFTMAX_BODY.replace("20_vec_softmax_lastdim", "11copy_kernel")
    assert not is_torch_compute(copy_body)


def _mapped_file(tmp_path: Path, name: str, data: bytes):
    """`data` in a file mapped executable into this process: (its Mapping, the mmap)."""
    path = tmp_path / name
    path.write_bytes(data)
    with open(path, "rb") as f:
        area = mmap.mmap(f.fileno(), len(data), prot=mmap.PROT_READ | mmap.PROT_EXEC)
    (m,) = [m for m in executable_maps(os.getpid()) if m.path == str(path)]
    return m, area


def test_own_objects_are_known_by_their_content_not_their_place(tmp_path):
    built = b"\x7fELF" + b"own extension" * 400
    other = b"\x7fELF" + b"a copy of somebody's BLAS" * 400
    own, a = _mapped_file(tmp_path, "ext.so", built)
    copied, b = _mapped_file(tmp_path, "libm.so.6", other)  # a runtime library's name
    try:
        who = Attributor(
            own_hashes=frozenset({hashlib.sha256(built).hexdigest()}),
            writable=(str(tmp_path),),
        )
        assert who.place_of_mapping(os.getpid(), own) == "own"
        assert who.place_of_mapping(os.getpid(), copied) == "foreign"
        # without the judge's hashes, nothing in a writable directory is the solution's
        assert Attributor(writable=(str(tmp_path),)).place_of_mapping(os.getpid(), own) == (
            "foreign"
        )
    finally:
        a.close()
        b.close()


def test_places_of_system_python_and_anonymous_code():
    who = Attributor(writable=("/nonexistent-scratch",))
    pid = os.getpid()
    places = {m.path: who.place_of_mapping(pid, m) for m in executable_maps(pid)}
    libc = [p for p in places if Path(p).name.startswith("libc.so")]
    assert libc and all(places[p] == "runtime" for p in libc)
    assert who.place_of_mapping(pid, Mapping(0x1000, 0x2000, 0, "")) == "foreign"
    assert who.place_of_mapping(pid, Mapping(0x1000, 0x2000, 0, "[vdso]")) == "runtime"
    site = "/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.so"
    assert who.place_of_mapping(pid, Mapping(0x3000, 0x4000, 0, site)) == "foreign"
    # ctypes' calls (a kernel-only workspace's binder calls its entry point through libffi)
    ffi = "/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2"
    assert who.place_of_mapping(pid, Mapping(0x5000, 0x6000, 0, ffi)) == "runtime"


def test_only_samples_inside_the_windows_count_and_unmapped_code_is_foreign():
    pid = 4242
    maps = {pid: {Mapping(1000, 2000, 0, "[vdso]")}}
    rows = [
        (1500, pid, pid, 10),  # vdso, before the window
        (1500, pid, pid, 100),  # vdso, inside
        (5000, pid, pid, 150),  # no mapping: inside
        (1500, pid, pid, 300),  # after
    ]
    got = Attributor().attribute(Samples(rows, 3, maps), [(100, 200)])
    assert got.counts["runtime"] == 1 and got.counts["foreign"] == 1 and got.total == 2
    assert got.lost == 3
    assert got.where[("foreign", "code in no mapped file")] == 1


def test_the_rule_needs_both_an_amount_and_a_share():
    a = Attribution()
    a.counts.update(own=400, runtime=20, foreign=MIN_SAMPLES - 1)
    assert assess(a) == []  # too little time, whatever the share
    a = Attribution()
    a.counts.update(own=1000, runtime=200, foreign=MIN_SAMPLES)
    assert assess(a) == []  # too small a share
    assert MIN_SAMPLES / 1200 < MAX_SHARE < (MIN_SAMPLES + 60) / 1260
    a.counts.update(torch_compute=60)
    a.where[("torch_compute", "mkl_blas_avx512_sgemm_kernel_0")] = 60
    (found,) = assess(a)
    assert found.startswith("foreign_kernels: ") and "mkl_blas_avx512_sgemm_kernel_0" in found


def test_on_the_cpu_a_little_foreign_compute_beside_little_own_code_is_enough():
    # A small task's whole GEMM from MKL (red-team case: 2 samples in 94 calls, 6 own)
    small = Attribution(windows=94)
    small.counts.update(own=6, runtime=15, interpreter=24, torch_compute=2, idle=239)
    small.where[("torch_compute", "mkl_blas_avx512_sgemm_kernel_0")] = 2
    (found,) = assess(small)
    assert found.startswith("foreign_kernels: ") and "mkl_blas" in found
    small.counts.update(torch_compute=-1)
    assert assess(small) == []  # one odd sample is not enough
    small.counts.update(torch_compute=1, own=14)  # 2 beside 20 own: a tenth
    assert assess(small)
    small.counts.update(own=1)
    assert assess(small) == []
    assert not any(v.startswith("foreign") for v in assess(small, device="cuda"))


def test_on_the_cpu_an_amount_of_foreign_compute_is_enough_whatever_the_padding():
    # MKL's GEMM called for the whole product, then own code spinning 50 times as long
    # (red-team case: 76 of 6,627 samples, 1.1 %, in no call a quarter of the call's)
    padded = Attribution(windows=32)
    padded.counts.update(own=6521, runtime=16, interpreter=14, torch_compute=CPU_BAD_SAMPLES)
    (found,) = assess(padded)
    assert found.startswith("foreign_kernels: ")
    on_gpu = assess(padded, device="cuda")  # (a GPU's host: the share still; own host work)
    assert not any(v.startswith("foreign_kernels") for v in on_gpu)
    padded.counts.update(torch_compute=-1)
    assert assess(padded) == []


def _libtorch_cpu_symbols() -> tuple[Path, dict[str, int]]:
    """libtorch_cpu.so's path and its dynamic symbols' addresses (skips without it)."""
    lib = torch_library_dir()
    path = lib and Path(lib, "libtorch_cpu.so")
    if not path or not path.is_file():
        pytest.skip("torch's libtorch_cpu.so is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True)
    return path, {line.split()[-1]: int(line.split()[0], 16) for line in out.stdout.splitlines()}


def test_libtorch_functions_are_named_by_address():
    path, symbols = _libtorch_cpu_symbols()
    gemm = symbols["sgemm_"]
    names = Symbolizer().names(str(path), {gemm + 4, 1})
    assert names[gemm + 4].lower().startswith(("sgemm", "mkl_blas"))
    assert is_torch_compute(names[gemm + 4])
    assert names[1] is None  # not in any function
    # a file offset inside the first loadable segment maps to itself in a shared library
    assert virtual_address(str(path), 4096) == 4096


def test_one_addr2line_answers_every_batch_and_a_dead_one_is_replaced():
    path, symbols = _libtorch_cpu_symbols()
    symbolizer = Symbolizer()
    symbolizer.BATCH = 3  # several batches in one lookup
    wanted = {symbols["sgemm_"]: "sgemm", symbols["dgemm_"]: "dgemm"}
    try:
        names = symbolizer.names(str(path), {*wanted, 1, 2, 3})
        server = symbolizer._servers[str(path)]
        assert all(wanted[a] in names[a].lower() for a in wanted)
        assert names[1] is names[2] is names[3] is None
        server.proc.kill()  # the next lookup starts another
        server.proc.wait()
        more = symbolizer.names(str(path), {symbols["sgemm_"] + 4, 4})
        assert more[symbols["sgemm_"] + 4].lower().startswith(("sgemm", "mkl_blas"))
        assert symbolizer._servers[str(path)] is not server
    finally:
        symbolizer.close()
    assert symbolizer._servers == {}


def test_openmp_waits_are_apart_from_the_shares():
    who = Attributor(writable=("/nonexistent-scratch",))
    pid = os.getpid()
    gomp = "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0"
    assert who.place_of_mapping(pid, Mapping(0x1000, 0x2000, 0, gomp)) == "idle"
    a = Attribution()
    a.counts.update(idle=5000, own=90, torch_compute=MIN_SAMPLES)
    assert a.total == 90 + MIN_SAMPLES and assess(a)  # the waits left out


def test_code_in_libtorch_plt_stubs_is_runtime():
    lib = torch_library_dir()
    path = lib and Path(lib, "libtorch_cpu.so")
    if not path or not path.is_file():
        pytest.skip("torch's libtorch_cpu.so is not installed")
    (plt,) = plt_ranges(str(path))[:1]
    assert plt[0] < plt[1]
    offset = plt[0] + 16  # the PLT is in the first loadable segment: offset = address
    m = Mapping(0x10000000, 0x10000000 + 2 * plt[1], 0, str(path))
    rows = [(m.start + offset, 7, 7, 50)]
    got = Attributor().attribute(Samples(rows, 0, {7: {m}}), [(0, 100)])
    assert got.counts["runtime"] == 1, got.where


def test_own_work_banked_in_some_calls_does_not_hide_compute_in_the_others():
    pid = 4242
    own_lib = Mapping(1000, 2000, 0, "/tmp/solution/ext.so")
    vdso = Mapping(3000, 4000, 0, "[vdso]")
    maps = {pid: {own_lib, vdso}}
    who = Attributor(own_dirs=("/tmp/solution",))
    rows = [(1500, pid, pid, 10 + k) for k in range(1000)]  # one long call of own work
    windows = [(0, 2000)]
    for call in range(MIN_SAMPLES):  # then short calls: half in code in no file, half runtime
        at = 10_000 + 100 * call
        rows += [(9000, pid, pid, at), (3500, pid, pid, at + 1)]
        windows.append((at, at + 50))
    got = who.attribute(Samples(rows, 0, maps), windows)
    assert got.counts["own"] == 1000 and got.bad == MIN_SAMPLES
    assert got.bad < MAX_SHARE * got.total  # diluted overall ...
    assert got.dominated == MIN_SAMPLES  # ... not call by call
    assert assess(got)
    # spread over the own calls instead, the same samples are no violation
    spread = who.attribute(Samples(rows[:1000] + rows[1000::2], 0, maps), [(0, 1_000_000)])
    assert spread.dominated == 0 and assess(spread) == []


def test_only_extension_modules_of_the_runners_extension_folder_are_its_own():
    # torch.compile's Inductor writes its kernels wherever TORCHINDUCTOR_CACHE_DIR points,
    # the runner's extension folder included: only torch's NAME/NAME.so builds count there.
    folder = "/tmp/work/torch_extensions"
    who = Attributor(extension_dirs=(folder,), own_dirs=("/tmp/work/triton",))
    pid = 4242
    assert who.place_of_mapping(pid, Mapping(1, 2, 0, f"{folder}/my_ext/my_ext.so")) == "own"
    assert who.place_of_mapping(pid, Mapping(1, 2, 0, f"{folder}/ind/xs/cxs.so")) == "foreign"
    assert who.place_of_mapping(pid, Mapping(1, 2, 0, f"{folder}/x.main.so")) == "foreign"
    assert who.place_of_mapping(pid, Mapping(1, 2, 0, "/tmp/work/triton/h/launcher.so")) == "own"


def test_pytorch_copies_in_a_call_are_foreign_where_the_task_refuses_copies():
    # Red-team round 31: copy_'s redispatch found in libtorch's ELF image, called with a raw
    # key set (no ban sees it) to transpose a data-movement task's input inside forward.
    path, symbols = _libtorch_cpu_symbols()
    copy = symbols["_ZN2at6native5copy_ERNS_6TensorERKS1_b"]  # at::native::copy_
    fill = symbols["_ZN2at6native5fill_ERNS_6TensorERKN3c106ScalarE"]  # at::native::fill_
    m = Mapping(0x10000000, 0x10000000 + 2 * max(copy, fill), 0, str(path))
    pid = 7
    # a call from 0 to 100 whose "done" came at 60: two copy samples in forward, one after
    # (a thread of the solution's copying while the runner hands over: the runner's own copy
    # into the driver's slots is libc's memmove on the CPU), a fill in forward (allowed: zeros)
    rows = [(m.start + copy + 4, pid, pid, at) for at in (10, 20, 70)]
    rows.append((m.start + fill + 4, pid, pid, 30))
    samples = Samples(rows, 0, {pid: {m}})
    moves = Attributor(moves_data=True)
    got = moves.attribute(samples, [(0, 100, 60)])
    assert got.counts["foreign"] == 3 and got.counts["runtime"] == 1, got.where
    ((place, name),) = [key for key in got.where if key[0] == "foreign"]
    assert name.startswith("PyTorch's copy in a call of forward") and "copy_" in name
    (found,) = [v for v in assess(got, moves_data=True) if "copy in a call" in v]
    assert found.startswith("foreign_kernels: ")
    # no "done" known (a call that failed, a profiled one: the runner clones the inputs
    # there): nothing; a task that computes: copies allowed
    assert moves.attribute(samples, [(0, 100, None)]).counts["foreign"] == 0
    assert Attributor().attribute(samples, [(0, 100, 60)]).counts["foreign"] == 0
    assert (
        Attributor(moves_data=True, device="cuda")
        .attribute(samples, [(0, 100, 60)])
        .counts["foreign"]
        == 0
    )


def test_python_after_done_is_the_runners_handover_not_forwards():
    # The runner's glue after "done" (outputs checked and copied into the driver's slots) is
    # not forward's Python: on a busy host it alone came to ~2.9 ms a call (red-team round 31).
    who = Attributor()
    python = Mapping(0x1000, 0x2000, 0, who.python_exe)
    pid = 7
    windows = [(0, 100, 50), (1000, 1100, 1010), (2000, 2100, 2010)]  # the first call, two more
    late = [(0x1500, pid, pid, at + 20 + k) for at in (1000, 2000) for k in range(40)]
    samples = Samples(late, 0, {pid: {python}})
    got = who.attribute(samples, windows, since=0)
    assert got.counts["interpreter"] == 80 and got.handover["interpreter"] == 80
    assert assess(got) == []
    # the same Python before "done", or with no "done" known: forward's
    early = [(0x1500, pid, pid, at + k % 9) for at in (1000, 2000) for k in range(40)]
    assert assess(who.attribute(Samples(early, 0, {pid: {python}}), windows, since=0))
    unsplit = [(a, b, None) for a, b, _ in windows]
    assert assess(who.attribute(samples, unsplit, since=0))


def test_the_kernels_copies_in_a_call_are_foreign_where_the_task_only_moves_data(monkeypatch):
    # Red-team rounds 29 and 33: writev/readv through a pipe, sendmsg/recvmsg through a socket,
    # one 4-byte iovec per element: the Linux kernel's copies did a transpose.
    from cuda_gym.judge import cpu_time

    symbols = {1: "_copy_from_iter", 2: "copy_page_to_iter", 3: "clear_page_erms", 4: None}
    monkeypatch.setattr(cpu_time, "kernel_symbol", symbols.get)
    pid, helper = 7, 8
    rows = [(KERNEL_IP, pid, pid, 10), (KERNEL_IP, pid, pid, 20), (KERNEL_IP, pid, pid, 30)]
    rows += [(KERNEL_IP, pid, pid, 70), (KERNEL_IP, pid, helper, 80)]  # after "done"
    kernel_ips = {(pid, 10): 1, (pid, 20): 2, (pid, 30): 3, (pid, 70): 1, (helper, 80): 2}
    samples = Samples(rows, 0, {}, kernel_ips=kernel_ips)
    got = Attributor(moves_data=True).attribute(samples, [(0, 100, 60)])
    # in forward: two copies (foreign), a page zeroed (the kernel's, apart); after "done": the
    # runner's own message on its main thread apart, another thread's copy foreign
    assert got.counts["foreign"] == 3 and got.counts["kernel"] == 2, got.where
    assert ("foreign", "the Linux kernel copying data (_copy_from_iter)") in got.where
    assert [v for v in assess(got, moves_data=True) if v.startswith("foreign_kernels")]
    # a task that computes, no "done" known, or the GPU's host: the kernel's time apart
    for who, windows in (
        (Attributor(), [(0, 100, 60)]),
        (Attributor(moves_data=True), [(0, 100, None)]),
        (Attributor(moves_data=True, device="cuda"), [(0, 100, 60)]),
    ):
        assert who.attribute(samples, windows).counts["foreign"] == 0


@pytest.mark.parametrize(
    ("symbol", "copies"),
    [
        (
            "void c10::function_ref<void (char**, long const*, long, long)>::callback_fn<at::native"
            "::AVX2::VectorizedLoop2d<at::native::AVX2::direct_copy_kernel(at::TensorIteratorBase&)"
            "::{lambda()#3}::operator()() const::{lambda(float)#1}>>(long, char**)",
            True,
        ),
        ("at::native::copy_impl(at::Tensor&, at::Tensor const&, bool) [clone .isra.0]", True),
        (
            "at::_ops::copy_::redispatch(c10::DispatchKeySet, at::Tensor&, at::Tensor const&,"
            " bool)",
            True,
        ),
        ("at::native::_copy_from(at::Tensor const&, at::Tensor const&, bool)", True),
        ("at::native::clone(at::Tensor const&, std::optional<c10::MemoryFormat>)", True),
        ("c10::TensorImpl::shallow_copy_from(c10::intrusive_ptr<c10::TensorImpl>)", False),
        (
            "c10::asIntArrayRefSlow(c10::ArrayRef<c10::SymInt>, char const*, long)"
            " [clone .constprop.0]",
            False,
        ),
        ("at::native::fill_(at::Tensor&, c10::Scalar const&)", False),
        ("at::detail::empty_cpu(c10::ArrayRef<long>, std::optional<c10::ScalarType>)", False),
    ],
)
def test_which_of_pytorchs_functions_are_copies(symbol, copies):
    assert Attributor(moves_data=True)._copy_in_forward(symbol) is copies


def test_forward_done_by_allowed_copies_alone_is_no_own_kernel():
    moved = Attribution(windows=40, has_first_call=True, torch_runtime=30)
    moved.counts.update(runtime=34, interpreter=6)
    (found,) = assess(moved)
    assert found.startswith("no_own_kernel: ") and "copy, fill and view" in found
    # the same with the solution's kernel doing a share of the work, or on too few samples
    honest = Attribution(windows=40, has_first_call=True, torch_runtime=30)
    honest.counts.update(runtime=34, interpreter=6, own=5)
    assert assess(honest) == []
    few = Attribution(windows=10, has_first_call=True, torch_runtime=12)
    few.counts.update(runtime=14)
    assert assess(few) == []
    assert assess(moved, device="cuda") == []  # a GPU's host time is launches and waits
    # A tiny honest kernel (32x256 elements) with more calls for the sampler, measured: PyTorch's
    # dispatch and allocation have more samples than its own code, and it is not kernel-free.
    tiny = Attribution(windows=273, has_first_call=True, torch_runtime=9)
    tiny.counts.update(own=2, runtime=23, interpreter=35)
    assert assess(tiny) == []


def test_work_between_calls_is_async_work_but_openmp_waits_are_not():
    pid = 4242
    own_lib = Mapping(1000, 2000, 0, "/tmp/solution/ext.so")
    gomp = Mapping(3000, 4000, 0, "/usr/lib/x86_64-linux-gnu/libgomp.so.1")
    maps = {pid: {own_lib, gomp}}
    who = Attributor(own_dirs=("/tmp/solution",))
    # 100 calls, one own sample in each, OpenMP's workers waiting after them (~1.3 ms a call,
    # what an honest at::parallel_for leaves spinning; 5 ms a call are excused)
    windows = [(10_000 * c + 100, 10_000 * c + 200) for c in range(100)]
    rows = [(1500, pid, pid, 10_000 * c + 150) for c in range(100)]  # inside the calls
    rows += [(1500, pid, pid, 50)]  # before the first call: loading, not counted
    waits = [(3500, pid, pid, 10_000 * c + 300) for c in range(100) for _ in range(2)]
    rows += waits[: 5 * BETWEEN_SAMPLES]
    got = who.attribute(Samples(rows, 0, maps), windows, since=100)
    assert got.counts["own"] == 100 and got.between == {"idle": 5 * BETWEEN_SAMPLES}
    assert assess(got) == []
    more = rows + [(1500, pid, pid, 500 + k) for k in range(BETWEEN_SAMPLES)]  # a thread working
    (found,) = assess(who.attribute(Samples(more, 0, maps), windows, since=100))
    assert found.startswith("async_work: ") and f"own {BETWEEN_SAMPLES}" in found
    # ... or spinning in libgomp far past what calls' ends leave (red-team round 34: threads of
    # the solution's passing an omp_lock_t back and forth, ~9 ms a call)
    spin = rows + [(3500, pid, pid, 10_000 * c + 400) for c in range(100) for _ in range(4)]
    (found,) = assess(who.attribute(Samples(spin, 0, maps), windows, since=100))
    assert found.startswith("async_work: ") and "OpenMP's waits" in found


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_kernel_time_between_calls_is_work_on_the_cpu(device):
    """A thread spinning on the clock between calls is mostly in the vDSO and the kernel."""
    pid = 4242
    maps = {pid: {Mapping(1000, 2000, 0, "[vdso]")}}
    windows = [(100, 200), (10_000, 10_100)]
    rows = [(KERNEL_IP, pid, pid, 300 + k) for k in range(BETWEEN_SAMPLES // 2)]
    rows += [(1500, pid, pid, 600 + k) for k in range(BETWEEN_SAMPLES // 2)]
    got = Attributor().attribute(Samples(rows, 0, maps), windows, since=100)
    assert got.between == {"kernel": BETWEEN_SAMPLES // 2, "runtime": BETWEEN_SAMPLES // 2}
    found = assess(got, device)
    if device == "cpu":
        (violation,) = found
        assert violation.startswith("async_work: ") and "kernel" in violation
    else:  # (a GPU runner polls for its next call in the CUDA libraries)
        assert found == []


def test_only_modules_named_as_built_extensions_are_the_solutions(tmp_path):
    ext = tmp_path / "extensions" / "my_ext"
    ext.mkdir(parents=True)
    for name in ("my_ext.so", "my_ext_v2.so", "blob.so", "libtorch_cpu.so"):
        (ext / name).write_bytes(b"\x7fELF" + name.encode())
    assert [p.name for p in sorted(ext.iterdir()) if is_extension_module(p)] == [
        "my_ext.so",
        "my_ext_v2.so",
    ]
    assert is_extension_module(tmp_path / "build" / "kernels_ext.so")
    assert len(file_hashes(str(tmp_path / "extensions"), None)) == 2
    # kernels/ built by the judge (none of it ran): every shared object there
    (tmp_path / "module").mkdir()
    (tmp_path / "module" / "libkernels.so").write_bytes(b"\x7fELF plain build")
    assert len(file_hashes(str(tmp_path / "extensions"), str(tmp_path / "module"))) == 3


def test_torch_test_libraries_and_trees_under_tmp(tmp_path):
    lib = torch_library_dir()
    if lib is None:
        pytest.skip("torch is not installed")
    who = Attributor(writable=("/tmp/",))
    pid = os.getpid()
    place = who.place_of_mapping
    assert place(pid, Mapping(1, 2, 0, lib + "libc10.so")) == "runtime"
    assert place(pid, Mapping(1, 2, 0, lib + "libjitbackend_test.so")) == "foreign"
    assert place(pid, Mapping(1, 2, 0, lib + "libgomp.so.1")) == "idle"
    assert place(pid, Mapping(1, 2, 0, lib + "libtorch_cpu.so")) == "torch"  # even under /tmp


_SAMPLES_PER_MS = 1e6 / PERIOD_NS  # (a sample is ~2 ms)


def test_the_interpreter_computing_is_foreign_but_the_runners_own_python_is_not():
    # A tiny task: the runner's Python around each call is most of the little time sampled.
    honest = Attribution(windows=36)
    honest.counts.update(interpreter=30, own=3, runtime=2)
    assert assess(honest) == []
    # An extension that only copies tensors to Python lists and back (exploit case
    # python_arithmetic_through_own_lists, measured: 54 of 79 samples in 6 calls).
    lists = Attribution(windows=6)
    lists.counts.update(interpreter=54, own=22, runtime=3)
    (found,) = assess(lists)
    assert found.startswith("foreign_kernels: ") and "Python interpreter" in found
    # Python glue around a kernel doing the work on a GPU: a share too small, whatever the time
    # (the CUDA libraries' launches beside it) ...
    glue = Attribution(windows=6)
    glue.counts.update(interpreter=54, own=2, runtime=200)
    assert assess(glue, device="cuda") == []
    # ... but on the CPU 19 ms of Python a call is compute, whatever else was sampled: libc's
    # memset on another core dilutes any share (red-team case: 526 interpreter samples beside
    # 1,264 of memset in 40 calls, 4 own calls per forward).
    (found,) = assess(glue)
    assert found.startswith("foreign_kernels: ") and "Python interpreter" in found
    memset = Attribution(windows=40, has_first_call=True)
    memset.counts.update(interpreter=526, runtime=1264, own=302)
    memset.first_call.update(interpreter=16, runtime=45, own=8)
    (found,) = assess(memset, own_calls=4)
    assert "~27.9 ms of CPU time per call" in found
    # ... or a Python loop around many calls of its own functions (a time loop, ~11 us a step).
    loop = Attribution(windows=6)
    loop.counts.update(interpreter=54, own=200)
    assert assess(loop, own_calls=1024) == []
    assert assess(loop, own_calls=1024, reference_ms=7.1) == []  # (rnn_python_time_loop's)
    # The same loop with its two judgements on the VM's two cores: as many Python samples as
    # own ones (49 each in a census of 5 calls) is within what sampling can tell apart.
    even = Attribution(windows=6, has_first_call=True)
    even.counts.update(interpreter=49 + 3, own=49 + 4, runtime=40)
    even.first_call.update(interpreter=3, own=4)
    assert assess(even, own_calls=1024, reference_ms=7.1) == []
    even.counts.update(interpreter=30)
    assert assess(even, own_calls=1024, reference_ms=7.1)
    # ... but no more than ten times the reference's forward: many short own spin calls bought
    # ~30 ms of Python a call for list arithmetic doing a 0.75 ms transpose (red-team round 21).
    bought = Attribution(windows=6)
    bought.counts.update(
        interpreter=int(6 * 30 * _SAMPLES_PER_MS), own=int(6 * 40 * _SAMPLES_PER_MS)
    )
    assert assess(bought, own_calls=2000) == []
    (found,) = assess(bought, own_calls=2000, reference_ms=0.75)
    assert found.startswith("foreign_kernels: ") and "over the 7.5 ms" in found
    # Python arithmetic beside own code that only spins as long (a red-team find): on the CPU
    # the share is of the time outside the solution's own code.
    padded = Attribution(windows=36)
    padded.counts.update(interpreter=271, own=735, runtime=44)
    (found,) = assess(padded, own_calls=4)
    assert found.startswith("foreign_kernels: ") and "Python interpreter" in found
    # One-time Python work in the first call (a table built lazily, a search of gc's objects).
    lazy = Attribution(windows=6, has_first_call=True)
    lazy.counts.update(interpreter=60, own=20)
    lazy.first_call.update(interpreter=55, own=3)
    assert assess(lazy) == []
    lazy.counts.update(interpreter=60)  # ... and as much in the five calls after it
    assert assess(lazy)
    pid = os.getpid()
    who = Attributor(writable=("/nonexistent-scratch",))
    python = Mapping(0x1000, 0x2000, 0, str(Path(sys.executable).resolve()))
    assert who.place_of_mapping(pid, python) == "interpreter"


def test_python_on_a_thread_other_than_the_main_one_is_foreign():
    """Native code of the solution's calling back into Python from a thread of its own (PyTorch
    through its Python API, past the bans on that thread: red-team round 15)."""
    pid, helper = 4242, 4250
    python = Mapping(1000, 2000, 0, str(Path(sys.executable).resolve()))
    bindings = Mapping(
        3000, 4000, 0, "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_python.so"
    )
    maps = {pid: {python, bindings}}
    windows = [(100, 200), (300, 400)]
    # The main thread's Python (the runner's, forward's own): never counted here.
    rows = [(1500, pid, pid, at) for at in (110, 120, 310, 320, 330)]
    got = Attributor().attribute(Samples(rows, 0, maps), windows, since=100)
    assert got.python_off_main == 0 and not any("thread" in v for v in assess(got))
    # Another thread's, in the first call only: not counted either (one-time set-up).
    first_only = rows + [(1500, pid, helper, at) for at in (130, 140, 150)]
    got = Attributor().attribute(Samples(first_only, 0, maps), windows, since=100)
    assert got.python_off_main == 0
    # ... in the later calls and between them: counted, and three samples are foreign_kernels.
    later = rows + [(1500, pid, helper, 340), (3500, pid, helper, 350), (1500, pid, helper, 250)]
    got = Attributor().attribute(Samples(later, 0, maps), windows, since=100)
    assert got.python_off_main == 3
    found = [v for v in assess(got) if "Python ran on a thread" in v]
    assert len(found) == 1 and found[0].startswith("foreign_kernels: ")


def test_the_first_calls_samples_are_counted_apart():
    pid = 4242
    maps = {pid: {Mapping(1000, 2000, 0, "[vdso]")}}
    rows = [(1500, pid, pid, 110), (1500, pid, pid, 120), (1500, pid, pid, 310)]
    got = Attributor().attribute(Samples(rows, 0, maps), [(100, 200), (300, 400)], since=100)
    assert got.has_first_call and got.first_call["runtime"] == 2 and got.counts["runtime"] == 3
    later = Attributor().attribute(Samples(rows, 0, maps), [(300, 400)], since=100)
    assert not later.has_first_call and not later.first_call


def test_on_a_gpu_the_cuda_libraries_are_runtime_and_own_host_work_is_no_kernel():
    import sysconfig

    pid = os.getpid()
    site = str(Path(sysconfig.get_paths()["purelib"]).resolve())
    driver = "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05"
    wheel = f"{site}/nvidia/cu13/lib/libcublasLt.so.13"
    triton = f"{site}/triton/_C/libtriton.so"
    gpu = Attributor(writable=("/nonexistent-scratch",), device="cuda")
    cpu = Attributor(writable=("/nonexistent-scratch",))
    for path in (driver, wheel, triton):
        m = Mapping(0x1000, 0x2000, 0, path)
        assert gpu.place_of_mapping(pid, m) == "runtime", path
        assert cpu.place_of_mapping(pid, m) == "foreign", path  # no GPU: nothing to launch
    numpy = f"{site}/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so"
    assert gpu.place_of_mapping(pid, Mapping(0x1000, 0x2000, 0, numpy)) == "foreign"
    # Data copied to the host, computed by the solution's own C++, copied back.
    host = Attribution(windows=7, has_first_call=True)
    host.counts.update(own=90, runtime=30)
    host.first_call.update(own=10)
    assert assess(host) == []  # on the CPU its own code is the kernel
    (found,) = assess(host, "cuda")
    assert found.startswith("no_own_kernel: ") and "host code" in found
    launches = Attribution(windows=40, has_first_call=True)
    launches.counts.update(own=12, runtime=400)  # waiting in the driver, a little of its own
    assert assess(launches, "cuda") == []
    # A small task's host loop: ~0.3 ms a call over a warm-up's thousand calls.
    small = Attribution(windows=1000, has_first_call=True)
    small.counts.update(own=150, runtime=300, interpreter=900)
    (found,) = assess(small, "cuda")
    assert found.startswith("no_own_kernel: ") and "~0.3 ms" in found
    # Honest argument checks: a few microseconds a call, however many calls.
    checks = Attribution(windows=3000, has_first_call=True)
    checks.counts.update(own=40, runtime=2000, interpreter=2500)
    assert assess(checks, "cuda") == []
    # A Python loop over 1024 time steps, one launch of its own each: pybind11's dispatch and
    # argument casts (in its own library) ~1.5 ms a forward, glue for that many calls.
    steps = Attribution(windows=60, has_first_call=True)
    steps.counts.update(own=45, runtime=120, interpreter=100)
    assert assess(steps, "cuda", own_calls=1024) == []
    (found,) = assess(steps, "cuda", own_calls=2)  # the same time in two calls is compute
    assert found.startswith("no_own_kernel: ") and "2 calls of its functions" in found
    # The same loop on a busy H100: 26 samples in a census of 5 calls read 11.1 ms a call,
    # over its 10.24 ms, within the count's uncertainty; twice that is not.
    busy = Attribution(windows=6, has_first_call=True)
    busy.counts.update(own=27, runtime=103, interpreter=97)
    busy.first_call.update(own=1, runtime=16, interpreter=10)
    assert assess(busy, "cuda", own_calls=1024) == []
    busy.counts.update(own=26)
    (found,) = assess(busy, "cuda", own_calls=1024)
    assert found.startswith("no_own_kernel: ")


def test_gpu_runners_are_sampled_unless_turned_off(monkeypatch):
    from cuda_gym.judge.config import SAMPLE_CUDA_HOST_ENV, samples_host_cpu

    monkeypatch.delenv(SAMPLE_CUDA_HOST_ENV, raising=False)
    assert samples_host_cpu("cpu") and samples_host_cpu("cuda")
    monkeypatch.setenv(SAMPLE_CUDA_HOST_ENV, "0")
    assert samples_host_cpu("cpu") and not samples_host_cpu("cuda")


def test_on_a_gpu_the_first_calls_compilers_are_not_forwards_compute():
    # Triton's first call builds its launcher with the system's cc1 and hashes its sources
    # (measured on the H200: 476-538 foreign samples, all in the first of 6 calls).
    pid = 4242
    cc1 = Mapping(1000, 2000, 0, "/usr/libexec/gcc/x86_64-linux-gnu/13/cc1")
    maps = {pid: {cc1}}
    windows = [(100, 200), (300, 400), (500, 600)]
    first_only = [(1500, pid, pid, 100 + i % 100) for i in range(40)]
    for device in ("cuda", "cpu"):
        got = Attributor(writable=("/nonexistent",), device=device).attribute(
            Samples(first_only, 0, maps), windows, since=100
        )
        assert got.counts["foreign"] == 40 and got.first_dominated == 40
        assert (assess(got, device) == []) == (device == "cuda"), device
    # ... but the same in a later call is the solution's doing on either device.
    later = [(1500, pid, pid, 300 + i % 100) for i in range(40)]
    got = Attributor(writable=("/nonexistent",), device="cuda").attribute(
        Samples(later, 0, maps), windows, since=100
    )
    assert got.first_dominated == 0
    (found,) = assess(got, "cuda")
    assert found.startswith("foreign_kernels: ") and "cc1" in found


def test_on_a_gpu_the_runners_poll_between_calls_is_not_async_work():
    # Between the calls of a timing loop the runner polls for the next in its own Python and
    # the CUDA libraries (measured on the H200: 100-500 ms over a judgement).
    polled = Attribution(windows=60, has_first_call=True)
    polled.counts.update(runtime=50, interpreter=20)
    polled.between.update(runtime=154, interpreter=208, own=15)
    assert assess(polled, "cuda") == []
    (found,) = assess(polled)
    assert found.startswith("async_work: ")
    polled.between.update(own=40)  # the solution's own code kept working
    (found,) = assess(polled, "cuda")
    assert found.startswith("async_work: ") and "own 55" in found


def test_tree_cpu_counts_kernel_time_and_reaped_children():
    """What the runner's processes spent, user and kernel, reaped children included (/proc)."""
    burn = (
        "import time\nzero = open('/dev/zero', 'rb')\nend = time.process_time() + 0.6\n"
        "while time.process_time() < end:\n    zero.read(1 << 22)\n"
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {burn!r}])\n"
            "print('done', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout.readline() == "done\n"
        assert tree_cpu_s(parent.pid) >= 0.3
        assert tree_cpu_s(2**22 + 12345) == 0.0  # no such process
    finally:
        parent.kill()
        parent.wait()


@contextlib.contextmanager
def watched_child(script: str, attributor, *args: str, per_cpu: bool = False):
    """A Python child running `script` (it prints "ready", then "done" after each command
    line) and a CpuWatch on it: (child, watch); skips where the kernel refuses sampling (or
    samples per thread where `per_cpu`)."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        try:
            watch = CpuWatch(child.pid, attributor)
        except PerfUnavailable as exc:
            pytest.skip(f"this kernel does not let us sample: {exc}")
        try:
            if per_cpu and watch.sampling != "per-cpu":
                pytest.skip(f"sampled {watch.sampling}")
            yield child, watch
        finally:
            watch.close()
    finally:
        child.stdin.close()
        child.kill()
        child.wait(10)


def tell(child: subprocess.Popen, command: str = "go") -> None:
    """Send the child one command line and wait for its "done"."""
    child.stdin.write(command + "\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "done"


# Loads the solution's library and, on command, flips a byte of its code through /proc/self/mem
# and puts it back: a library's code copied over its own functions only while a call runs.
SELF_PATCHING_CHILD = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
address = ctypes.cast(lib.twice, ctypes.c_void_p).value
with open("/proc/self/mem", "r+b", buffering=0) as mem:
    mem.seek(address)
    original = mem.read(1)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() in ("patch", "restore"):
            mem.seek(address)
            mem.write(bytes([original[0] ^ 0xFF]) if line.strip() == "patch" else original)
        print("done", flush=True)
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")
@pytest.mark.parametrize("patch", [False, True])
def test_own_code_changed_in_memory_during_a_call_is_foreign(tmp_path, patch):
    src = tmp_path / "k.c"
    src.write_text("int twice(int x) { return 2 * x; }\n")
    lib = tmp_path / "ext.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    who = Attributor(
        own_hashes=frozenset({hashlib.sha256(lib.read_bytes()).hexdigest()}),
        writable=(str(tmp_path),),
    )
    with watched_child(SELF_PATCHING_CHILD, who, str(lib)) as (child, watch):
        watch.loaded()
        if not watch.code_checks:
            pytest.skip("this process may not read the child's memory")
        with watch.window():  # an untimed call: the code is compared all through it
            tell(child, "patch" if patch else "nothing")
            time.sleep(0.05)
            tell(child, "restore")
        found = [v for v in watch.check() if "changed in memory" in v]
    assert bool(found) is patch
    if patch:
        assert found[0].startswith("foreign_kernels:") and "ext.so" in found[0]


# Computes in short-lived threads (each far under one sampling period of CPU time) on command.
SHORT_THREADS_CHILD = """
import sys, threading, time
def spin():
    end = time.thread_time() + 0.0005
    while time.thread_time() < end:
        pass
print("ready", flush=True)
for line in sys.stdin:
    stop = time.monotonic() + 0.6
    while time.monotonic() < stop:
        t = threading.Thread(target=spin)
        t.start()
        t.join()
    print("done", flush=True)
"""


@pytest.mark.parametrize("mode", ["per-cpu", "per-thread"])
def test_the_watch_samples_the_solutions_runner_per_cpu_unless_told(monkeypatch, mode):
    from cuda_gym.judge.config import CPU_SAMPLING_ENV

    monkeypatch.setenv(CPU_SAMPLING_ENV, mode)
    who = Attributor(writable=("/nonexistent-scratch",))
    with watched_child(SHORT_THREADS_CHILD, who, per_cpu=mode == "per-cpu") as (child, watch):
        watch.loaded()
        for _ in range(2):
            with watch.window():
                tell(child)
        found = watch.check()
    assert watch.sampling == mode
    assert watch.sampler.keep
    seen = watch.total.total + watch.total.counts["idle"]
    if mode == "per-cpu":  # the short threads' time is sampled: the interpreter, mostly
        assert seen * PERIOD_NS / 1e9 >= 0.4 * watch.in_calls_user_s
        assert not any("saw none of it" in v for v in found)
    else:  # each thread's period starts afresh: most of it unseen
        assert watch.unsampled_s >= 0.5 * watch.in_calls_user_s


def test_the_sampling_mode_setting_is_checked(monkeypatch):
    from cuda_gym.errors import ConfigError
    from cuda_gym.judge.config import CPU_SAMPLING_ENV, samples_per_cpu

    monkeypatch.delenv(CPU_SAMPLING_ENV, raising=False)
    assert samples_per_cpu()
    monkeypatch.setenv(CPU_SAMPLING_ENV, "per-thread")
    assert not samples_per_cpu()
    monkeypatch.setenv(CPU_SAMPLING_ENV, "sometimes")
    with pytest.raises(ConfigError, match="per-cpu or per-thread"):
        samples_per_cpu()


def test_a_trusted_librarys_code_written_in_memory_is_foreign():
    from tests.runtime.test_process_memory import WRITES_LIBM

    who = Attributor(writable=("/nonexistent-scratch",))
    with watched_child(WRITES_LIBM, who) as (child, watch):
        watch.loaded()
        assert watch.check() == []
        with watch.window():
            tell(child, "write")
        found = [v for v in watch.check() if "written in memory" in v]
    (violation,) = found
    assert violation.startswith("foreign_kernels: ") and "libm" in violation


@pytest.mark.parametrize("filled_by", ["the runner", "others"])
def test_per_cpu_samples_lost_in_rings_the_runner_filled_are_unseen(monkeypatch, filled_by):
    """A storm of records that fills a CPU's ring must not hide the runner's work (its own
    storm), nor count against it (another process's)."""
    from cuda_gym.judge.config import CPU_SAMPLING_ENV

    monkeypatch.setenv(CPU_SAMPLING_ENV, "per-cpu")
    who = Attributor(writable=("/nonexistent-scratch",))
    with watched_child(SHORT_THREADS_CHILD, who, per_cpu=True) as (child, watch):
        collect = watch.sampler.collect

        def flooded():  # every sample of the runner lost, as if its ring had been full
            got = collect()
            lost = got.lost + len(got.rows)
            others = lost if filled_by == "others" else 0
            return Samples([], lost, got.maps, lost_to_others=others)

        monkeypatch.setattr(watch.sampler, "collect", flooded)
        watch.loaded()
        for _ in range(5):  # (over the floor of unseen time per CPU: ~0.2 s a call)
            with watch.window():
                tell(child)
        found = watch.check()
    assert watch.total.lost > 50
    if filled_by == "others":
        assert not any("saw none of it" in v for v in found)
    else:
        assert watch.unsampled_s >= 0.5 * watch.in_calls_cpu_s
        assert any("saw none of it" in v for v in found)


# Answers each command at once; "burn" first spins 1.3 s of CPU (outside any call of forward).
BURNING_CHILD = """
import sys, time
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "burn":
        end = time.process_time() + 1.3
        while time.process_time() < end:
            pass
    print("done", flush=True)
"""


@pytest.mark.parametrize("calls", [3, 200])
def test_cpu_time_outside_the_calls_is_async_work_less_openmps_waits(monkeypatch, calls):
    from cuda_gym.judge.config import CPU_SAMPLING_ENV

    monkeypatch.setenv(CPU_SAMPLING_ENV, "per-cpu")
    who = Attributor(writable=("/nonexistent-scratch",))
    with watched_child(BURNING_CHILD, who, per_cpu=True) as (child, watch):
        watch.loaded()
        for _ in range(calls):
            with watch.window():
                tell(child)
        tell(child, "burn")
        # As if OpenMP's workers had been sampled waiting between the calls for 0.5 s: excused
        # up to 2.5 ms a call a core (libgomp spins after each parallel region, then sleeps).
        watch.total.between["idle"] += int(0.5 / (PERIOD_NS / 1e9))
        found = [v for v in watch.check() if "outside forward's calls" in v]  # (/proc's)
    assert watch.outside_s >= 1.2
    allowed = OPENMP_WAIT_S_PER_CALL * watch.cores * calls
    assert watch.openmp_waits_s == pytest.approx(min(0.5, allowed), rel=0.1)
    assert bool(found) is (calls == 3), found


def test_a_baselines_runner_is_sampled_as_a_solutions_is_keeping_nothing(monkeypatch):
    from cuda_gym.judge.config import CPU_SAMPLING_ENV

    monkeypatch.setenv(CPU_SAMPLING_ENV, "per-cpu")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        try:
            watch = CpuWatch(child.pid, None)
        except PerfUnavailable as exc:
            pytest.skip(f"this kernel does not let us sample: {exc}")
        try:
            if watch.sampling != "per-cpu":
                pytest.skip(f"sampled {watch.sampling}")
            assert not watch.sampler.keep and watch.check() == []
        finally:
            watch.close()
    finally:
        child.kill()
        child.wait()


def test_a_librarys_code_mapped_at_a_second_address_is_found():
    from cuda_gym.judge.cpu_time import remapped_code

    lib = "/usr/lib/libtorch_cpu.so"
    once = {7: {Mapping(0x1000, 0x9000, 0x1000, lib), Mapping(0x9000, 0xA000, 0x9000, lib)}}
    assert remapped_code(once) == set()
    twice = {7: once[7] | {Mapping(0x70000, 0x78000, 0x1000, lib)}, 8: once[7]}
    assert remapped_code(twice) == {lib}
    # anonymous memory and other processes' mappings are not a library mapped twice
    anonymous = Mapping(0x70000, 0x78000, 0, "")
    other = {7: once[7] | {anonymous}, 8: {Mapping(0x5000, 0xD000, 0x1000, lib)}}
    assert remapped_code(other) == set()
    # an exec maps the C library anew, elsewhere: a new image of the process
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    images = {(7, 0): {Mapping(0x1000, 0x9000, 0x1000, libc)}}
    images[(7, 1)] = {Mapping(0x30000, 0x38000, 0x1000, libc)}
    assert remapped_code(images) == set()


def test_openmps_name_never_hides_other_code_seen_at_the_same_address():
    who = Attributor(writable=("/nonexistent-scratch",))
    pid = 4242
    gomp = "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0"
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    alone = {pid: {Mapping(0x1000, 0x2000, 0, gomp)}}
    both = {pid: {Mapping(0x1000, 0x2000, 0, gomp), Mapping(0x1000, 0x2000, 0, libc)}}
    rows = [(0x1800, pid, pid, 150)]
    assert who.attribute(Samples(rows, 0, alone), [(100, 200)]).counts["idle"] == 1
    assert who.attribute(Samples(rows, 0, both), [(100, 200)]).counts["runtime"] == 1


def test_python_moving_data_is_foreign_on_a_data_movement_task():
    """libpython's extended slicing did transpose_pad on data the solution's C++ handed to
    Python (red-team round 24): on such a task its loops are named and count as foreign."""
    python = str(Path(sys.executable).resolve())
    mapping = Mapping(0x1000, 0x2000, 0, python)
    ip = 0x1800
    address = virtual_address(python, ip - mapping.start + mapping.offset)
    found = [("interpreter", mapping)]
    for symbol, moves, expected in [
        ("bytearray_ass_subscript", True, "foreign"),
        ("list_subscript.isra.0", True, "foreign"),
        ("_PyEval_EvalFrameDefault", True, "interpreter"),  # forward's own Python: glue
        ("list_subscript", False, "interpreter"),  # any other task: the interpreter rule
    ]:
        who = Attributor(writable=("/nonexistent-scratch",), moves_data=moves)
        place, name = who._worst(ip, found, {python: {address: symbol}})
        assert place == expected, (symbol, moves, place)
        if place == "foreign":
            assert "Python moving the data" in name


def test_a_stray_sample_in_pythons_list_handling_does_not_reject_a_fast_kernel():
    name = "libpython3.11.so.1.0's list_slice (Python moving the data)"
    stray = Attribution(windows=181)
    stray.counts.update(own=3, foreign=2, interpreter=27, runtime=25)
    stray.where[("foreign", name)] = 2
    assert assess(stray, moves_data=True) == []
    moved = Attribution(windows=217)
    moved.counts.update(own=23, foreign=13, interpreter=97, runtime=40)
    moved.where[("foreign", name)] = 13
    (found,) = assess(moved, moves_data=True)
    assert found.startswith("foreign_kernels: ") and "Python moving the data" in found


def test_python_on_a_data_movement_task_gets_a_smaller_budget():
    """zip(*rows), tuple slicing and a view's tolist from C++ moved transpose_pad's data in
    2-4 ms of Python a call, under the 5 ms floor (red-team round 25)."""
    per_ms = _SAMPLES_PER_MS
    glue = Attribution(windows=274, has_first_call=True)  # legit_transpose_pad_kernel's
    glue.counts.update(interpreter=61, own=5, runtime=40)
    glue.torch_python = 15
    assert assess(glue, own_calls=1, moves_data=True, reference_ms=0.75) == []
    tolist = Attribution(windows=107, has_first_call=True)
    tolist.counts.update(interpreter=int(106 * 1.4 * per_ms), own=15, runtime=30)
    tolist.torch_python = int(106 * 0.6 * per_ms)
    (found,) = assess(tolist, own_calls=1, moves_data=True, reference_ms=0.75)
    assert "over the 1.2 ms" in found
    assert assess(tolist, own_calls=1, moves_data=False, reference_ms=0.75) == []


def test_own_code_spinning_does_not_dilute_foreign_compute_on_a_data_movement_task():
    """NumPy's strided copy did transpose_pad beside an extension that only spun (red-team round
    21, numpy_array_interface_transpose behind the static rules): 2 NumPy samples, 288 own."""
    numpy = "_multiarray_umath.cpython-311-x86_64-linux-gnu.so"
    spun = Attribution(windows=36, has_first_call=True)
    spun.counts.update(own=288, foreign=2, runtime=23, interpreter=7)
    spun.where[("foreign", numpy)] = 2
    (found,) = assess(spun, moves_data=True)
    assert found.startswith("foreign_kernels: ") and numpy in found
    # Any other task: a long own kernel may sit beside the odd misattributed sample.
    assert assess(spun, moves_data=False) == []


def test_buffer_protocol_element_loops_are_python_moving_data():
    for name in ("copy_rec", "copy_base.isra.0", "PyBuffer_ToContiguous", "tolist_rec"):
        assert _PYTHON_DATA_MOVEMENT.match(name), name
    assert not _PYTHON_DATA_MOVEMENT.match("_PyEval_EvalFrameDefault")
