"""The build stage compiles cuda.cu with torch/types.h first; as written when that fails."""

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


def test_the_first_build_reads_the_lighter_header_and_the_source_is_put_back(tmp_path):
    fake = FakeTorchBuild()
    path = _build(fake, tmp_path, KERNEL)
    assert len(fake.seen) == 1
    assert fake.seen[0].startswith("#include <torch/types.h>\n#include <cuda_runtime.h>")
    assert fake.seen[0].replace("torch/types.h", "torch/extension.h") == KERNEL
    assert path.read_text() == KERNEL


def test_a_failed_light_build_is_made_again_as_written(tmp_path):
    fake = FakeTorchBuild(fail=1)
    path = _build(fake, tmp_path, KERNEL)
    assert [s.splitlines()[0] for s in fake.seen] == [
        "#include <torch/types.h>",
        "#include <torch/extension.h>",
    ]
    assert path.read_text() == KERNEL


def test_when_both_fail_the_error_is_the_one_of_the_source_as_written(tmp_path):
    fake = FakeTorchBuild(fail=2)
    with pytest.raises(RuntimeError, match=r"build 2\)"):
        _build(fake, tmp_path, KERNEL)
    assert (tmp_path / "cuda.cu").read_text() == KERNEL


@pytest.mark.parametrize(
    "source",
    [
        KERNEL + "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n",  # bindings in the .cu
        KERNEL + "torch::nn::functional::relu(x);\n",  # the C++ frontend
        KERNEL.replace("<torch/extension.h>", "<torch/types.h>"),  # nothing to replace
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
