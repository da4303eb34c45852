"""Stage command lines: built as data, accepted by OpenRLHF's own parser, printed by --dry-run."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import agent_trainer
from agent_trainer.agent_func import load_agent_config
from agent_trainer.cli import main
from agent_trainer.openrlhf_args import OpenRLHFArgsError, parse_openrlhf_args
from agent_trainer.pipeline_config import STAGES, load_config
from agent_trainer.stages import plan_stage, prepare_ppo_stage

RECIPES = sorted((Path(agent_trainer.__file__).parent / "recipes").glob("*.yaml"))


def plans(path):
    cfg = load_config(path)
    return cfg, [plan_stage(cfg, s, Path(path)) for s in cfg.stages]


def test_three_recipes_ship():
    assert [p.stem for p in RECIPES] == ["multi_node", "node", "one_gpu"]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_openrlhf_command_is_accepted_by_openrlhf(recipe):
    cfg, stage_plans = plans(recipe)
    assert [p.stage for p in stage_plans] == list(STAGES)
    parsed = {}
    for plan in stage_plans:
        for command in plan.commands:
            if command.openrlhf_module:
                args = parse_openrlhf_args(command.openrlhf_module, list(command.openrlhf_args))
                parsed[plan.stage] = args
                # The flags are the tail of the printed command line.
                tail = list(command.argv[-len(command.openrlhf_args):])
                assert tail == list(command.openrlhf_args)
                if cfg.launch.recipe == "multi_node":
                    assert command.argv[:3] == ("ray", "job", "submit")
                    assert command.argv[command.argv.index("--") + 1] == sys.executable
                # Both run through the wrapper that patches OpenRLHF: the GAE for PPO
                # (multiturn_gae.py), the token-row dataset for SFT (token_sft.py).
                at = command.argv.index("agent_trainer.openrlhf_main")
                assert command.argv[at + 1] == command.openrlhf_module
                if command.openrlhf_module == "openrlhf.cli.train_ppo_ray":
                    assert command.argv[at - 2: at] == (sys.executable, "-m")
                else:
                    assert command.argv[at - 1] == "--module"
                    assert "deepspeed.launcher.runner" in command.argv
    ppo = parsed["ppo"]
    assert ppo.algo.advantage.estimator == "gae"
    assert (ppo.algo.advantage.gamma, ppo.algo.advantage.lambd) == (1.0, 0.95)
    assert tuple(ppo.actor.eps_clip_low_high) == (0.2, 0.28)
    assert (ppo.actor.adam.lr, ppo.critic.adam.lr) == (3e-6, 6e-6)
    assert ppo.reward.remote_url == ["agent"]  # OpenRLHF's marker for agent mode
    assert ppo.reward.overlong_buffer_len is None  # counts tool tokens: never on
    assert ppo.critic.model_name_or_path.endswith("value-pretrain/model_critic")
    assert ppo.actor.model_name_or_path.endswith("rft/model")
    assert tuple(ppo.reward.clip_range) == tuple(cfg.agent.reward_clip)
    value = parsed["value-pretrain"]
    assert value.critic.freezing_steps >= 10**9 and value.critic.save_value_network
    warm = parsed["warmup"]
    assert warm.train.agent_func_path.endswith("warmup/agent_func.py")
    # Past the model's native context the run starts from its rope-scaled copy (context.py).
    assert warm.actor.model_name_or_path == (
        str(cfg.run_path / "base_model") if cfg.rope_scaling else cfg.model)
    sft = parsed["rft"]
    assert not sft.data.apply_chat_template and sft.data.input_key == "input_ids"
    assert sft.model.model_name_or_path.endswith("warmup/model")
    launch = cfg.launch
    assert ppo.actor.num_gpus_per_node == launch.gpus_per_node - launch.evaluator_gpus_per_node
    assert ppo.train.colocate_all and ppo.vllm.enable_sleep


def test_openrlhf_parser_rejects_a_bad_flag():
    with pytest.raises(OpenRLHFArgsError, match="unrecognized arguments: --actor.learning"):
        parse_openrlhf_args("openrlhf.cli.train_ppo_ray", ["--actor.learning_rate", "1"])
    with pytest.raises(OpenRLHFArgsError, match="only a prefix"):
        parse_openrlhf_args("openrlhf.cli.train_ppo_ray",
                            ["--actor.model_name_or_path", "m", "--train.agent_func_path",
                             "a.py", "--actor.adam.l", "1e-6", "--actor.num_gpus_per_node", "1"])
    with pytest.raises(OpenRLHFArgsError, match="apply_chat_template must be enabled"):
        parse_openrlhf_args("openrlhf.cli.train_sft", ["--data.multiturn"])


def test_pipeline_dry_run_prints_every_stage_and_writes_nothing(tmp_path):
    cfg_text = (RECIPES[-1].read_text()
                .replace("run_dir: runs/one_gpu", f"run_dir: {tmp_path / 'run'}"))
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(cfg_text)
    out = subprocess.run([sys.executable, "-m", "agent_trainer", "pipeline", "--config",
                          str(cfg_path), "--dry-run"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln and not ln.startswith("#")]
    cfg, stage_plans = plans(cfg_path)
    expected = [c.shell() for p in stage_plans for c in p.commands]
    assert lines == expected and len(lines) == 6
    assert all(shlex.split(ln) for ln in lines)
    assert not (tmp_path / "run").exists()


def test_prepare_writes_agent_files_and_tasks(tmp_path):
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(f"run_dir: {tmp_path / 'run'}\nmodel: m\n"
                        "tasks: {sources: [builtin], include: [row_softmax], repeat: 2}\n"
                        "launch: {recipe: node, gpus_per_node: 4, evaluator_gpus_per_node: 2}\n"
                        "agent: {max_concurrent_episodes: 4}\n")
    cfg = load_config(cfg_path)
    prepare_ppo_stage(cfg, "warmup")
    run = tmp_path / "run" / "warmup"
    agent = load_agent_config(run / "agent_config.json")
    assert agent.env_id == "cuda_gym:CudaKernelSingleTurn-v0" and agent.runner.max_turns == 1
    assert agent.evaluator == "ray" and agent.trajectory_dir == str(run / "episodes")
    rows = [json.loads(x) for x in (run / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(json.loads(r["label"])["task_id"] == "row_softmax"
                                  for r in rows)
    assert "CONFIG_SHA256" in (run / "agent_func.py").read_text()
    prepare_ppo_stage(cfg, "ppo")
    assert load_agent_config(tmp_path / "run" / "ppo" / "agent_config.json").env_id == \
        "cuda_gym:CudaKernel-v0"


def test_config_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("ppo: {actor_lrr: 1e-6}\n")
    assert main(["ppo", "--config", str(bad), "--dry-run"]) == 2
    assert "Unknown option ppo.actor_lrr. Did you mean 'actor_lr'?" in capsys.readouterr().err
    bad.write_text("stages: [ppo, warmup]\n")
    assert main(["pipeline", "--config", str(bad), "--dry-run"]) == 2
    assert "in the order" in capsys.readouterr().err
    bad.write_text("launch: {recipe: one_gpu, gpus_per_node: 2}\n")
    assert main(["pipeline", "--config", str(bad), "--dry-run"]) == 2
    assert "use recipe 'node'" in capsys.readouterr().err


def test_stages_without_warmup_start_from_the_model(tmp_path):
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text("model: base\nstages: [ppo]\n")
    cfg = load_config(cfg_path)
    (command,) = plan_stage(cfg, "ppo", cfg_path).commands
    args = parse_openrlhf_args(command.openrlhf_module, list(command.openrlhf_args))
    assert args.actor.model_name_or_path == "base" and args.critic.model_name_or_path == "base"
