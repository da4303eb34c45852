import pytest

from cuda_gym.synth.config import SynthConfig
from cuda_gym.synth.pipeline import synthesize


@pytest.mark.gpu
def test_synthesis_on_the_gpu_sizes_tasks_into_the_window():
    run = synthesize(SynthConfig(n=3, device="cuda", seed=21, workers=2))
    assert len(run.tasks) == 3
    for task in run.tasks:
        prov = task["provenance"]
        assert prov["device"] == "cuda" and prov["cuda"]
        assert 1.0 <= prov["eager_ms"] <= 100.0
        assert prov["filters"]["compile"]["passed"] and prov["compile_ms"] > 0
        assert prov["filters"]["cpu_sizes"]["passed"]
