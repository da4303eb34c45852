"""The step-latency benchmark on the CPU device: one warm-up and one timed episode.

One task here (the benchmark's code is the same for every task; each costs ~3 minutes of the
slow tier on two cores); `python -m benchmarks.step_latency --device cpu` runs them all.
"""

import json

import pytest

from benchmarks.scripted_solutions import SOLVED_TASKS
from benchmarks.step_latency import STEPS, main


@pytest.mark.slow
@pytest.mark.parametrize("task_id", SOLVED_TASKS[:1])
def test_step_latency_report(tmp_path, task_id):
    out = tmp_path / "step_latency.json"
    returned = main(["--device", "cpu", "--tasks", task_id, "--repeats", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report == json.loads(json.dumps(returned))
    assert report["device"]["device"] == "cpu" and report["repeats"] == 1
    assert report["target_run_plus_profile_s"] == 5.0
    assert isinstance(report["zygote_failures"], list)
    assert isinstance(report["meets_target"], bool)
    (result,) = report["results"].values()
    assert report["tasks"] == [task_id]
    assert result["all_correct"] and result["all_compiles_cached"]
    (episode,) = result["episodes"]
    assert set(episode["step_s"]) == set(STEPS)
    assert episode["reward"] >= 1
    assert episode["run_plus_profile_s"] == pytest.approx(
        episode["step_s"]["run"] + episode["step_s"]["profile"], abs=1e-3
    )
    assert result["run_plus_profile_s"]["median"] == episode["run_plus_profile_s"]
    assert {"build", "candidate", "candidate.run"} <= set(episode["stage_times_s"])
    # The judge steps are timed through the env: never shorter than the tool's own time.
    assert episode["step_s"]["profile"] >= episode["tool_s"]["profile"] > 0
