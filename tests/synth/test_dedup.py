import re

from cuda_gym.synth.compose import compose
from cuda_gym.synth.config import SynthConfig
from cuda_gym.synth.dedup import ReferenceIndex, ast_tokens, similarity
from cuda_gym.synth.pipeline import synthesize
from cuda_gym.synth.pool import InlinePool
from cuda_gym.tasks import builtin_task

CFG = SynthConfig(n=2, seed=11, compile_check=False, window_ms=(0.0, 10_000.0), workers=1)


def look_alike(source: str) -> str:
    """The same problem as another author might write it: new names, sizes, comments."""
    text = source.replace('"""Synthesised task', '"""A problem I wrote')
    text = re.sub(r"\bbatch_size\b", "B", text)
    text = re.sub(r"\bx\b", "inp", text)
    text = re.sub(r"= (\d+)\n", lambda m: f"= {int(m.group(1)) * 2}  # size\n", text)
    return text


def test_renamed_resized_copy_is_similar_and_others_are_not():
    a = compose(0, CFG).source()
    other = builtin_task("rms_norm").source
    assert similarity(ast_tokens(a), ast_tokens(look_alike(a))) > 0.9
    assert similarity(ast_tokens(a), ast_tokens(other)) < 0.9


def test_pipeline_drops_look_alikes_of_a_reference_directory(tmp_path):
    refs = tmp_path / "refs" / "level2"
    refs.mkdir(parents=True)
    for i in (0, 1):
        (refs / f"{i}_lookalike.py").write_text(look_alike(compose(i, CFG).source()))
    (refs / "99_unrelated.py").write_text(builtin_task("rms_norm").source)
    (refs / "not_a_task.py").write_text("print('hello')\n")
    assert len(ReferenceIndex(tmp_path / "refs")) == 3

    config = SynthConfig(**{**CFG.__dict__, "decontaminate_against": str(tmp_path / "refs")})
    run = synthesize(config, pool=InlinePool("cuda_gym.synth.filters:filter_job"))
    by_index = {r["index"]: r for r in run.records}
    for i in (0, 1):
        if by_index[i]["failed"] == "stochastic_op":
            continue
        assert by_index[i]["failed"] == "decontamination"
        assert by_index[i]["filters"]["decontamination"]["similarity"] > 0.9
    assert len(run.tasks) == 2
    assert all(t["provenance"]["index"] not in (0, 1) for t in run.tasks)
    assert run.summary()["filters"]["decontamination"]["reached"] >= 2
