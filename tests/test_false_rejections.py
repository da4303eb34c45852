"""The false-rejection corpus (benchmarks/false_rejections): well-formed; honest cases accepted."""

import pytest

from benchmarks.false_rejections import SUITE
from cuda_gym.tasks import task_from_file

# A KernelBench level-1 style kernel that relies on its inputs' structure (triangular): judged
# for real in the slow test (`python -m tests.tiers --only false_rejections` judges the whole
# corpus).
REPRESENTATIVE = ("triu_matmul_skip_zeros",)


def test_cases_are_well_formed_and_expect_acceptance():
    cases = SUITE.load_cases()
    assert len(cases) >= 15 and all(c.legit for c in cases)
    assert {c.name for c in SUITE.load_cases("cpu")} >= set(REPRESENTATIVE)
    patterns = [c.pattern for c in cases]
    assert len(set(patterns)) == len(patterns), "pattern names must be distinct"
    for case in cases:
        task_from_file(SUITE.task_ref(case))  # a KernelBench-format task


def test_an_unknown_case_is_refused():
    with pytest.raises(ValueError, match="unknown case"):
        SUITE.load_cases(only=["no_such_case"])


@pytest.mark.slow
def test_structure_relying_kernels_are_accepted_on_the_cpu():
    report = SUITE.run("cpu", only=REPRESENTATIVE, jobs=2)
    rejected = {r["case"]: r["error"][:300] for r in report["cases"] if not r["ok"]}
    assert not rejected, rejected
    assert report["passed"] == len(REPRESENTATIVE)
