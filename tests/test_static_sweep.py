"""benchmarks.static_sweep: the static checks over a folder of solutions written elsewhere."""

import json

from benchmarks.static_sweep import main

HONEST = """\
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="relu", cpp_sources="", cuda_sources="", functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
"""

FALLBACK = """\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        try:
            return torch.ops.my.relu(x)
        except Exception:
            return torch.relu(x)
"""


def test_a_sweep_counts_what_each_rule_set_rejects(tmp_path, capsys):
    corpus = tmp_path / "corpus" / "run1"
    corpus.mkdir(parents=True)
    (corpus / "honest.py").write_text(HONEST)
    (corpus / "fallback.py").write_text(FALLBACK)
    (corpus / "helper.py").write_text("X = 1\n")  # no ModelNew: not a solution
    out = tmp_path / "sweep.json"
    assert main([str(tmp_path / "corpus"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["files"] == 2
    for rules in ("env", "external"):
        part = report["rule_sets"][rules]
        assert part["rejected"] == 1 and part["by_rule"] == {"try_except": 1}
        assert part["rejected_files"] == {"run1/fallback.py": ["try_except"]}
    assert "2 solutions" in capsys.readouterr().out
