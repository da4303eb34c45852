"""The KernelBench harness end to end on the CPU, against the tiny problem set.

Each run goes through the command line (`benchmarks.kernelbench.__main__.main`) and its report
is checked against hand-computed metrics. Baseline times come from a baselines file written
by the test (tiny_kernelbench.BASELINE_MS) with values so large or small that "faster" does not
depend on the machine; the geometric means are checked against the recorded times.
"""

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from benchmarks.kernelbench.__main__ import main, parse_args
from benchmarks.kernelbench.solutions import unique_extension_names
from benchmarks.kernelbench.spread import summarize_run
from cuda_gym.agents import read_trajectory
from cuda_gym.judge.device import device_info
from tests.agents.chat_server import ChatServer, completion, conversation_errors, tool_call
from tests.kernelbench.tiny_kernelbench import (
    ADD_RELU_FILES,
    BASELINE_MS,
    JUDGE_FLAGS,
    OPS_CPP,
    RELU_LOAD_INLINE,
    RELU_SCALE_FILES,
    SCALE_FILES,
    SCALE_MODEL_NEW,
    SOLUTIONS,
    write_baselines,
    write_kernelbench,
    write_tree,
)

pytestmark = pytest.mark.slow

P = ["fast_0", "fast_0.5", "fast_0.8", "fast_1", "fast_1.5", "fast_2"]


def expect(n, correct, faster_eager, faster_compile, fast_eager, fast_compile):
    """Hand-computed metrics of one scope: counts of problems (divided by n here)."""
    return {
        "n": n,
        "correct": correct,
        "pass_rate": correct / n,
        "faster_than_eager_rate": faster_eager / n,
        "faster_than_compile_rate": faster_compile / n,
        "fast_p_vs_eager": dict(zip(P, [c / n for c in fast_eager])),
        "fast_p_vs_compile": dict(zip(P, [c / n for c in fast_compile])),
    }


# --solutions-dir: L1 ReLU correct (faster than eager, slower than compile), Scale correct
# (slower than eager, faster than compile), AddBias missing; L2 ReLU_Scale correct (faster than
# both), Add_ReLU wrong.
SOLUTIONS_METRICS = {
    "level1": expect(3, 2, 1, 1, [2, 1, 1, 1, 1, 1], [2, 1, 1, 1, 1, 1]),
    "level2": expect(2, 1, 1, 1, [1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]),
    "overall": expect(5, 3, 2, 2, [3, 2, 2, 2, 2, 2], [3, 2, 2, 2, 2, 2]),
}
# The chat agent (scripted server replies): L1 ReLU correct, Scale wrong, AddBias not attempted;
# L2 ReLU_Scale correct at turn 2 then overwritten by a wrong final submission (the best of the
# trajectory counts), Add_ReLU correct but slower than both baselines.
AGENT_METRICS = {
    "level1": expect(3, 1, 1, 0, [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]),
    "level2": expect(2, 2, 1, 1, [2, 1, 1, 1, 1, 1], [2, 1, 1, 1, 1, 1]),
    "overall": expect(5, 3, 2, 1, [3, 2, 2, 2, 2, 2], [3, 1, 1, 1, 1, 1]),
}


def check_metrics(report, expected):
    metrics = report["metrics"]
    scopes = {**metrics["levels"], "overall": metrics["overall"]}
    for scope, want in expected.items():
        got = scopes[scope]
        for key, value in want.items():
            if isinstance(value, dict):
                assert got[key] == pytest.approx(value), (scope, key)
            else:
                assert got[key] == pytest.approx(value), (scope, key)
    # Geometric means over correct solutions, from the recorded times.
    rows = [r for r in report["problems"] if r["status"] == "done" and r["correct"]]
    for scope, got in scopes.items():
        mine = [r for r in rows if scope == "overall" or r["problem"].startswith(scope + "/")]
        for baseline in ("eager", "compile"):
            speedups = [r["time_ms"][baseline] / r["time_ms"]["candidate"] for r in mine]
            for r, s in zip(mine, speedups):
                assert r[f"speedup_vs_{baseline}"] == pytest.approx(s)
            want = math.exp(sum(map(math.log, speedups)) / len(speedups))
            assert got[f"geomean_speedup_vs_{baseline}"] == pytest.approx(want, rel=1e-9)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_kb")
    kb = write_kernelbench(root / "kb")
    sols = write_tree(root / "solutions", SOLUTIONS)
    return {"root": root, "kb": kb, "solutions": sols}


