"""Observation text: tracebacks cut to the candidate's frames, host paths replaced."""

from cuda_gym.judge import BuildResult, Verdict
from cuda_gym.tools.report import build_text, clean_error, correctness_text, scrub_paths

WORKER_TRACEBACK = """RuntimeError: shape '[3, -1]' is invalid for input of size 7
Traceback (most recent call last):
  File "/work/main/cuda_gym/judge/worker.py", line 445, in run_candidate
    on_device = [call(k) for k in range(len(input_sets))]
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/v/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _call_impl
    return forward_call(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/dev/shm/cuda_gym_judge_9174__ag8askk/solution/model_new.py", line 14, in helper
    return x.view(3, -1)
           ^^^^^^^^^^^^^
  File "/work/main/cuda_gym/judge/fallback.py", line 117, in __torch_dispatch__
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
RuntimeError: shape '[3, -1]' is invalid for input of size 7
"""

FALLBACK_TRACEBACK = """FallbackRefused: PyTorch op aten.add.Tensor called inside ModelNew.forward
Traceback (most recent call last):
  File "/work/main/cuda_gym/judge/worker.py", line 427, in call
    out = _as_list(model(*args))
  File "/tmp/cuda_gym_judge_1_2/solution/model_new.py", line 11, in forward
    return x + y
  File "/work/main/cuda_gym/judge/fallback.py", line 113, in __torch_dispatch__
    raise FallbackRefused(
cuda_gym.judge.fallback.FallbackRefused: PyTorch op aten.add.Tensor called inside ModelNew.forward
"""


def test_tracebacks_keep_only_the_candidates_frames():
    assert clean_error(WORKER_TRACEBACK) == (
        "RuntimeError: shape '[3, -1]' is invalid for input of size 7\n"
        "Traceback of your code (3 harness frames hidden):\n"
        '  File "model_new.py", line 14, in helper\n'
        "    return x.view(3, -1)\n"
        "           ^^^^^^^^^^^^^"
    )


def test_a_repeated_closing_line_is_dropped_and_module_prefixes_go():
    text = clean_error(FALLBACK_TRACEBACK)
    assert text.splitlines()[0].startswith("FallbackRefused: PyTorch op aten.add.Tensor")
    assert text.count("FallbackRefused") == 1
    assert "cuda_gym.judge" not in text and "/tmp" not in text


def test_a_different_closing_exception_is_kept():
    text = clean_error("Error while loading\n" + FALLBACK_TRACEBACK.split("\n", 1)[1])
    assert text.splitlines()[-1].startswith("FallbackRefused: PyTorch op")


def test_host_paths_become_workspace_names_or_placeholders():
    text = (
        "In file included from /work/main/.venv/lib/python3.11/site-packages/torch/include/a.h:3,\n"
        "/root/.cache/cuda_gym/incremental/ab12/slot0/src/gated.cpp:4:1: error: x\n"
        "/tmp/episode_ws/kernels/op.cu:1: error: y\n"
        "/dev/shm/cuda_gym_judge_5/out.json missing\n"
        "/root/.pyenv/versions/3.11.7/lib/python3.11/json/decoder.py line 3\n"
        "/usr/include/stdio.h stays"
    )
    assert scrub_paths(text, "/tmp/episode_ws") == (
        "In file included from <site-packages>/torch/include/a.h:3,\n"
        "kernels/gated.cpp:4:1: error: x\n"
        "kernels/op.cu:1: error: y\n"
        "<judge> missing\n"
        "<python>/json/decoder.py line 3\n"
        "/usr/include/stdio.h stays"
    )


def test_text_without_a_traceback_is_unchanged_but_for_paths():
    assert clean_error("plain message") == "plain message"
    assert clean_error(None) == ""


def test_observations_use_the_trimmed_errors():
    verdict = Verdict(compiled=True, stage="run", error=WORKER_TRACEBACK)
    text = correctness_text(verdict)
    assert "worker.py" not in text and "/dev/shm" not in text and "model_new.py" in text
    build = BuildResult(ok=False, module_dir=None, errors="/tmp/ws/kernels/a.cpp:1: error: z")
    assert build_text(build, "/tmp/ws") == "Build FAILED. First errors:\nkernels/a.cpp:1: error: z"


def test_a_speedup_within_the_timing_noise_is_said_to_be():
    from cuda_gym.judge import Flag, Verdict
    from cuda_gym.tools.report import timing_text

    verdict = Verdict(compiled=True, correct=True, device_name="cpu")
    verdict.time_ms = {"candidate": 10.0, "eager": 10.8, "compile": 20.0}
    verdict.speedup_vs_eager, verdict.speedup_vs_compile = 1.08, 2.0
    verdict.flags[Flag.TIMING_NOISE] = {"eager": 0.12, "compile": 0.12}
    eager, compiled = timing_text(verdict).splitlines()[2:]
    assert "within the timing noise of +-12%" in eager
    assert "noise" not in compiled
