"""Workers forked from the zygote on a real GPU: CUDA and NVML start in them, and running out of
device memory is PyTorch's OutOfMemoryError (not an NVML assertion, as when the zygote forked
with NVML initialised). Run with: python -m pytest -m gpu"""

import pytest

from cuda_gym.judge.judge import WORKER_PRELOAD
from cuda_gym.runtime import python_child_env
from cuda_gym.runtime.zygote import ZygoteLauncher

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "preload", [WORKER_PRELOAD, "tests.runtime.zygote_preloads:worker_preload_and_nvml"]
)
def test_forked_workers_start_cuda_and_nvml(preload, tmp_path):
    launcher = ZygoteLauncher(python_child_env(), preload=preload)
    try:
        proc = launcher.run(
            "tests.runtime.zygote_child",
            ["cuda_nvml_oom"],
            timeout_s=120,
            cwd=tmp_path,
            env=python_child_env(),
        )
        assert proc.ok, proc.stderr
        parent, nvml_rc, outcome = proc.stdout.split()
        assert int(parent) == launcher._proc.pid  # forked from the zygote, not started afresh
        assert (nvml_rc, outcome) == ("0", "OutOfMemoryError"), proc.stderr
    finally:
        launcher.close()
