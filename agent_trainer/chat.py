"""Chat-template text for an episode: the first prompt and the glue around environment feedback.

The runner never re-tokenizes what the model generated. It appends, after each action, the text
the chat template would put between that assistant message and the next turn's generation
prompt. That text is found by rendering a conversation whose assistant message is a marker and
taking what follows the marker, so any Hugging Face chat template works (ChatML, Llama, ...).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

MARKER = "AGENTTRAINERACTIONMARKER"


class ChatTokenizer(Protocol):
    """The tokenizer methods the runner uses (a Hugging Face tokenizer has them all)."""

    def apply_chat_template(self, conversation: list[dict], **kwargs: Any) -> Any:
        """Render messages to text (`tokenize=False`)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]:
        """Text to token ids."""

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str:
        """Token ids to text."""


def system_text(base: str, tools: list[dict] | None) -> str:
    """The system message: `base` plus the tool schemas in Hermes style.

    Tools are written into the text (not passed to the template) so that rollouts, the SFT
    set and any chat template render the same system message.
    """
    if not tools:
        return base
    lines = "\n".join(json.dumps(tool, sort_keys=True) for tool in tools)
    return (
        f"{base}\n\n# Tools\n\nYou may call one or more functions. Their signatures are in "
        f"<tools></tools>:\n<tools>\n{lines}\n</tools>\n\nFor each call, write "
        '<tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>.'
    )


class ChatFormat:
    """Renders the first prompt and the feedback glue with one tokenizer's chat template."""

    def __init__(self, tokenizer: ChatTokenizer, feedback_role: str = "user") -> None:
        self.tokenizer = tokenizer
        self.feedback_role = feedback_role

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        """Messages to text with the tokenizer's chat template."""
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        if not isinstance(text, str):
            raise TypeError("apply_chat_template(tokenize=False) must return text")
        return text

    def prompt(self, messages: list[dict]) -> str:
        """The text the model continues from: `messages` plus the generation prompt."""
        return self.render(messages, add_generation_prompt=True)

    def feedback(self, action_text: str, feedback: str) -> str:
        """Text to append after an action so that the next generation sees `feedback`.

        Args:
            action_text: The action as generated, decoded with special tokens kept; when it
                already ends with the template's end-of-turn text, that text is not repeated.
            feedback: The environment's observation.
        """
        messages = [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": MARKER},
            {"role": self.feedback_role, "content": feedback},
        ]
        rendered = self.render(messages, add_generation_prompt=True)
        at = rendered.rfind(MARKER)
        if at < 0:
            raise ValueError("the chat template dropped the assistant message; cannot find glue")
        glue = rendered[at + len(MARKER) :]
        content_at = glue.find(feedback) if feedback else len(glue)
        closing = glue[: max(content_at, 0)]
        # The action usually ends with the end-of-turn token the template also writes.
        for k in range(len(closing), 0, -1):
            if closing[:k].strip() and action_text.endswith(closing[:k]):
                return glue[k:]
        return glue