def harness(tiny, out, *args, baselines=True):
    argv = ["--kernelbench-dir", str(tiny["kb"]), "--levels", "1,2", "--out", str(out)]
    argv += [*JUDGE_FLAGS, *args]
    if baselines:
        path = out.parent / f"{out.name}_baselines.json"
        write_baselines(path, tiny["kb"], parse_args(argv))
        argv += ["--baselines-file", str(path)]
    return main(argv)


def load_report(out):
    return json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def relu_cache(tiny):
    """A judge cache holding 1_ReLU's load_inline build and probe but no baselines: the tests
    of baseline sources copy it, so none pays a cold build to learn where a baseline came from."""
    cache = tiny["root"] / "relu_cache"
    argv = ["--kernelbench-dir", str(tiny["kb"]), "--levels", "1", "--problems", "1_ReLU"]
    argv += [*JUDGE_FLAGS, "--solutions-dir", str(tiny["solutions"]), "--baselines", "eager"]
    out = tiny["root"] / "relu_cache_run"
    assert main([*argv, "--cache-dir", str(cache), "--out", str(out)]) == 0
    shutil.rmtree(cache / "baselines")
    return cache


def cache_without_baselines(relu_cache, path):
    """A copy of `relu_cache` at `path` (its build and probe, no baselines)."""
    shutil.copytree(relu_cache, path, symlinks=True)
    return path


@pytest.fixture(scope="module")
def solutions_run(tiny):
    out = tiny["root"] / "solutions_out"
    assert harness(tiny, out, "--solutions-dir", str(tiny["solutions"])) == 0
    return out


def test_solutions_dir_metrics_match_hand_computed_values(solutions_run):
    report = load_report(solutions_run)
    check_metrics(report, SOLUTIONS_METRICS)
    assert report["counts"] == {"done": 4, "missing": 1, "error": 0, "problems": 5, "not_run": 0}
    record = json.loads((solutions_run / "records/level1/1_ReLU.json").read_text())
    assert record["solution"]["adaptations"][0].startswith("extension name 'elementwise_relu'")
    assert record["verdict"]["tolerance_mode"] == "strict" and record["task_hash"]
    wrong = json.loads((solutions_run / "records/level2/2_Add_ReLU.json").read_text())
    assert not wrong["correct"] and "Incorrect output" in wrong["error"]
    # Configuration recorded in full.
    assert report["config"]["tolerance_mode"] == "strict" and report["tolerance_mode"] == "strict"
    assert report["timing"]["timed_runs"] == 3 and report["timing"]["warmup_runs"] == 1
    assert report["numerics"] == {"matmul_allow_tf32": False, "cudnn_allow_tf32": False}
    assert report["system"]["torch"] and report["system"]["device"]["device"] == "cpu"
    assert all(len(p["file_sha256"]) == 64 for p in report["problems"])
    assert report["harness_version"]
    # Every record names the tree that judged it; the report counts them by commit.
    assert record["harness_commit"] == report["system"]["harness_commit"]
    assert report["records_by_harness_commit"] == {record["harness_commit"]: 5}
    md = (solutions_run / "report.md").read_text()
    assert f"records judged by harness commit: {record['harness_commit']} (5)" in md
    assert "| level1 | 3 | 66.7% | 33.3% | 33.3% |" in md
    assert "| overall | 5 | 60.0% | 40.0% | 40.0% |" in md
    assert "level1/3_AddBias | missing" in md


def test_resume_reruns_only_unfinished_problems(tiny, solutions_run, capsys):
    before = {p: p.stat().st_mtime_ns for p in (solutions_run / "records").rglob("*.json")}
    (solutions_run / "records/level2/2_Add_ReLU.json").unlink()
    capsys.readouterr()
    assert harness(tiny, solutions_run, "--solutions-dir", str(tiny["solutions"])) == 0
    progress = capsys.readouterr().err
    assert re.findall(r"\[\d/5\] (\S+)", progress) == ["level2/2_Add_ReLU"]
    for path, mtime in before.items():
        if path.name != "2_Add_ReLU.json":
            assert path.stat().st_mtime_ns == mtime
    check_metrics(load_report(solutions_run), SOLUTIONS_METRICS)
    # Other result-changing settings in the same directory are refused.
    code = harness(
        tiny, solutions_run, "--solutions-dir", str(tiny["solutions"]), "--tolerance-mode", "paper"
    )
    assert (
        code == 2 and "holds a run with other settings (tolerance_mode)" in capsys.readouterr().err
    )


