"""benchmarks/host_bound_timing.py on the CPU: every variant timed, ratios to the first."""

import json

from benchmarks.host_bound_timing import main

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(n, n) for _ in range(4)])
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.layers(x))


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return [32]
"""


def test_every_variant_is_timed_and_compared_with_the_device_built_model(tmp_path):
    (tmp_path / "KernelBench" / "level3").mkdir(parents=True)
    (tmp_path / "KernelBench" / "level3" / "1_Small.py").write_text(PROBLEM)
    out = tmp_path / "r.json"
    argv = ["--kernelbench-dir", str(tmp_path), "--problems", "level3/1_Small,level3/2_Missing"]
    argv += ["--device", "cpu", "--busy", "1", "--timed-runs", "5", "--windows", "2"]
    main([*argv, "--out", str(out)])
    report = json.loads(out.read_text())
    result = report["results"]["level3/1_Small"]
    assert set(result) == {
        "device_built",
        "host_built",
        "host_built_all_sets",
        "device_built_busy_1",
        "device_built_again",
        "windows",
    }
    windows = result.pop("windows")
    for name in ("free", "pinned"):
        assert len(windows[name]["medians_ms"]) == 2 and windows[name]["max_over_min"] >= 1.0
    assert result["device_built"]["ratio_to_device_built"] == 1.0
    assert all(v["median_ms"] > 0 and v["ratio_to_device_built"] > 0 for v in result.values())
    assert "FileNotFoundError" in report["results"]["level3/2_Missing"]["error"]
