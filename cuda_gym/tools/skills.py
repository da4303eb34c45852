"""The read_skill tool: list the skill documents, or return one."""

from __future__ import annotations

import difflib

from cuda_gym.tools.base import Tool, ToolContext, ToolResult, truncate_text


def catalogue(ctx: ToolContext) -> str:
    """One line per skill: name and description."""
    return "\n".join(f"- {s.name}: {s.description}" for s in ctx.skills.values())


def read_skill(ctx: ToolContext, args: dict) -> ToolResult:
    """Return the named skill document, or the list of skills when no name is given."""
    name = (args.get("name") or "").strip()
    if not name:
        return ToolResult(
            "read_skill",
            ok=True,
            text="Skills (read one with read_skill(name)):\n" + catalogue(ctx),
            data={"skills": list(ctx.skills)},
        )
    skill = ctx.skills.get(name)
    if skill is None:
        close = difflib.get_close_matches(name, list(ctx.skills), n=2)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        message = f"Unknown skill {name!r}.{hint} Available: {', '.join(ctx.skills)}"
        return ToolResult("read_skill", ok=False, text=f"Error: {message}", data={"error": message})
    return ToolResult(
        "read_skill",
        ok=True,
        text=truncate_text(skill.body, ctx.max_output_chars),
        data={"skill": skill.name},
    )


TOOLS = [
    Tool(
        "read_skill",
        "Read a skill document (rules, CUDA/C++ optimisation advice, how to read profiles). "
        "Without a name, lists the skills.",
        {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Skill name."}},
            "required": [],
        },
        read_skill,
    )
]
