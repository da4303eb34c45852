"""Skill documents (SKILL.md files with YAML front matter) shipped with cuda_gym."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

SKILLS_DIR = Path(__file__).parent


@dataclass(frozen=True)
class Skill:
    """One skill document.

    Attributes:
        name: Identifier from the front matter (equal to its folder name).
        description: One sentence on what it covers and when to read it.
        text: The whole file, front matter included.
    """

    name: str
    description: str
    text: str

    @property
    def body(self) -> str:
        """The Markdown after the front matter."""
        return _split_front_matter(self.text)[1]


def _split_front_matter(text: str) -> tuple[dict, str]:
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        return {}, text
    meta = yaml.safe_load(text[3:end]) or {}
    body = text[end + 4 :].lstrip("\n")
    return (meta if isinstance(meta, dict) else {}), body


def parse_skill(text: str, fallback_name: str) -> Skill:
    """Parse a SKILL.md text; `name` and `description` come from its front matter."""
    meta, _ = _split_front_matter(text)
    name = str(meta.get("name") or fallback_name)
    return Skill(name=name, description=str(meta.get("description", "")).strip(), text=text)


@functools.lru_cache(maxsize=1)
def builtin_skills() -> tuple[Skill, ...]:
    """The skills shipped in this package, sorted by name."""
    skills = [
        parse_skill(path.read_text(), path.parent.name)
        for path in sorted(SKILLS_DIR.glob("*/SKILL.md"))
    ]
    return tuple(skills)


# A device-only passage of a SKILL.md: `<!-- cuda -->` ... `<!-- /cuda -->` (or cpu).
_DEVICE_BLOCK = re.compile(r"<!-- (cuda|cpu) -->\n(.*?)<!-- /\1 -->\n", re.DOTALL)


def text_for_device(text: str, device: str) -> str:
    """`text` with the passages marked for other devices removed and the markers dropped."""
    return _DEVICE_BLOCK.sub(lambda m: m.group(2) if m.group(1) == device else "", text)


def skills_for_device(device: str) -> list[Skill]:
    """Built-in skills relevant on `device` (the C++ one only on the CPU, the CUDA one on GPUs).

    Passages marked for the other device (see `text_for_device`) are left out.
    """
    skip = {"cuda": {"cpp-cpu"}, "cpu": {"cuda-hopper"}}[device]
    return [
        replace(s, text=text_for_device(s.text, device))
        for s in builtin_skills()
        if s.name not in skip
    ]
