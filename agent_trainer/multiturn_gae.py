"""GAE over the agent's own tokens: the patch our launcher applies to OpenRLHF 0.11's PPO.

OpenRLHF's `RemoteExperienceMaker.get_advantages_and_returns` zeroes values and rewards on
environment-feedback tokens (action mask 0) but still steps the recursion through them, so each
feedback token multiplies the advantage flowing back by gamma * lambda and replaces the next
value by 0. With lambda = 0.95 and 500 feedback tokens after turn 1, the advantage of turn 1's
last token becomes about -V(that token): the later turns' value and reward never reach it, and
value targets at turn starts are pulled toward 0.

`masked_gae` runs the recursion over action tokens only: a feedback token neither decays the
running advantage nor resets the next value; it gets advantage 0 (and is not trained on). On a
sequence without feedback tokens it equals OpenRLHF's result (trailing padding included).

How it is applied: `python -m agent_trainer.openrlhf_main openrlhf.cli.train_ppo_ray ...`
calls `install()` in the driver and registers `install` as Ray's `worker_process_setup_hook`,
so it also runs in the PPOTrainer actor, where experiences are made.
"""

from __future__ import annotations

import inspect
import logging

logger = logging.getLogger(__name__)

SETUP_HOOK = "agent_trainer.multiturn_gae.install"
"""Ray `worker_process_setup_hook` value that patches every worker of a run."""

EXPECTED_PARAMS = ("self", "values", "rewards", "action_mask", "gamma", "lambd")


def masked_gae(values, rewards, action_mask, gamma: float, lambd: float):
    """Advantages and returns over the tokens where `action_mask` is 1.

    Args:
        values: Critic values, (batch, response_len).
        rewards: Per-token rewards (terminal reward, KL terms), (batch, response_len).
        action_mask: 1 on the model's action tokens, 0 on feedback and padding; None = all 1.
        gamma: Discount per action token.
        lambd: GAE lambda per action token.

    Returns:
        (advantages, returns), both (batch, response_len); 0 advantage off the mask.
    """
    import torch

    if action_mask is None:
        mask = torch.ones_like(values)
    else:
        mask = action_mask.to(values.dtype)
    values = values * mask
    rewards = rewards * mask
    batch, length = rewards.shape
    next_value = values.new_zeros(batch)
    running = values.new_zeros(batch)
    advantages = values.new_zeros(batch, length)
    for t in reversed(range(length)):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        gae = delta + gamma * lambd * running
        # Off the mask (feedback, padding): carry the running advantage and next value over.
        running = m * gae + (1 - m) * running
        next_value = m * values[:, t] + (1 - m) * next_value
        advantages[:, t] = m * gae
    returns = advantages + values
    return advantages.detach(), returns


def _patched(self, values, rewards, action_mask, gamma, lambd):
    """OpenRLHF's `get_advantages_and_returns`, computed over action tokens (masked_gae)."""
    return masked_gae(values, rewards, action_mask, gamma, lambd)


def install() -> None:
    """Replace OpenRLHF's GAE method with `masked_gae`; idempotent.

    Raises:
        RuntimeError: The installed OpenRLHF's method has another signature (a version whose
            GAE this patch was not written for).
    """
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    current = RemoteExperienceMaker.get_advantages_and_returns
    if current is _patched:
        return
    params = tuple(inspect.signature(current).parameters)
    if params != EXPECTED_PARAMS:
        raise RuntimeError(
            f"OpenRLHF's get_advantages_and_returns takes {params}, not {EXPECTED_PARAMS}; "
            "agent_trainer's multi-turn GAE patch is written for openrlhf==0.11.2"
        )
    RemoteExperienceMaker.get_advantages_and_returns = _patched
    logger.info("OpenRLHF GAE patched: advantages over action tokens only (multi-turn)")
