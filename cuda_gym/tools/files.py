"""File tools: list_files, read_file, write_file, edit_file (exact replacements)."""

from __future__ import annotations

from cuda_gym.tools.base import Tool, ToolContext, ToolResult, truncate_text
from cuda_gym.workspace import MAX_FILE_BYTES, MAX_KERNEL_FILES, WorkspacePathError


def _error(name: str, message: str) -> ToolResult:
    return ToolResult(name, ok=False, text=f"Error: {message}", data={"error": message})


def list_files(ctx: ToolContext, args: dict) -> ToolResult:
    """List every workspace file with its size and whether it is writable."""
    entries = ctx.workspace.list_files()
    lines = [
        f"{e.path}  ({e.size_bytes} bytes{'' if e.writable else ', read-only'})" for e in entries
    ]
    return ToolResult(
        "list_files",
        ok=True,
        text="\n".join(lines) or "(empty workspace)",
        data={"files": [e.path for e in entries]},
    )


def read_file(ctx: ToolContext, args: dict) -> ToolResult:
    """Return a file's lines, numbered, optionally a range."""
    try:
        path = ctx.workspace.resolve(args["path"])
    except WorkspacePathError as exc:
        return _error("read_file", str(exc))
    if not path.is_file():
        return _error("read_file", f"{args['path']!r} does not exist (use list_files)")
    text = path.read_bytes()[: 4 * MAX_FILE_BYTES].decode("utf-8", errors="replace")
    lines = text.splitlines()
    start = max(1, args.get("start_line", 1))
    end = min(len(lines), args.get("end_line", len(lines)))
    if lines and start > len(lines):
        return _error("read_file", f"start_line {start} is past the end ({len(lines)} lines)")
    width = len(str(max(end, 1)))
    rel = ctx.workspace.relative(path)
    # Whole lines only: stop before the line that would pass the output limit and say how to
    # read the rest (room is kept for the header and that hint).
    budget = ctx.max_output_chars - 200 - len(rel)
    shown: list[str] = []
    used = 0
    last = start - 1
    for i in range(start, end + 1):
        line = f"{i:>{width}}  {lines[i - 1]}"
        if shown and used + len(line) + 1 > budget:
            break
        shown.append(line if len(line) <= budget else truncate_text(line, budget))
        used += len(shown[-1]) + 1
        last = i
    header = f"{rel} (lines {start}-{last} of {len(lines)}):"
    text = "\n".join([header, *shown])
    if last < end:
        text += (
            f"\n[lines {last + 1}-{end} not shown: the output limit is {ctx.max_output_chars} "
            f'characters; read on with read_file(path="{rel}", start_line={last + 1})]'
        )
    return ToolResult(
        "read_file",
        ok=True,
        text=text,
        data={"path": rel, "lines": len(lines), "last_line_shown": last},
    )


def _check_content(ctx: ToolContext, content: str) -> str | None:
    if "\x00" in content:
        return "content contains NUL bytes; source files must be text"
    if len(content.encode("utf-8", errors="surrogatepass")) > MAX_FILE_BYTES:
        return f"content is larger than the {MAX_FILE_BYTES // 1024} KiB limit per file"
    return None