def test_report_only_rebuilds_the_report_from_the_records_on_any_machine(
    tiny, solutions_run, tmp_path, capsys
):
    out = tmp_path / "copy"
    shutil.copytree(solutions_run, out)
    run = json.loads((out / "run.json").read_text())
    last = run["invocations"][-1]
    assert last["levels"] == [1, 2] and last["system"]["device"]["device"] == "cpu"
    # As if the run had judged on another machine: its facts, not this one's, go in the report.
    last["system"]["device"]["name"] = "The judging GPU"
    (out / "run.json").write_text(json.dumps(run))
    (out / "report.json").unlink()
    sols = ("--solutions-dir", str(tiny["solutions"]))
    assert harness(tiny, out, *sols, "--report-only", baselines=False) == 0
    report = load_report(out)
    check_metrics(report, SOLUTIONS_METRICS)
    assert report["counts"] == {"done": 4, "missing": 1, "error": 0, "problems": 5, "not_run": 0}
    assert report["system"]["device"]["name"] == "The judging GPU"
    assert report["system_source"].startswith("run.json") and report["complete"]
    # It judged nothing: no invocation added, no record rewritten.
    assert json.loads((out / "run.json").read_text())["invocations"] == run["invocations"]
    assert "rebuilt from the records (--report-only)" in (out / "report.md").read_text()
    # A run begun before invocations recorded their machine: the facts of its last report.
    for inv in run["invocations"]:
        inv.pop("system", None)
    (out / "run.json").write_text(json.dumps(run))
    assert harness(tiny, out, *sols, "--report-only", baselines=False) == 0
    assert load_report(out)["system"]["device"]["name"] == "The judging GPU"
    assert load_report(out)["system_source"].startswith("report.json")
    capsys.readouterr()
    # Other result settings are refused, as for a resume; so is a directory without a run.
    assert harness(tiny, out, *sols, "--mode", "paper", "--report-only", baselines=False) == 2
    assert "other settings (tolerance_mode)" in capsys.readouterr().err
    assert harness(tiny, tmp_path / "none", *sols, "--report-only", baselines=False) == 2
    assert "no run (no run.json)" in capsys.readouterr().err


def test_scripted_agent_plays_the_solutions_through_the_env(tiny, solutions_run):
    out = tiny["root"] / "scripted_out"
    assert harness(tiny, out, "--agent", "scripted", "--solutions-dir", str(tiny["solutions"])) == 0
    report = load_report(out)
    check_metrics(report, SOLUTIONS_METRICS)
    effort = report["effort"]["overall"]
    # read + one write per file + submit: 3 (ReLU), 4 (Scale, ReLU_Scale, Add_ReLU).
    assert effort["episodes"] == 4 and effort["turns_total"] == 15
    assert effort["tokens_total"] == 0
    steps = read_trajectory(out / "trajectories/level1/2_Scale.jsonl")
    assert [s["info"]["tool_calls"][0]["name"] for s in steps if s["type"] == "step"] == [
        "read_file",
        "write_file",
        "write_file",
        "submit",
    ]


def agent_plans():
    """Per task: the tool calls of each reply (the server's script)."""
    relu = unique_extension_names(RELU_LOAD_INLINE)[0]  # same name as the solutions run

    def writes(files):
        return [("write_file", {"path": p, "content": c}) for p, c in sorted(files.items())]

    wrong_scale = SCALE_MODEL_NEW.replace("FUNCTION", "scale")
    return {
        "1_ReLU": [
            [("read_file", {"path": "model.py"})],
            [("write_file", {"path": "model_new.py", "content": relu})],
            [("submit", {})],
        ],
        "2_Scale": [
            [("read_file", {"path": "model.py"})],
            writes(RELU_SCALE_FILES),  # relu_scale for a plain scale: wrong
            [("submit", {})],
        ],
        "3_AddBias": [[("submit", {})]],
        "1_ReLU_Scale": [
            writes(RELU_SCALE_FILES),
            [("run", {})],
            [("write_file", {"path": "model_new.py", "content": wrong_scale})],
            [("submit", {})],
        ],
        "2_Add_ReLU": [writes(ADD_RELU_FILES), [("submit", {})]],
    }


