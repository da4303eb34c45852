"""RFT rows as the policy saw them: stored token ids and action spans, never re-rendered.

Re-rendering a trajectory's messages through a chat template (OpenRLHF's multi-turn SFT set
does) can differ from what was sampled: Qwen3's template drops the `<think>` text of earlier
assistant turns, and its masks follow the rendered text, not the sampled tokens. Here each row
holds the episode's `token_ids` (prompt, actions, feedback, in order) and its `action_ranges`,
so the loss falls on the model's own tokens whatever the template.

`TokenSFTDataset` has OpenRLHF 0.11's `SFTDataset` interface; `python -m
agent_trainer.openrlhf_main openrlhf.cli.train_sft ...` puts it in `openrlhf.datasets` before
OpenRLHF's SFT CLI imports it (the rft stage's command does this).
"""

from __future__ import annotations

from typing import Any


def token_row(episode: dict, max_len: int) -> dict | None:
    """The SFT row of a stored episode: ids cut to `max_len`, spans clipped; None if no action.

    Args:
        episode: A trajectory line (`Episode.to_json()`): `token_ids` and `action_ranges`.
        max_len: Longest row in tokens.
    """
    ids = [int(t) for t in episode["token_ids"]][:max_len]
    ranges = []
    for start, end in episode["action_ranges"]:
        start, end = int(start), min(int(end), len(ids))
        if start < 1 or end <= start:  # an action needs a token before it to be predicted
            continue
        ranges.append([start, end])
    return {"input_ids": ids, "action_ranges": ranges} if ranges else None


def loss_mask_of(length: int, action_ranges: list) -> list[float]:
    """OpenRLHF's loss mask: position j is 1 when token j+1 is an action token (of `length`)."""
    mask = [0.0] * length
    for start, end in action_ranges:
        for j in range(max(start - 1, 0), min(end, length) - 1):
            mask[j] = 1.0
    return mask


class TokenSFTDataset:
    """OpenRLHF's SFTDataset over token rows (`input_ids`, `action_ranges`).

    Args follow OpenRLHF 0.11.2's `SFTDataset(dataset, tokenizer, max_length, strategy, ...)`;
    the template, key and multi-turn options do not apply (nothing is rendered).
    """

    def __init__(self, dataset: Any, tokenizer: Any, max_length: int, strategy: Any = None,
                 input_template: Any = None, pretrain_mode: bool = False,
                 num_processors: int = 8, multiturn: bool = False) -> None:
        if pretrain_mode:
            raise ValueError("token rows are for RFT; pretrain mode is not supported")
        self.tokenizer = tokenizer
        self.strategy = strategy
        self.max_length = max_length
        self.rows = []
        for n, row in enumerate(dataset):
            if "input_ids" not in row or "action_ranges" not in row:
                raise ValueError(f"row {n} has no input_ids/action_ranges: not an RFT token row "
                                 "(write it with agent-trainer rft --build-only)")
            ids = list(row["input_ids"])[:max_length]
            self.rows.append((ids, loss_mask_of(len(ids), row["action_ranges"])))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, idx: int):
        """(input_ids, attention_mask, loss_mask), each of shape (1, length)."""
        import torch

        ids, mask = self.rows[idx]
        input_ids = torch.tensor([ids], dtype=torch.long)
        return input_ids, torch.ones_like(input_ids), torch.tensor([mask], dtype=torch.float32)

    def collate_fn(self, item_list):
        """Right-pad a micro batch (pad id for inputs, 0 for the masks)."""
        import torch

        width = max(item[0].shape[1] for item in item_list)
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else self.tokenizer.eos_token_id

        def padded(tensors, value):
            return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)
                              for t in tensors])

        ids, attention, loss = zip(*item_list)
        return padded(ids, pad), padded(attention, 0), padded(loss, 0)


def install() -> None:
    """Make `openrlhf.datasets.SFTDataset` the token dataset (before train_sft is imported)."""
    import openrlhf.datasets

    openrlhf.datasets.SFTDataset = TokenSFTDataset