def _write(path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8", errors="surrogateescape")


def write_file(ctx: ToolContext, args: dict) -> ToolResult:
    """Create or overwrite model_new.py or a file under kernels/."""
    try:
        path = ctx.workspace.resolve(args["path"], for_write=True)
    except WorkspacePathError as exc:
        return _error("write_file", str(exc))
    content = args["content"]
    problem = _check_content(ctx, content)
    if problem:
        return _error("write_file", problem)
    if not path.exists() and ctx.workspace.count_kernel_files() >= MAX_KERNEL_FILES:
        return _error("write_file", f"kernels/ already holds {MAX_KERNEL_FILES} files")
    if path.is_dir():
        return _error("write_file", f"{args['path']!r} is a directory")
    existed = path.exists()
    _write(path, content)
    rel = ctx.workspace.relative(path)
    n_lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    verb = "Overwrote" if existed else "Created"
    return ToolResult(
        "write_file",
        ok=True,
        text=f"{verb} {rel} ({n_lines} lines, {len(content)} characters).",
        data={"path": rel, "bytes": len(content)},
    )


def edit_file(ctx: ToolContext, args: dict) -> ToolResult:
    """Apply exact string replacements to one file: all of them, or none."""
    try:
        path = ctx.workspace.resolve(args["path"], for_write=True)
    except WorkspacePathError as exc:
        return _error("edit_file", str(exc))
    if not path.is_file():
        return _error("edit_file", f"{args['path']!r} does not exist; create it with write_file")
    edits = list(args.get("edits") or [])
    if "old" in args or "new" in args:
        edits.insert(0, {"old": args.get("old"), "new": args.get("new", "")})
    if not edits:
        return _error("edit_file", 'give edits=[{"old": ..., "new": ...}] (or old and new)')
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    for i, edit in enumerate(edits, 1):
        if not isinstance(edit, dict):
            return _error("edit_file", f"edit {i} must be an object with 'old' and 'new'")
        old = edit.get("old", edit.get("old_string"))
        new = edit.get("new", edit.get("new_string", ""))
        if not isinstance(old, str) or not old:
            return _error("edit_file", f"edit {i}: 'old' must be a non-empty string")
        if not isinstance(new, str):
            return _error("edit_file", f"edit {i}: 'new' must be a string")
        count = text.count(old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            return _error(
                "edit_file",
                f"edit {i}: the 'old' text {where} in {args['path']} (it must match exactly once; "
                "no edit was applied)",
            )
        text = text.replace(old, new, 1)
    problem = _check_content(ctx, text)
    if problem:
        return _error("edit_file", problem)
    _write(path, text)
    rel = ctx.workspace.relative(path)
    return ToolResult(
        "edit_file",
        ok=True,
        text=f"Applied {len(edits)} edit(s) to {rel}; it now has {text.count(chr(10)) + 1} lines.",
        data={"path": rel, "edits": len(edits)},
    )


PATH = {"type": "string", "description": "Path relative to the workspace root."}
TOOLS = [
    Tool(
        "list_files",
        "List the workspace files with their sizes; read-only files are marked.",
        {"type": "object", "properties": {}, "required": []},
        list_files,
    ),
    Tool(
        "read_file",
        "Read a workspace file, with line numbers; optionally only lines start_line..end_line.",
        {
            "type": "object",
            "properties": {
                "path": PATH,
                "start_line": {"type": "integer", "description": "First line (1-based)."},
                "end_line": {"type": "integer", "description": "Last line (inclusive)."},
            },
            "required": ["path"],
        },
        read_file,
    ),
    Tool(
        "write_file",
        "Create or overwrite model_new.py or a file under kernels/ with the given content.",
        {
            "type": "object",
            "properties": {
                "path": PATH,
                "content": {"type": "string", "description": "The complete new file content."},
            },
            "required": ["path", "content"],
        },
        write_file,
    ),
    Tool(
        "edit_file",
        "Replace exact text in model_new.py or a kernels/ file. Each 'old' must occur exactly "
        "once; edits apply in order, all or none.",
        {
            "type": "object",
            "properties": {
                "path": PATH,
                "edits": {
                    "type": "array",
                    "description": "Replacements to apply in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "old": {"type": "string", "description": "Exact text to replace."},
                            "new": {"type": "string", "description": "Replacement text."},
                        },
                        "required": ["old", "new"],
                    },
                },
                "old": {"type": "string", "description": "Single-edit form: text to replace."},
                "new": {"type": "string", "description": "Single-edit form: replacement."},
            },
            "required": ["path"],
        },
        edit_file,
    ),
]
