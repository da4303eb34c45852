"""A worker's stage times: each stage's total, and a wait's reason kept apart."""

import json
import time

from cuda_gym.judge.roles import Reporter


def test_a_waits_reason_is_timed_apart_as_well_as_in_its_stage(tmp_path):
    rep = Reporter(str(tmp_path / "result.json"))
    rep.enter("gate", "entry")
    time.sleep(0.05)
    rep.enter("run")
    rep.enter("gate", "step")
    time.sleep(0.02)
    rep.enter("gate", "step")
    time.sleep(0.02)
    rep.enter("run")
    assert (tmp_path / "result.stage").read_text() == "run"
    rep.finish({})
    stages = json.loads((tmp_path / "result.json").read_text())["stage_s"]
    assert stages["gate.entry"] >= 0.05 and stages["gate.step"] >= 0.04
    assert stages["gate"] >= stages["gate.entry"] + stages["gate.step"] - 1e-3
    assert "run.None" not in stages and not any(k.startswith("run.") for k in stages)
