"""A tiny byte-level tokenizer with a ChatML template and a randomly initialised causal LM.

Both are built locally from code, with no download, for CPU tests and GPU smoke runs:

    python -m agent_trainer tiny-model --out /tmp/tiny-lm     # then use it as a model path
"""

from __future__ import annotations

from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_tokenizer():
    """A byte-level BPE tokenizer (256 bytes + 3 specials) with a ChatML chat template.

    Every text round-trips exactly; `<|im_end|>` is the end-of-sequence token.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def build_tiny_model(tokenizer, hidden_size: int = 64, layers: int = 2, seed: int = 0):
    """A randomly initialised Qwen2-architecture causal LM sized for `tokenizer`."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=65536,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def save_tiny_model(out: str | Path, hidden_size: int = 64, layers: int = 2) -> Path:
    """Write the tiny tokenizer and model to `out` (a model directory for any HF loader)."""
    out = Path(out)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, hidden_size, layers)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    return out
