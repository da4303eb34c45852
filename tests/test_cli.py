"""Smoke tests of the `cuda-gym` command line, run as a user would."""

import json
import logging
import subprocess
import sys

import pytest

import cuda_gym
from cuda_gym.cli import main
from cuda_gym.demo import CPU_KERNEL
from cuda_gym.tasks import builtin_task
from tests.solutions import TASK_ID


def run_cli(*args, timeout=900, module="cuda_gym.cli"):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_tasks_list_json(capsys):
    assert main(["tasks", "list", "--json", "--source", "builtin"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) >= 12
    assert {"task_id", "source", "split", "description", "hash"} <= set(rows[0])
    assert {r["source"] for r in rows} == {"builtin"}


def test_tasks_list_all_shows_the_synthesised_set_that_reset_hands_out(capsys):
    assert main(["tasks", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ids = {r["task_id"] for r in rows}
    assert {"sigmoid_gated_multiply", "synth_0_02522"} <= ids
    assert {r["source"] for r in rows} == {"builtin", "synth"}
    assert main(["tasks", "list", "--source", "synth:validation"]) == 0
    out, err = capsys.readouterr()
    assert "synth_" in out and "validation" not in out.split()[0]
    assert err.strip().endswith("synth:validation)")


def test_tasks_list_reads_a_task_directory_and_a_kernelbench_checkout(tmp_path, capsys):
    task = builtin_task(TASK_ID).source
    (tmp_path / "KernelBench" / "level2").mkdir(parents=True)
    (tmp_path / "KernelBench" / "level2" / "7_Gated.py").write_text(task)
    assert main(["tasks", "list", "--source", f"kernelbench:{tmp_path}", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["task_id"] for r in rows] == ["level2/7_Gated"]
    assert main(["tasks", "show", "level2/7_Gated", "--source", f"kernelbench:{tmp_path}"]) == 0
    assert "class Model" in capsys.readouterr().out
    assert main(["tasks", "list", "--source", f"dir:{tmp_path / 'KernelBench'}", "--json"]) == 0
    assert [r["task_id"] for r in json.loads(capsys.readouterr().out)] == ["level2/7_Gated"]


def test_tasks_show_prints_a_synthesised_task_for_the_cpu(capsys):
    assert main(["tasks", "show", "synth_0_02522", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert "class Model" in out and "CPU_SIZES" not in out
    assert "synth_0_02522" in err and "device cpu" in err


def test_unknown_task_ids_and_sources_give_a_truthful_error(capsys):
    assert main(["tasks", "show", "synth_0_0252"]) == 2
    err = capsys.readouterr().err
    assert "not in the hand-written tasks or the shipped synthesised set (560 tasks)" in err
    assert "Did you mean 'synth_0_02" in err
    assert "`cuda-gym tasks list --source all` lists them" in err
    assert main(["tasks", "list", "--source", "kernelbench"]) == 2
    assert "Unknown task source 'kernelbench'" in capsys.readouterr().err
    assert main(["tasks", "show", "nope", "--source", "builtin"]) == 2
    assert "Unknown task 'nope' in source 'builtin' (16 tasks)" in capsys.readouterr().err


def test_tasks_without_a_subcommand_prints_its_help(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cuda-gym tasks") and "tasks_command" not in out


def test_help_lists_every_command_and_the_cache_variable():
    out = run_cli("--help", module="cuda_gym")
    assert out.returncode == 0, out.stderr
    for command in ("demo", "judge", "tasks", "play", "cache", "synth"):
        assert f"    {command} " in out.stdout
    assert "CUDA_GYM_CACHE" in out.stdout


def test_help_and_version_do_not_import_torch():
    code = (
        "import sys\n"
        "from cuda_gym.cli import main\n"
        "for argv in (['--help'], ['--version'], ['demo', '--help'], ['tasks', 'list', '-h']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('torch' in sys.modules, 'gymnasium' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False True"


def test_version():
    out = run_cli("--version", module="cuda_gym")
    assert out.returncode == 0 and out.stdout.strip() == f"cuda-gym {cuda_gym.__version__}"


def test_synth_help_defaults_to_auto_and_python_m_synth_works():
    out = run_cli("synth", "--help", module="cuda_gym")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: cuda-gym synth")
    assert "(default: auto)" in " ".join(out.stdout.split())
    alone = run_cli("--help", module="cuda_gym.synth")
    assert alone.returncode == 0 and alone.stdout.startswith("usage: python -m cuda_gym.synth")


def test_judge_takes_the_sources_beside_the_solution_file(tmp_path, capsys):
    # cpp_extension.load(sources=[...]) of files beside it: the CLI judges them with it (here
    # the native scan refuses one, at the static stage).
    solution = tmp_path / "solution.py"
    solution.write_text("import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n")
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "op.cpp").write_text("#define CAT(a, b) a##b\n")
    assert main(["judge", TASK_ID, str(solution), "--device", "cpu", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["stage"] == "static" and "csrc/op.cpp" in verdict["error"]


def test_judge_exit_code_1_on_reject_and_2_on_usage_errors(tmp_path, capsys, caplog):
    broken = tmp_path / "solution.py"
    broken.write_text("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n")
    caplog.set_level(logging.INFO)
    assert main(["-v", "judge", TASK_ID, str(broken), "--device", "cpu"]) == 1
    assert "judge: reject after stage static" in caplog.text
    out = capsys.readouterr().out
    assert out.startswith("verdict   reject (reward -1, milestone)")
    assert "mode      strict precision on cpu" in out
    assert "model_new.py has a syntax error: invalid syntax (line 2)" in out
    assert main(["judge", TASK_ID, str(tmp_path / "missing.py"), "--device", "cpu"]) == 2
    assert "no solution file" in capsys.readouterr().err
    assert main(["judge", "no_such_task", str(broken), "--device", "cpu"]) == 2
    assert "Unknown task 'no_such_task'" in capsys.readouterr().err
    assert main(["judge", TASK_ID, str(broken), "--device", "cpu", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["verdict"] == "reject" and verdict["stage"] == "static"
    # --mode is the deprecated alias of --tolerance-mode.
    for flag in ("--tolerance-mode", "--mode"):
        argv = ["judge", TASK_ID, str(broken), "--device", "cpu", "--json", flag, "paper"]
        assert main(argv) == 1
        assert json.loads(capsys.readouterr().out)["tolerance_mode"] == "paper"


@pytest.mark.slow
def test_demo_json_on_the_cpu():
    out = run_cli("demo", "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["reward"] >= 1 and result["correct"] is True
    assert result["stop_reason"] == "submit" and result["turns"] == 9
    assert result["speedup_vs_eager"] > 0 and result["speedup_vs_compile"] > 0


def test_step_status_names_the_tool_the_seconds_and_the_build():
    from cuda_gym.cli import _step_status

    info = {
        "tool_calls": [{"name": "read_skill"}, {"name": "run"}],
        "tool_results": [
            {"name": "workspace", "ok": True},
            {"name": "run", "build_cached": True, "correct": False},
        ],
        "stop_reason": None,
    }
    assert _step_status(info, 12.34) == "read_skill, run [build cached] incorrect in 12.3 s"
    info = {
        "tool_calls": [{"name": "submit"}],
        "tool_results": [{"name": "submit", "build_cached": False, "correct": True}],
        "stop_reason": "submit",
    }
    assert _step_status(info, 40) == "submit [build fresh] correct in 40.0 s; episode over (submit)"


def test_demo_refuses_tasks_it_has_no_solution_for(capsys):
    assert main(["demo", "--device", "cpu", "--task", "row_softmax"]) == 2
    assert "scripted demo agent" in capsys.readouterr().err


INLINE_SOLUTION = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
{source}
"""

ext = load_inline(name="gated_inline", cpp_sources=SOURCE, functions=["gated_multiply"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))

    def forward(self, x, gate):
        return ext.gated_multiply(x, gate, self.gate_bias)
'''


@pytest.mark.slow
def test_judge_a_kernelbench_load_inline_solution(tmp_path):
    source = CPU_KERNEL.split("PYBIND11_MODULE")[0].replace(
        "#include <torch/csrc/utils/pybind.h>", "#include <torch/extension.h>"
    )
    task_file = tmp_path / "task.py"
    task_file.write_text(builtin_task(TASK_ID).for_device("cpu").source)
    solution = tmp_path / "solution.py"
    solution.write_text(INLINE_SOLUTION.replace("{source}", source))
    out = run_cli("judge", str(task_file), str(solution), "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["compiled"] is True and verdict["correct"] is True
    assert verdict["verdict"] == "accept" and verdict["reward"] >= 1
    assert set(verdict["time_ms"]) == {"candidate", "eager", "compile"}
    assert verdict["violations"] == [] and verdict["error"] is None
    # A load_inline compile error: tests/judge/test_inline_build.py.


FORBIDDEN = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.gate_bias = nn.Parameter(torch.empty(hidden_size))

    def forward(self, x, gate):
        return x * torch.sigmoid(gate + self.gate_bias)
"""


@pytest.mark.slow
def test_judge_explains_a_forbidden_op_in_one_paragraph(tmp_path):
    solution = tmp_path / "solution.py"
    solution.write_text(FORBIDDEN)
    out = run_cli("judge", TASK_ID, str(solution), "--device", "cpu", "--no-timing")
    assert out.returncode == 1, out.stderr
    assert "RuntimeError: PyTorch op aten.add.Tensor called inside" in out.stdout
    assert "worker.py" not in out.stdout and "site-packages" not in out.stdout
    assert 'File "model_new.py", line 12, in forward' in out.stdout
    assert len(out.stdout.splitlines()) < 16


@pytest.mark.slow
def test_demo_streams_each_turn_while_the_episode_runs():
    proc = subprocess.Popen(
        [sys.executable, "-m", "cuda_gym", "demo", "--device", "cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("cuda-gym demo: task sigmoid_gated_multiply on device cpu")
        assert "each judged step" in first
        banners = []
        for line in proc.stdout:
            if line.startswith("===== "):
                banners.append(line.split()[1])
            if banners.count("AGENT") == 2 and banners[-1] == "ENV":
                break
        # The first steps' observations arrive while the episode (7 more steps) still runs.
        assert banners == ["ENV", "AGENT", "ENV", "AGENT", "ENV"] and proc.poll() is None
        out, err = proc.communicate(timeout=900)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    steps = [line for line in err.splitlines() if line.startswith("[step ")]
    assert len(steps) == 9 and steps[0].startswith("[step 1/9] read_skill in ")
    assert "compile [build fresh]" in steps[5] or "compile [build cached]" in steps[5]
    assert steps[-1].endswith("episode over (submit)")
    assert '"reward"' in out.split("===== RESULT")[1]


def test_a_closed_pipe_ends_the_listing_without_a_traceback():
    out = subprocess.run(
        f"{sys.executable} -m cuda_gym tasks list --source all | head -1",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert out.stdout.startswith("attention_softmax_matmul")
    assert "Traceback" not in out.stderr
