"""Sequence length against the model's context: rope scaling and ring attention, checked early.

Qwen3's native context is 40,960 tokens (`max_position_embeddings`); the node and multi-node
recipes run 65,536 and 131,072. Neither OpenRLHF nor vLLM has a flag for rope scaling: both read
it from the model's `config.json`, so a run that needs it gets a derived model directory,
<run_dir>/base_model, whose files link to the model's and whose config.json adds
`rope_scaling` (YaRN as Qwen documents it). `check_context` runs at --dry-run with the model's
config when it is available without a download (a local directory or the Hugging Face cache).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from agent_trainer.layout import base_model_dir, max_len_for
from agent_trainer.pipeline_config import PPO_STAGES, PipelineConfig, check_rope_scaling

logger = logging.getLogger(__name__)

RING_ATTENTION_ABOVE = 32768
"""Training sequences longer than this get a note unless the stage uses ring attention."""


def longest_sequence(cfg: PipelineConfig) -> int:
    """The longest sequence any stage of the run trains on or generates."""
    lengths = [cfg.agent.runner.max_length]
    lengths += [max_len_for(cfg, s) for s in cfg.stages if s in (*PPO_STAGES, "rft")]
    return max(lengths)


def model_config(model: str) -> dict | None:
    """The model's config.json from a local directory or the HF cache (never the network).

    Returns None when it is not at hand; `huggingface-cli download MODEL config.json` puts it
    in the cache.
    """
    path = Path(model) / "config.json"
    if not path.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return None
        cached = try_to_load_from_cache(model, "config.json")
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    return json.loads(path.read_text())


def scaled_context(rope_scaling: dict | None, native: int) -> int:
    """Positions a rope-scaled model covers: factor x original context (native without)."""
    if not rope_scaling:
        return native
    original = int(rope_scaling.get("original_max_position_embeddings") or native)
    return int(float(rope_scaling.get("factor", 1.0)) * original)


def check_context(cfg: PipelineConfig, echo: Callable[[str], None] = print) -> None:
    """Check that every sequence fits the model's (scaled) context; note long stages.

    Raises:
        ValueError: Sequences exceed the model's context and `rope_scaling` does not cover
            them (the message gives a setting that does).
    """
    check_rope_scaling(cfg.rope_scaling)
    needed = longest_sequence(cfg)
    for stage in cfg.stages:
        if stage in (*PPO_STAGES, "rft"):
            own = getattr(cfg, stage.replace("-", "_"))
            length = max_len_for(cfg, stage)
            if length > RING_ATTENTION_ABOVE and own.ring_attn_size == 1:
                echo(f"# note: stage {stage} trains on {length}-token sequences on one GPU "
                     "each; set ring_attn_size (and packing_samples) if memory runs out")
    config = model_config(cfg.model)
    if config is None:
        echo(f"# context: {cfg.model}'s config.json is not in the HF cache (fetch it with "
             f"`huggingface-cli download {cfg.model} config.json`): {needed} tokens not "
             "checked against its context (a run with rope_scaling checks its base_model)")
        return
    native = int(config.get("max_position_embeddings") or 0)
    own_scaling = config.get("rope_scaling")
    covered = scaled_context(cfg.rope_scaling or own_scaling, native)
    if needed > covered:
        factor = -(-needed // 32768) if native >= 32768 else -(-needed // native)
        original = 32768 if native >= 32768 else native
        raise ValueError(
            f"sequences of up to {needed} tokens exceed {cfg.model}'s context of {covered} "
            f"(max_position_embeddings {native}); set rope_scaling: {{rope_type: yarn, "
            f"factor: {float(factor)}, original_max_position_embeddings: {original}}}"
        )
    how = f"rope scaling x{cfg.rope_scaling['factor']}" if cfg.rope_scaling else "native"
    echo(f"# context: up to {needed} tokens within {covered} ({how})")


def prepare_base_model(cfg: PipelineConfig) -> Path:
    """Make <run_dir>/base_model: links to the model's files, config.json with rope_scaling.

    A hub id is downloaded first (huggingface_hub). Returns the directory.
    """
    source = Path(cfg.model)
    if not source.is_dir():
        from huggingface_hub import snapshot_download

        source = Path(snapshot_download(cfg.model))
    out = base_model_dir(cfg)
    if out == source:
        raise ValueError("model must not be the run's own base_model directory")
    out.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        link = out / item.name
        if item.name != "config.json" and not link.exists():
            link.symlink_to(item.resolve())
    config = json.loads((source / "config.json").read_text())
    config["rope_scaling"] = dict(cfg.rope_scaling)  # as Qwen documents: only this key
    (out / "config.json").write_text(json.dumps(config, indent=2))
    logger.info("rope-scaled base model at %s (%s)", out, cfg.rope_scaling)
    return out
