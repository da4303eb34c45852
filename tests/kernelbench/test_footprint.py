"""GPU memory estimates of KernelBench problems, computed on the meta device (no allocation)."""

import json

import pytest

from benchmarks.kernelbench.footprint import (
    INPUT_SETS,
    OUTPUT_SETS,
    SLACK_BYTES,
    estimate_bytes,
)
from benchmarks.kernelbench.problems import discover_problems
from tests.kernelbench.tiny_kernelbench import HEADER, write_tree

GIB = 1 << 30

PROBLEMS = {
    # 2^30 floats in, 2^30 out: far more than this machine could allocate five times over.
    "level1/1_HugeReLU.py": HEADER
    + """class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(1 << 15, 1 << 15)]


def get_init_inputs():
    return []
""",
    # Small inputs, a large output (as KernelBench's matmul with a small K).
    "level1/2_Outer.py": HEADER
    + """class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, a, b):
        return a[:, None] * b[None, :] + self.w


def get_inputs():
    return [torch.randn(4096), torch.randn(4096)]


def get_init_inputs():
    return [4096]
""",
    # Data-dependent: no meta kernel for nonzero's output size; outputs taken as inputs.
    "level1/3_Nonzero.py": HEADER
    + """class Model(nn.Module):
    def forward(self, x):
        return torch.nonzero(x > 0)


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
""",
    "level1/4_Broken.py": HEADER + "def get_inputs():\n    raise RuntimeError('no')\n",
}


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    root = write_tree(tmp_path_factory.mktemp("fp") / "KernelBench", PROBLEMS)
    return {p.name: p for p in discover_problems(root, (1,), None, None)}


def test_inputs_outputs_and_weights_are_counted_without_allocating(problems):
    huge = 4 * GIB  # 2^30 float32
    assert (
        estimate_bytes(problems["1_HugeReLU"])
        == INPUT_SETS * huge + OUTPUT_SETS * huge + SLACK_BYTES
    )
    inputs, out, weights = 2 * 4096 * 4, 4096 * 4096 * 4, 4096 * 4
    assert (
        estimate_bytes(problems["2_Outer"])
        == INPUT_SETS * inputs + OUTPUT_SETS * out + 2 * weights + SLACK_BYTES
    )


def cfg_argv(root: str) -> list[str]:
    return ["--kernelbench-dir", root, "--out", root, "--reference-as-solution"]


def test_in_strict_mode_the_reference_workers_float64_outputs_can_dominate(problems):
    from benchmarks.kernelbench.footprint import (
        STRICT_REFERENCE_INPUT_SETS,
        STRICT_REFERENCE_OUTPUT_SETS,
    )

    # Outputs far larger than inputs: the strict reference's kept float64 outputs decide.
    inputs, out, weights = 2 * 4096 * 4, 4096 * 4096 * 4, 4096 * 4
    assert (
        estimate_bytes(problems["2_Outer"], "strict")
        == STRICT_REFERENCE_INPUT_SETS * inputs
        + STRICT_REFERENCE_OUTPUT_SETS * out
        + 3 * weights
        + SLACK_BYTES
    )
    # Inputs as large as outputs: the larger of the two workers' (here the reference's too).
    huge = 4 * GIB
    candidate = (INPUT_SETS + OUTPUT_SETS) * huge
    reference = (STRICT_REFERENCE_INPUT_SETS + STRICT_REFERENCE_OUTPUT_SETS) * huge
    assert estimate_bytes(problems["1_HugeReLU"], "strict") == max(candidate, reference) + (
        SLACK_BYTES
    )
    # The harness schedules by the estimate of its own mode.
    from benchmarks.kernelbench.__main__ import parse_args
    from benchmarks.kernelbench.jobs import ProblemJob
    from benchmarks.kernelbench.runner import _job_bytes

    root = str(problems["2_Outer"].path.parent.parent)
    for mode in ("strict", "paper"):
        cfg = parse_args([*cfg_argv(root), "--mode", mode])
        job = ProblemJob(problems["2_Outer"], cfg)
        assert _job_bytes(job) == estimate_bytes(problems["2_Outer"], mode)
    assert estimate_bytes(problems["2_Outer"], "strict") > estimate_bytes(problems["2_Outer"])
    # Paper and kernelbench modes compare in float32: the candidate's worker decides.
    assert estimate_bytes(problems["2_Outer"], "kernelbench") == estimate_bytes(problems["2_Outer"])


def test_without_a_meta_forward_outputs_count_as_large_as_inputs(problems):
    inputs = 1024 * 1024 * 4
    assert (
        estimate_bytes(problems["3_Nonzero"]) == (INPUT_SETS + OUTPUT_SETS) * inputs + SLACK_BYTES
    )


def test_a_broken_problem_has_no_estimate(problems):
    assert estimate_bytes(problems["4_Broken"]) is None


def test_a_memory_budget_only_where_problems_share_a_gpu(tmp_path):
    from benchmarks.kernelbench.__main__ import parse_args
    from benchmarks.kernelbench.runner import memory_budget

    base = [
        "--kernelbench-dir",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--solutions-dir",
        str(tmp_path),
    ]
    assert memory_budget(parse_args([*base, "--device", "cpu", "--workers", "4"])) is None
    assert memory_budget(parse_args([*base, "--device", "cuda", "--workers", "1"])) is None
    assert (
        memory_budget(parse_args([*base, "--device", "cuda", "--workers", "2", "--gpus", "0,1"]))
        is None
    )
    # Shared, but no GPU on this machine: no budget (the out-of-memory reruns still apply).
    assert memory_budget(parse_args([*base, "--device", "cuda", "--workers", "4"])) is None


def test_the_check_sets_each_estimate_beside_the_peak_its_judgement_measured(problems, tmp_path):
    from benchmarks.kernelbench.footprint import main
    from benchmarks.kernelbench.records import write_record

    run = tmp_path / "run"
    outer = estimate_bytes(problems["2_Outer"])
    peaks = {"candidate": {"allocated": 1, "reserved": 2 * outer}, "reference": {}}
    write_record(run, problems["2_Outer"], {"verdict": {"flags": {"device_peak_bytes": peaks}}})
    small = {"reference": {"allocated": 1, "reserved": outer // 4}}
    write_record(run, problems["3_Nonzero"], {"verdict": {"flags": {"device_peak_bytes": small}}})
    write_record(run, problems["1_HugeReLU"], {"verdict": {"flags": {}}})  # judged before peaks
    root = problems["2_Outer"].path.parent.parent
    out = tmp_path / "check.json"
    result = main(
        ["--kernelbench-dir", str(root), "--levels", "1", "--run", str(run), "--out", str(out)]
    )
    assert result == json.loads(out.read_text())
    rows = {r["problem"]: r for r in result["rows"]}
    assert rows["level1/2_Outer"]["measured_over_estimate"] == 2.0
    assert rows["level1/3_Nonzero"]["measured_over_estimate"] == pytest.approx(
        (outer // 4) / estimate_bytes(problems["3_Nonzero"]), abs=1e-3
    )
    assert rows["level1/1_HugeReLU"]["measured_gib"] is None
    assert rows["level1/4_Broken"]["estimate_gib"] is None
    assert result["problems"] == 4 and result["estimated"] == 3 and result["measured"] == 2
    assert result["under_estimated"] == ["level1/2_Outer"] and result["ratio_max"] == 2.0
