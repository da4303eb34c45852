"""GPU memory estimates of KernelBench problems, computed on the meta device (no allocation)."""

import json

import pytest

from benchmarks.kernelbench.footprint import (
    HEADROOM,
    INPUT_SETS,
    OUTPUT_SETS,
    SHRINK_SETS,
    SLACK_BYTES,
    STRICT_REFERENCE_SHRINK_SETS,
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
    # Outputs far smaller than inputs (as KernelBench's losses), intermediates beside them.
    "level1/5_SquaredError.py": HEADER
    + """class Model(nn.Module):
    def forward(self, a, b):
        return ((a - b) ** 2).mean()


def get_inputs():
    return [torch.randn(1024, 1024), torch.randn(1024, 1024)]


def get_init_inputs():
    return []
""",
}


def expected(counted: int) -> int:
    return int(HEADROOM * counted) + SLACK_BYTES


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    root = write_tree(tmp_path_factory.mktemp("fp") / "KernelBench", PROBLEMS)
    return {p.name: p for p in discover_problems(root, (1,), None, None)}


def test_inputs_outputs_and_weights_are_counted_without_allocating(problems):
    huge = 4 * GIB  # 2^30 float32
    assert estimate_bytes(problems["1_HugeReLU"]) == expected((INPUT_SETS + OUTPUT_SETS) * huge)
    # The outer product is held beside the output while the weight is added: one more output.
    inputs, out, weights = 2 * 4096 * 4, 4096 * 4096 * 4, 4096 * 4
    assert estimate_bytes(problems["2_Outer"]) == expected(
        INPUT_SETS * inputs + OUTPUT_SETS * out + 2 * weights + out
    )


def test_outputs_smaller_than_inputs_and_intermediates_add_to_the_estimate(problems):
    # Two 4 MiB inputs, a 4-byte output; a - b and its square are held at once (8 MiB).
    inputs, out, held = 2 * (4 << 20), 4, 2 * (4 << 20) - 4
    shrink = inputs - out
    assert estimate_bytes(problems["5_SquaredError"]) == expected(
        INPUT_SETS * inputs + OUTPUT_SETS * out + SHRINK_SETS * shrink + held
    )
    # The strict reference's float64 pass: more per byte of shrink, intermediates twice.
    assert estimate_bytes(problems["5_SquaredError"], "strict") == expected(
        3 * inputs + 10 * out + STRICT_REFERENCE_SHRINK_SETS * shrink + 2 * held
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
    held = out  # the outer product beside the output
    assert estimate_bytes(problems["2_Outer"], "strict") == expected(
        STRICT_REFERENCE_INPUT_SETS * inputs
        + STRICT_REFERENCE_OUTPUT_SETS * out
        + 3 * weights
        + 2 * held
    )
    # Inputs as large as outputs: the larger of the two workers' (here the reference's too).
    huge = 4 * GIB
    candidate = (INPUT_SETS + OUTPUT_SETS) * huge
    reference = (STRICT_REFERENCE_INPUT_SETS + STRICT_REFERENCE_OUTPUT_SETS) * huge
    assert estimate_bytes(problems["1_HugeReLU"], "strict") == expected(max(candidate, reference))
    # The harness schedules by the estimate of its own mode.
    from benchmarks.kernelbench.__main__ import parse_args
    from benchmarks.kernelbench.jobs import ProblemJob
    from benchmarks.kernelbench.runner import _job_bytes

    root = str(problems["2_Outer"].path.parent.parent)
    for mode in ("strict", "paper"):
        cfg = parse_args([*cfg_argv(root), "--tolerance-mode", mode])
        job = ProblemJob(problems["2_Outer"], cfg)
        assert _job_bytes(job) == estimate_bytes(problems["2_Outer"], mode)
    assert estimate_bytes(problems["2_Outer"], "strict") > estimate_bytes(problems["2_Outer"])
    # Paper and kernelbench modes compare in float32: the candidate's worker decides.
    assert estimate_bytes(problems["2_Outer"], "kernelbench") == estimate_bytes(problems["2_Outer"])


def test_without_a_meta_forward_outputs_count_as_large_as_inputs(problems):
    inputs = 1024 * 1024 * 4
    assert estimate_bytes(problems["3_Nonzero"]) == expected((INPUT_SETS + OUTPUT_SETS) * inputs)


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
    assert result["problems"] == 5 and result["estimated"] == 4 and result["measured"] == 2
    assert result["under_estimated"] == ["level1/2_Outer"] and result["ratio_max"] == 2.0


def test_live_bytes_counts_each_storage_until_it_is_collected():
    import torch

    from benchmarks.kernelbench.footprint import _LiveBytes

    with torch.device("meta"):
        x = torch.empty(1024)  # made before the count: not counted
        live = _LiveBytes()
        with live:
            y = x.relu().relu().relu()  # each step's input is freed once the next exists
            view = y.view(32, 32)  # shares y's storage: adds nothing
    assert live.peak == 2 * 4096 and live.live == 4096
    del y, view
    assert live.live == 0