def test_openai_agent_against_a_local_server(tiny, solutions_run):
    plans = agent_plans()
    state = {"failed": False}
    assert SCALE_FILES["kernels/ops.cpp"] == OPS_CPP

    def respond(body):
        if not state["failed"]:  # the very first request fails once: the agent retries
            state["failed"] = True
            return 503, {"error": {"message": "warming up"}}
        messages = body["messages"]
        errors = conversation_errors(messages)
        if errors or not body.get("tools") or body["model"] != "tiny-coder":
            return 400, {"error": {"message": "; ".join(errors) or "bad request"}}
        task = re.search(r"# Task (\S+)", messages[1]["content"]).group(1)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        calls = [
            tool_call(f"{task}-{turn}-{i}", name, **args)
            for i, (name, args) in enumerate(plans[task][turn])
        ]
        return 200, completion(tool_calls=calls)

    out = tiny["root"] / "openai_out"
    with ChatServer(respond) as server:
        code = harness(
            tiny, out, "--agent", "openai", "--model", "tiny-coder", "--base-url", server.base_url
        )
    assert code == 0
    report = load_report(out)
    check_metrics(report, AGENT_METRICS)
    final = report["final_submission"]["overall"]
    assert final["pass_rate"] == pytest.approx(2 / 5)  # ReLU_Scale's last submission was wrong
    effort = report["effort"]["overall"]
    assert effort["turns_total"] == 13 and effort["episodes"] == 5
    assert effort["tokens_total"] == 13 * 110 and effort["prompt_tokens_total"] == 1300
    best = json.loads((out / "records/level2/1_ReLU_Scale.json").read_text())
    assert best["agent"]["scored_from"] == "turn 2, judged again with timing"
    assert best["correct"] and not best["agent"]["final"]["correct"]
    assert best["agent"]["describe"]["model"] == "tiny-coder"
    steps = read_trajectory(out / "trajectories/level2/1_ReLU_Scale.jsonl")
    assert steps[-1]["type"] == "end" and steps[-1]["usage"]["total_tokens"] == 4 * 110
    assert steps[2]["tool_messages"][0]["tool_call_id"] == "1_ReLU_Scale-1-0"

    # Replaying a saved trajectory re-judges the same actions without the model.
    replay_out = tiny["root"] / "replay_out"
    args = ["--agent", "replay", "--trajectories-dir", str(out / "trajectories")]
    assert harness(tiny, replay_out, *args, "--problems", "2_Add_ReLU") == 0
    replayed = load_report(replay_out)
    assert replayed["metrics"]["levels"]["level2"]["correct"] == 1
    assert replayed["counts"]["done"] == 1


def test_reference_as_solution_sanity_run_with_plots(tiny):
    out = tiny["root"] / "reference_out"
    args = ["--reference-as-solution", "--levels", "1", "--baselines", "eager"]
    argv = ["--kernelbench-dir", str(tiny["kb"]), "--out", str(out), *JUDGE_FLAGS, *args]
    argv.remove("--no-plots")
    # Other timing settings, so the made-up baselines of the other runs (cached under the
    # keys of their settings) are not used: this run measures its own.
    argv[argv.index("--timed-runs") + 1] = "4"
    # Stopped after the first problem: exit status 3, a partial report; then resumed.
    assert main([*argv, "--max-wall-s", "0.001"]) == 3
    partial = load_report(out)
    assert partial["complete"] is False and partial["counts"]["done"] == 1
    assert partial["counts"]["not_run"] == 2
    assert "Incomplete run" in (out / "report.md").read_text()
    assert main(argv) == 0
    report = load_report(out)
    # The resumed run's wall time adds up its two invocations.
    assert len(report["invocations"]) == 2
    assert report["total_wall_s"] == pytest.approx(sum(i["wall_s"] for i in report["invocations"]))
    assert "over 2 invocation(s)" in (out / "report.md").read_text()
    level = report["metrics"]["levels"]["level1"]
    assert level["n"] == 3 and level["pass_rate"] == 1.0
    assert level["timed_correct_vs_eager"] == 3 and level["geomean_speedup_vs_compile"] is None
    assert level["faster_than_compile_rate"] == 0.0
    record = json.loads((out / "records/level1/3_AddBias.json").read_text())
    assert record["verdict"]["flags"]["reference_as_candidate"] is True
    spread = report["speedup_spread"]["level1"]["eager"]
    assert spread["n"] == 3 and spread["p05"] <= spread["median"] <= spread["p95"]
    # Between invocations, the spread and where the time went, from the records as they stand.
    summary = summarize_run(out)
    assert summary["speedup_spread"] == report["speedup_spread"] and summary["records"] == 3
    stages = summary["stage_s_total"]
    assert stages["candidate"] > stages["candidate.timing"] > 0
    # The probe's time counts (a stage of its own); the rest is the harness's own bookkeeping.
    walls = sum(r["wall_s"] for r in report["problems"])
    assert 0 <= summary["unaccounted_s"] < 0.5 * walls
    for name in ("speedup_distribution", "pass_faster"):
        assert (out / report["plots"][name]).stat().st_size > 1000
        assert f"plots/{name}.png" in (out / "report.md").read_text()
    # The run's measured baselines went into the baselines file for the next run.
    saved = json.loads((out / "baselines.json").read_text())["entries"]
    assert sorted(e["problem"] for e in saved.values()) == [
        "level1/1_ReLU",
        "level1/2_Scale",
        "level1/3_AddBias",
    ]
    assert all("median_ms" in e["baselines"]["eager"] for e in saved.values())
    shutil.rmtree(out / "records")


