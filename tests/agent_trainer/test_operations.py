"""Operations: context length vs the model's config, logging flags, resume, finished stages."""

import json
import sys

import pytest

from agent_trainer import stages
from agent_trainer.context import check_context, prepare_base_model
from agent_trainer.launch import WANDB_KEY
from agent_trainer.openrlhf_args import parse_openrlhf_args
from agent_trainer.pipeline_config import load_config
from agent_trainer.stages import plan_stage, run_stage


def config(tmp_path, text):
    path = tmp_path / "cfg.yaml"
    path.write_text(f"run_dir: {tmp_path / 'run'}\ntasks: {{sources: [builtin], "
                    "validation_sources: []}\n" + text)
    return load_config(path), path


def fake_qwen3(tmp_path):
    """A model directory with Qwen3-8B's context settings."""
    model = tmp_path / "qwen3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3",
                                                   "max_position_embeddings": 40960}))
    (model / "model.safetensors").write_text("weights")
    return model


def test_sequences_past_the_native_context_need_rope_scaling(tmp_path):
    model = fake_qwen3(tmp_path)
    runner = "agent: {runner: {max_length: 65536}}\n"
    cfg, _ = config(tmp_path, f"model: {model}\n" + runner)
    with pytest.raises(ValueError, match=r"65536 tokens exceed .*context of 40960 .*set "
                                         r"rope_scaling: \{rope_type: yarn, factor: 2.0, "
                                         r"original_max_position_embeddings: 32768\}"):
        check_context(cfg, echo=lambda _: None)
    rope = "rope_scaling: {rope_type: yarn, factor: 2.0, original_max_position_embeddings: 32768}\n"
    cfg, _ = config(tmp_path, f"model: {model}\n" + runner + rope)
    lines = []
    check_context(cfg, echo=lines.append)
    assert "# context: up to 65536 tokens within 65536 (rope scaling x2.0)" in lines
    assert any("trains on 65536-token sequences on one GPU" in ln for ln in lines)
    base = prepare_base_model(cfg)
    assert json.loads((base / "config.json").read_text())["rope_scaling"]["factor"] == 2.0
    assert (base / "model.safetensors").resolve() == (model / "model.safetensors").resolve()
    (command,) = plan_stage(cfg, "warmup", tmp_path / "cfg.yaml").commands
    args = parse_openrlhf_args(command.openrlhf_module, list(command.openrlhf_args))
    assert args.actor.model_name_or_path == str(base)
    with pytest.raises(ValueError, match="rope_scaling.factor must be greater than 1"):
        config(tmp_path, "rope_scaling: {rope_type: yarn, factor: 1, "
                         "original_max_position_embeddings: 32768}\n")


def test_logging_resume_and_the_interpreter(tmp_path, monkeypatch):
    cfg, path = config(tmp_path, "logging: {wandb_project: cuda-agent, wandb_group: g}\n"
                                 "stages: [ppo]\n")
    (command,) = plan_stage(cfg, "ppo", path).commands
    assert command.argv[0] == sys.executable
    args = parse_openrlhf_args(command.openrlhf_module, list(command.openrlhf_args))
    assert args.logger.wandb.key == WANDB_KEY and args.logger.wandb.project == "cuda-agent"
    assert args.logger.tensorboard_dir.endswith("ppo/tensorboard")
    assert args.ckpt.load_enable and args.ckpt.save_steps == 10
    assert args.eval.dataset is None  # no validation tasks configured
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    with pytest.raises(ValueError, match="export WANDB_API_KEY"):
        command.runnable_argv()
    monkeypatch.setenv("WANDB_API_KEY", "k123")
    assert "k123" in command.runnable_argv() and "k123" not in command.shell()


def test_a_finished_stage_is_skipped_until_its_commands_change(tmp_path, monkeypatch):
    runs = []
    monkeypatch.setattr(stages, "run_collect", lambda cfg: runs.append(cfg.collect.episodes))
    cfg, path = config(tmp_path, "stages: [collect]\ncollect: {episodes: 3}\n")
    lines = []
    assert run_stage(cfg, "collect", path, echo=lines.append) == 0
    assert run_stage(cfg, "collect", path, echo=lines.append) == 0
    assert runs == [3] and "skipped (--force runs it again)" in lines[-1]
    assert run_stage(cfg, "collect", path, force=True, echo=lines.append) == 0
    assert runs == [3, 3]
    other, other_path = config(tmp_path, "stages: [collect]\ncollect: {episodes: 3}\n"
                                         "launch: {python: /opt/py/bin/python}\n")
    assert run_stage(other, "collect", other_path, echo=lines.append) == 0
    assert runs == [3, 3, 3]  # other commands: run again
