"""Problem discovery, solution lookup and adaptation, and the harness configuration."""

import json

import pytest

from benchmarks.kernelbench.__main__ import parse_args
from benchmarks.kernelbench.problems import discover_problems
from benchmarks.kernelbench.runner import claim_run_dir
from benchmarks.kernelbench.solutions import find_solution, solution_files, unique_extension_names
from cuda_gym.errors import ConfigError
from cuda_gym.judge.config import FAST_WORKER_START_ENV
from tests.kernelbench.tiny_kernelbench import (
    RELU_LOAD_INLINE,
    SOLUTIONS,
    write_kernelbench,
    write_tree,
)


@pytest.fixture
def kb(tmp_path):
    return write_kernelbench(tmp_path / "kb")


def test_discovery_sorts_by_level_and_id_and_filters(kb, tmp_path):
    problems = discover_problems(kb, (1, 2))
    assert [p.key for p in problems] == [
        "level1/1_ReLU",
        "level1/2_Scale",
        "level1/3_AddBias",
        "level2/1_ReLU_Scale",
        "level2/2_Add_ReLU",
    ]
    # The KernelBench folder itself works too.
    assert len(discover_problems(kb / "KernelBench", (1,))) == 3
    assert [p.name for p in discover_problems(kb, (1, 2), only=("2", "1_ReLU"))] == [
        "1_ReLU",
        "2_Scale",
        "2_Add_ReLU",
    ]
    assert [p.name for p in discover_problems(kb, (1, 2), limit=1)] == ["1_ReLU", "1_ReLU_Scale"]
    with pytest.raises(ConfigError, match="no level3 folder"):
        discover_problems(kb, (1, 3))
    with pytest.raises(ConfigError, match="holds no KernelBench levels"):
        discover_problems(tmp_path / "empty", (1,))


def test_solutions_found_by_file_folder_or_kernelbench_sample_name(kb, tmp_path):
    sols = write_tree(tmp_path / "sols", SOLUTIONS)
    (sols / "level_2_problem_2_sample_0_kernel.py").write_text("x = 1\n")
    problems = {p.key: p for p in discover_problems(kb, (1, 2))}
    assert find_solution(sols, problems["level1/1_ReLU"]) == sols / "level1/1_ReLU.py"
    assert find_solution(sols, problems["level1/2_Scale"]) == sols / "level1/2_Scale"
    assert find_solution(sols, problems["level1/3_AddBias"]) is None
    files, notes = solution_files(sols / "level1/2_Scale")
    assert sorted(files) == ["kernels/ops.cpp", "model_new.py"] and notes == []
    (sols / "level2/2_Add_ReLU/model_new.py").unlink()
    flat = find_solution(sols, problems["level2/2_Add_ReLU"])
    assert flat == sols / "level_2_problem_2_sample_0_kernel.py"


def test_load_inline_names_get_a_content_suffix_and_nothing_else_changes():
    adapted, notes = unique_extension_names(RELU_LOAD_INLINE)
    suffix = notes[0].split("'")[-2].rsplit("_", 1)[1]
    assert len(suffix) == 12
    assert notes == [f"extension name 'elementwise_relu' -> 'elementwise_relu_{suffix}'"]
    assert adapted == RELU_LOAD_INLINE.replace(
        'name="elementwise_relu"', f"name='elementwise_relu_{suffix}'"
    )
    # Same file, same name (builds are reused); another file, another name.
    assert unique_extension_names(RELU_LOAD_INLINE)[0] == adapted
    other, _ = unique_extension_names(RELU_LOAD_INLINE + "\n# v2\n")
    assert other != adapted + "\n# v2\n"
    positional = 'm = torch.utils.cpp_extension.load_inline("e", cpp_sources=s)\n'
    assert '"e"' not in unique_extension_names(positional)[0]
    assert unique_extension_names("def broken(:\n") == ("def broken(:\n", [])
    dynamic = "m = load_inline(name=NAME, cpp_sources=s)\n"
    assert unique_extension_names(dynamic) == (dynamic, [])


def test_config_needs_exactly_one_solver(kb, tmp_path):
    base = ["--kernelbench-dir", str(kb), "--out", str(tmp_path / "o"), "--device", "cpu"]
    with pytest.raises(ConfigError, match="exactly one solver"):
        parse_args(base)
    with pytest.raises(ConfigError, match="exactly one solver"):
        parse_args([*base, "--reference-as-solution", "--solutions-dir", str(tmp_path)])
    with pytest.raises(ConfigError, match="needs --model"):
        parse_args([*base, "--agent", "openai"])
    with pytest.raises(ConfigError, match="needs --solutions-dir"):
        parse_args([*base, "--agent", "scripted"])
    with pytest.raises(ConfigError, match="is not a directory"):
        parse_args([*base, "--solutions-dir", str(tmp_path / "nope")])
    with pytest.raises(ConfigError, match="a multiple of the GPU count"):
        parse_args([*base, "--reference-as-solution", "--workers", "3", "--gpus", "0,1"])
    cfg = parse_args([*base, "--reference-as-solution", "--workers", "4", "--gpus", "0,1"])
    assert cfg.gpus == (0, 1) and cfg.workers == 4
    cfg = parse_args([*base, "--agent", "openai", "--model", "m", "--levels", "1,2"])
    assert cfg.levels == (1, 2) and cfg.kind == "agent"
    assert cfg.judge_config().timed_runs == 100
    # Solutions judged here were written elsewhere: the permissive static rules.
    assert cfg.judge_config().code_rules == "external"


def test_fast_worker_start_reaches_the_judge_and_does_not_block_a_resume(kb, tmp_path, monkeypatch):
    monkeypatch.delenv(FAST_WORKER_START_ENV, raising=False)
    base = ["--kernelbench-dir", str(kb), "--out", str(tmp_path / "o"), "--reference-as-solution"]
    slow, fast = parse_args([*base, "--device", "cpu"]), parse_args([*base, "--fast-worker-start"])
    assert fast.judge_config().forks_workers and not slow.judge_config().forks_workers
    assert fast.fingerprint()["device"] == "cuda" and slow.fingerprint()["device"] == "cpu"
    # Without the flag the judge's default decides: on for CUDA.
    assert parse_args(base).judge_config().forks_workers
    assert parse_args(base).fingerprint() == fast.fingerprint()
    monkeypatch.setenv(FAST_WORKER_START_ENV, "1")  # the judge's default, left alone by the flag
    assert slow.judge_config().forks_workers


def test_tolerance_mode_flag_keeps_mode_as_an_alias_and_old_runs_resume(kb, tmp_path):
    base = ["--kernelbench-dir", str(kb), "--out", str(tmp_path / "o"), "--device", "cpu"]
    base += ["--reference-as-solution"]
    assert parse_args([*base, "--tolerance-mode", "paper"]).tolerance_mode == "paper"
    cfg = parse_args([*base, "--mode", "paper"])
    assert cfg.tolerance_mode == "paper" and cfg.judge_config().tolerance_mode == "paper"
    # A run directory written when the fingerprint's key was "mode" resumes.
    old = dict(cfg.fingerprint())
    old["mode"] = old.pop("tolerance_mode")
    cfg.out.mkdir(parents=True)
    (cfg.out / "run.json").write_text(json.dumps({"fingerprint": old}))
    claim_run_dir(cfg)