def test_shipped_baselines_are_used_unless_refused(tiny, relu_cache, tmp_path, monkeypatch):
    from benchmarks.kernelbench import baseline_file

    cache = cache_without_baselines(relu_cache, tmp_path / "cache")
    argv = ["--kernelbench-dir", str(tiny["kb"]), "--levels", "1", "--problems", "1_ReLU"]
    argv += [*JUDGE_FLAGS, "--solutions-dir", str(tiny["solutions"])]
    argv += ["--cache-dir", str(cache), "--baselines", "eager"]
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    write_baselines(shipped / "this_machine.json", tiny["kb"], parse_args([*argv, "--out", "x"]))
    monkeypatch.setattr(baseline_file, "SHIPPED_DIR", shipped)
    assert main([*argv, "--out", str(tmp_path / "with")]) == 0
    record = json.loads((tmp_path / "with/records/level1/1_ReLU.json").read_text())
    assert record["time_ms"]["eager"] == BASELINE_MS["level1/1_ReLU"][0]
    # Refused: measured here (a CPU ReLU of 32x256 is nowhere near the made-up time).
    shutil.rmtree(cache / "baselines")
    assert main([*argv, "--out", str(tmp_path / "without"), "--no-shipped-baselines"]) == 0
    record = json.loads((tmp_path / "without/records/level1/1_ReLU.json").read_text())
    assert record["time_ms"]["eager"] != BASELINE_MS["level1/1_ReLU"][0]


def test_the_harness_commit_can_be_named_where_git_cannot_tell_it(monkeypatch):
    from benchmarks.kernelbench import system

    # A copy of the tree with stale git metadata (a lent GPU machine) is told its commit.
    monkeypatch.setenv(system.HARNESS_COMMIT_ENV, "0123abc")
    system.harness_commit.cache_clear()
    try:
        assert system.harness_commit() == "0123abc"
        assert system.system_facts("cpu", Path("."))["harness_commit"] == "0123abc"
    finally:
        system.harness_commit.cache_clear()


def test_shipped_baselines_measured_under_other_software_are_named_not_silently_ignored(
    tiny, relu_cache, tmp_path, monkeypatch, caplog
):
    from benchmarks.kernelbench import baseline_file

    argv = ["--kernelbench-dir", str(tiny["kb"]), "--levels", "1", "--problems", "1_ReLU"]
    argv += [*JUDGE_FLAGS, "--solutions-dir", str(tiny["solutions"]), "--baselines", "eager"]
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    path = write_baselines(shipped / "gpu.json", tiny["kb"], parse_args([*argv, "--out", "x"]))
    file = baseline_file.BaselineFile(path)
    # As measured under another torch: same problem, same GPU model, another key.
    file.entries = {
        f"other-{key}": {**entry, "device_name": device_info("cpu").name, "torch": "0.0.1"}
        for key, entry in file.entries.items()
    }
    file.save()
    monkeypatch.setattr(baseline_file, "SHIPPED_DIR", shipped)
    out = tmp_path / "run"
    with caplog.at_level("INFO"):
        cache = cache_without_baselines(relu_cache, tmp_path / "cache")
        assert main([*argv, "--cache-dir", str(cache), "--out", str(out)]) == 0
    assert "gpu.json: 1 baselines for this GPU model do not apply here (they differ in torch)" in (
        caplog.text
    )
    assert "baselines known for 0 of 1 problems at the start" in caplog.text
    invocation = json.loads((out / "run.json").read_text())["invocations"][-1]
    assert invocation["baselines_at_start"] == {"known": 0, "problems": 1}
    # Timed here, and kept in the run's baselines file with the driver it was measured under.
    saved = json.loads((out / "baselines.json").read_text())["entries"]
    assert [e["problem"] for e in saved.values()] == ["level1/1_ReLU"]
    assert "driver" in next(iter(saved.values()))
    # The next invocation knows them.
    caplog.clear()
    with caplog.at_level("INFO"):
        cache2 = cache_without_baselines(relu_cache, tmp_path / "cache2")
        assert main([*argv, "--cache-dir", str(cache2), "--out", str(out)]) == 0
    assert "baselines known for 1 of 1 problems at the start" in caplog.text
