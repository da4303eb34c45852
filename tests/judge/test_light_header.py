"""The build stage compiles cuda.cu with lighter torch headers first; as written when they fail."""

import types

import pytest

from cuda_gym.judge.runner import _lighter_cuda_builds

KERNEL = """#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.f * x[i];
}
"""


class FakeTorchBuild:
    """torch.utils.cpp_extension's build step (its signature): records what cuda.cu held."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail  # how many builds fail first
        self.seen: list[str] = []
        self.module = types.SimpleNamespace(_write_ninja_file_and_build_library=self.build)

    def build(
        self,
        name,
        sources,
        extra_cflags,
        extra_cuda_cflags,
        extra_sycl_cflags,
        extra_ldflags,
        extra_include_paths,
        build_directory,
        verbose,
        with_cuda,
        with_sycl,
        is_standalone=False,
    ):
        self.compile(name, sources)

    def compile(self, name, sources):
        cuda = [s for s in sources if s.endswith(".cu")]
        self.seen.append(open(cuda[0]).read() if cuda else "")
        if len(self.seen) <= self.fail:
            raise RuntimeError(f"Error building extension '{name}' (build {len(self.seen)})")


def _build(fake: FakeTorchBuild, directory, source: str, name: str = "cuda.cu"):
    path = directory / name
    path.write_text(source)
    _lighter_cuda_builds(fake.module)
    fake.module._write_ninja_file_and_build_library(
        name="ext",
        sources=[str(directory / "main.cpp"), str(path)],
        extra_cflags=[],
        extra_cuda_cflags=[],
        extra_sycl_cflags=[],
        extra_ldflags=[],
        extra_include_paths=[],
        build_directory=str(directory),
        verbose=False,
        with_cuda=True,
        with_sycl=False,
    )
    return path


def test_the_first_build_reads_atens_headers_and_the_source_is_put_back(tmp_path):
    fake = FakeTorchBuild()
    path = _build(fake, tmp_path, KERNEL)
    assert len(fake.seen) == 1
    assert fake.seen[0].startswith("#include <ATen/core/Tensor.h>\n")
    assert "torch/extension.h" not in fake.seen[0] and "torch/types.h" not in fake.seen[0]
    assert fake.seen[0].endswith(KERNEL.split("\n", 1)[1])
    assert path.read_text() == KERNEL


def test_failed_light_builds_are_made_again_with_torch_types_then_as_written(tmp_path):
    fake = FakeTorchBuild(fail=2)
    path = _build(fake, tmp_path, KERNEL)
    assert [s.splitlines()[0] for s in fake.seen] == [
        "#include <ATen/core/Tensor.h>",
        "#include <torch/types.h>",
        "#include <torch/extension.h>",
    ]
    assert path.read_text() == KERNEL


def test_when_all_fail_the_error_is_the_one_of_the_source_as_written(tmp_path):
    fake = FakeTorchBuild(fail=3)
    with pytest.raises(RuntimeError, match=r"build 3\)"):
        _build(fake, tmp_path, KERNEL)
    assert (tmp_path / "cuda.cu").read_text() == KERNEL


def test_load_inlines_own_torch_types_line_gives_way_too(tmp_path):
    # load_inline puts `#include <torch/types.h>` atop every cuda.cu; both lines become one block.
    source = "#include <torch/types.h>\n#include <cuda.h>\n" + KERNEL
    fake = FakeTorchBuild(fail=1)
    _build(fake, tmp_path, source)
    assert fake.seen[0].count("#include <ATen/core/Tensor.h>") == 1
    assert "torch/" not in fake.seen[0].replace("namespace torch", "")
    assert fake.seen[1:] == [source.replace("torch/extension.h", "torch/types.h")]


def test_a_source_with_torch_types_alone_is_tried_light_then_as_written(tmp_path):
    source = KERNEL.replace("<torch/extension.h>", "<torch/types.h>")
    fake = FakeTorchBuild(fail=1)
    _build(fake, tmp_path, source)
    assert fake.seen[0].startswith("#include <ATen/core/Tensor.h>") and fake.seen[1:] == [source]


@pytest.mark.parametrize(
    "source",
    [
        KERNEL + "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n",  # bindings in the .cu
        KERNEL + "torch::nn::functional::relu(x);\n",  # the C++ frontend
        KERNEL.replace("#include <torch/extension.h>\n", ""),  # nothing to replace
    ],
)
def test_sources_that_need_the_full_header_or_lack_it_are_built_as_written(tmp_path, source):
    fake = FakeTorchBuild()
    _build(fake, tmp_path, source)
    assert fake.seen == [source]


def test_files_outside_load_inlines_build_directory_are_never_rewritten(tmp_path):
    # cpp_extension.load(sources=[...]) compiles the solution's own files where they are.
    fake = FakeTorchBuild()
    own = tmp_path / "kernels"
    own.mkdir()
    (own / "cuda.cu").write_text(KERNEL)
    _lighter_cuda_builds(fake.module)
    fake.module._write_ninja_file_and_build_library(
        "ext",
        [str(own / "cuda.cu")],
        [],
        [],
        [],
        [],
        [],
        str(tmp_path / "build"),
        False,
        True,
        False,
    )
    assert fake.seen == [KERNEL]
