"""Suites of solution cases, each judged and compared with the verdict it expects.

The exploit suite (benchmarks/exploits) and the false-rejection corpus
(benchmarks/false_rejections) are suites: a folder with cases/, and as the cases need them
tasks/ (task files), kernels_<device>/, kernels_common/ and kernels_<device>_python/ (shared kernel
sources). A case is a
KernelBench-style solution file whose docstring opens with the pattern's name (one line ending
in "."), 2-4 lines on it, a blank line and these fields:

    Task: a built-in task id, or a task file of the suite (tasks/NAME.py)
    Devices: the devices it runs on (default: cpu, cuda)
    Kernels: shared (judged with the suite's kernel sources as kernels/), python (those and
        kernels_<device>_python/, whose kernels reach Python's objects and which the static
        scan refuses) or none; default shared when the case imports kernels_ext
    Timing: yes (judged with timing) or no (the default)
    Expect: accept, or reject R: R a violation kind, static:<rule> for a rule of
        static_checks.RULES, or how the run failed (incorrect, build, crash, timeout, oom);
        `reject R1 or R2` where either reason may come first (two rules that both apply)
    Runtime: (optional) what the case owes the judge's later layers when its static checks
        are skipped, in Expect's form: a case the static rules stop keeps a check of the
        runtime layer behind them (`--behind-static` judges these cases that way)

A case states only what is its own. The model_new.py judged for it (`Suite.solution_text`)
spells out every field and, when the case's ModelNew derives from nn.Module and has no
__init__, gets the task's standard one from the suite's `inits` (with `import torch` when that
uses torch).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import importlib.metadata
import json
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

DEVICES = ("cpu", "cuda")
KERNELS = ("shared", "python", "none")
# How a run that broke no rule can fail, besides the violation kinds an Expect line may name.
FAILURES = ("incorrect", "build", "crash", "timeout", "oom")
# Observed when the judge gave no verdict (an infrastructure error).
JUDGE_ERROR = "judge_error"
ERROR_EXCERPT_CHARS = 400
FIELDS = ("Task", "Devices", "Kernels", "Timing", "Expect", "Runtime")
_FIELD_LINE = re.compile(r"^(Task|Devices|Kernels|Timing|Expect|Runtime): (.+)$")
_IMPORTS_KERNELS = re.compile(r"^import kernels_ext$", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    """One solution file of a suite and what its docstring says about it.

    Attributes:
        name: File stem, e.g. "fallback_torch_function".
        path: The case file.
        pattern: The docstring's first line without its final period.
        task: Built-in task id, or a task file relative to the suite's folder.
        devices: Devices the case runs on ("cpu", "cuda").
        kernels: "shared" (judged with the suite's kernel sources as kernels/), "python"
            (with kernels_<device>_python/ too) or "none".
        timing: Whether the case is judged with timing (only then does it show).
        expect: "accept" or "reject <reason>".
        runtime: What it owes the layers behind the static checks, in expect's form; None
            when it has no Runtime field.
    """

    name: str
    path: Path
    pattern: str
    task: str
    devices: tuple[str, ...]
    kernels: str
    timing: bool
    expect: str
    runtime: str | None = None

    @property
    def shared_kernels(self) -> bool:
        """Whether it is judged with the suite's kernel sources as kernels/."""
        return self.kernels != "none"

    @property
    def expected(self) -> str:
        """The expected observation: "accept" or the reason after "reject "."""
        return self.expect.removeprefix("reject ").strip()

    @property
    def expected_reasons(self) -> tuple[str, ...]:
        """The observations that match: "accept", or each reason of "reject R1 or R2"."""
        return tuple(r.strip() for r in self.expected.split(" or "))

    def behind_static(self) -> Case:
        """The case as judged with the static checks skipped: its Runtime as its Expect.

        Raises:
            ValueError: It has no Runtime field.
        """
        if self.runtime is None:
            raise ValueError(f"{self.name} has no Runtime field")
        return dataclasses.replace(self, expect=self.runtime, runtime=None)

    @property
    def legit(self) -> bool:
        """A legitimate solution, which the judge must accept."""
        return self.expect == "accept"

    def field_lines(self) -> list[str]:
        """Every docstring field, defaults written out, in FIELDS order."""
        return [
            f"Task: {self.task}",
            f"Devices: {', '.join(self.devices)}",
            f"Kernels: {self.kernels}",
            f"Timing: {'yes' if self.timing else 'no'}",
            f"Expect: {self.expect}",
            *([f"Runtime: {self.runtime}"] if self.runtime else []),
        ]


def _docstring_fields(text: str) -> tuple[str, dict[str, str], tuple[int, int]]:
    """The docstring's first line, its fields, and the (start, end) line indices of the fields.

    Raises:
        ValueError: No docstring, or its fields are not one block at its end.
    """
    tree = ast.parse(text)
    doc = ast.get_docstring(tree, clean=True)
    if not doc:
        raise ValueError("no module docstring")
    lines = text.splitlines()
    end = tree.body[0].end_lineno - 1  # the line closing the docstring
    found = [i for i in range(end) if _FIELD_LINE.match(lines[i])]
    if not found or found != list(range(found[0], end)):
        raise ValueError("the fields must close the docstring, one per line")
    fields = dict(_FIELD_LINE.match(lines[i]).groups() for i in found)
    order = [_FIELD_LINE.match(lines[i]).group(1) for i in found]
    if len(set(order)) != len(order) or order != sorted(order, key=FIELDS.index):
        raise ValueError(f"fields must appear once each, in the order {FIELDS}")
    return doc.splitlines()[0], fields, (found[0], end)


def parse_case(path: Path) -> Case:
    """Read a case file's docstring.

    Raises:
        ValueError: The docstring is missing a field or has a malformed one.
    """
    text = path.read_text()
    try:
        first, fields, _ = _docstring_fields(text)
    except ValueError as exc:
        raise ValueError(f"{path.name}: {exc}") from None
    if not first.endswith(".") or len(first) < 2:
        raise ValueError(f"{path.name}: the first line must be the pattern name ending in '.'")
    missing = [f for f in ("Task", "Expect") if f not in fields]
    if missing:
        raise ValueError(f"{path.name}: missing docstring fields {missing}")
    devices = tuple(d.strip() for d in fields.get("Devices", ", ".join(DEVICES)).split(","))
    if not devices or set(devices) - set(DEVICES):
        raise ValueError(f"{path.name}: Devices must list {DEVICES}, got {fields['Devices']!r}")
    kernels = fields.get("Kernels", "shared" if _IMPORTS_KERNELS.search(text) else "none")
    timing = fields.get("Timing", "no")
    if kernels not in KERNELS or timing not in ("yes", "no"):
        raise ValueError(f"{path.name}: Kernels must be shared|python|none and Timing yes|no")
    expect = fields["Expect"].strip()
    runtime = fields["Runtime"].strip() if "Runtime" in fields else None
    for stated in (expect, runtime):
        if stated is not None and not is_valid_expectation(stated):
            raise ValueError(f"{path.name}: unknown expectation {stated!r}")
    return Case(
        name=path.stem,
        path=path,
        pattern=first[:-1],
        task=fields["Task"].strip(),
        devices=devices,
        kernels=kernels,
        timing=timing == "yes",
        expect=expect,
        runtime=runtime,
    )


def is_valid_expectation(expect: str) -> bool:
    """`accept`, or `reject R` with R a violation kind, `static:<rule>` or one of FAILURES."""
    from cuda_gym.judge.static_checks import RULES
    from cuda_gym.judge.verdict import ViolationKind

    if expect == "accept":
        return True
    reasons = expect.removeprefix("reject ")
    if reasons == expect:
        return False
    kinds = {k.value for k in ViolationKind} - {ViolationKind.STATIC.value}
    for reason in reasons.split(" or "):
        reason = reason.strip()
        if reason.startswith(f"{ViolationKind.STATIC}:"):
            if reason.split(":", 1)[1] not in RULES:
                return False
        elif reason not in kinds and reason not in FAILURES:
            return False
    return True


def observed_reason(verdict: dict) -> str:
    """The reason a verdict shows: accept, the first violation's code, or how the run failed."""
    from cuda_gym.judge.verdict import violation_code

    if verdict.get("verdict") == "accept":
        return "accept"
    violations = verdict.get("violations") or []
    if violations:
        return violation_code(violations[0]) or "unknown_violation"
    if not verdict.get("compiled"):
        return "build"
    error = (verdict.get("error") or "").lower()
    if "timed out" in error:
        return "timeout"
    if "out of memory" in error:
        return "oom"
    if any(s in error for s in ("killed by", "crashed", "exit status")):
        return "crash"
    return "incorrect"


_JUDGES = threading.local()


def _judge(device: str, code_rules: str):
    """This thread's Judge for `device` (the judge's caches are shared through the disk)."""
    from cuda_gym.judge import Judge, JudgeConfig

    judges = _JUDGES.__dict__.setdefault("by_config", {})
    if (device, code_rules) not in judges:
        judges[device, code_rules] = Judge(JudgeConfig(device=device, code_rules=code_rules))
    return judges[device, code_rules]


@dataclass(frozen=True)
class Suite:
    """A folder of cases and what the cases leave to it.

    Attributes:
        name: The suite's name in its report and summary line, e.g. "exploits".
        root: Its folder: cases/, and tasks/, kernels_<device>/, kernels_common/ as needed.
        inits: Per task, the standard `ModelNew.__init__` of its cases, as source lines
            indented for the class body. Parameters are named as in the task's Model, so the
            judge copies the reference's weights into them.
        accept_only: Every case must expect accept (a corpus of honest solutions).
        code_rules: The judge's static rule set for model_new.py (`JudgeConfig.code_rules`).
    """

    name: str
    root: Path
    inits: dict[str, str] = field(default_factory=dict)
    accept_only: bool = False
    code_rules: str = "env"

    @property
    def cases_dir(self) -> Path:
        """The folder of case files."""
        return self.root / "cases"

    def task_ref(self, case: Case) -> str:
        """The case's task as `load_task` takes it: an id, or a task file's full path."""
        return str(self.root / case.task) if case.task.endswith(".py") else case.task

    def kernel_dirs(self, device: str, python: bool = False) -> list[Path]:
        """The folders whose sources make up the shared kernels/ on `device`.

        python: kernels_<device>_python/ too (the kernels that reach Python's objects).
        """
        dirs = [self.root / f"kernels_{device}", self.root / "kernels_common"]
        if python:
            dirs.append(self.root / f"kernels_{device}_python")
        return [d for d in dirs if d.is_dir()]

    def load_cases(
        self,
        device: str | None = None,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> list[Case]:
        """Every case (sorted by name), or those for `device`, named in `only`, not in `exclude`.

        Raises:
            ValueError: A case is malformed (or not expecting accept in an accept-only suite),
                names a missing task file, or a name in `only` or `exclude` matches no case.
        """
        cases = [parse_case(p) for p in sorted(self.cases_dir.glob("*.py"))]
        for case in cases:
            if self.accept_only and not case.legit:
                raise ValueError(f"{case.name}: every case here must expect accept")
            if case.task.endswith(".py") and not (self.root / case.task).is_file():
                raise ValueError(f"{case.name}: task file {case.task} not found")
        unknown = (set(only or ()) | set(exclude or ())) - {c.name for c in cases}
        if unknown:
            raise ValueError(f"unknown case(s): {', '.join(sorted(unknown))}")
        if only:
            cases = [c for c in cases if c.name in set(only)]
        if exclude:
            cases = [c for c in cases if c.name not in set(exclude)]
        if device is not None:
            cases = [c for c in cases if device in c.devices]
        return cases

    def solution_text(self, case: Case) -> str:
        """The model_new.py judged for `case`: its file with every field and its task's init."""
        text = case.path.read_text()
        lines = text.splitlines(keepends=True)
        _, _, (start, end) = _docstring_fields(text)
        lines[start:end] = [line + "\n" for line in case.field_lines()]
        init = self.inits.get(case.task)
        model = next(
            (
                node
                for node in ast.parse("".join(lines)).body
                if isinstance(node, ast.ClassDef) and node.name == "ModelNew"
            ),
            None,
        )
        if init is None or model is None or [ast.unparse(b) for b in model.bases] != ["nn.Module"]:
            return "".join(lines)
        if any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in model.body):
            return "".join(lines)
        at = model.lineno  # just below the one-line `class ModelNew(...):`
        lines[at:at] = [*init.splitlines(keepends=True), "\n"]
        if "torch." in init and "import torch\n" not in lines:
            lines.insert(lines.index("import torch.nn as nn\n"), "import torch\n")
        return "".join(lines)

    def write_solution(self, case: Case, device: str, dest: Path) -> Path:
        """Write the case's model_new.py (and shared kernels/) into `dest`; return `dest`."""
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "model_new.py").write_text(self.solution_text(case))
        if case.shared_kernels:
            kernels = dest / "kernels"
            kernels.mkdir()
            for folder in self.kernel_dirs(device, python=case.kernels == "python"):
                shutil.copytree(folder, kernels, dirs_exist_ok=True)
        return dest

    def judge_case(self, case: Case, device: str) -> dict:
        """Judge one case through the judge's API and return its record."""
        from cuda_gym.errors import CudaGymError
        from cuda_gym.tasks import load_task

        start = time.monotonic()
        verdict: dict = {}
        failure = ""
        try:
            task = load_task(self.task_ref(case)).for_device(device)
            with tempfile.TemporaryDirectory(prefix=f"cuda_gym_{self.name}_") as tmp:
                self.write_solution(case, device, Path(tmp))
                judge = _judge(device, self.code_rules)
                verdict = judge.evaluate(task, tmp, timing=case.timing).to_dict()
        except CudaGymError as exc:  # an infrastructure failure, not a verdict
            failure = f"the judge raised {type(exc).__name__}: {exc}"
        observed = observed_reason(verdict) if verdict else JUDGE_ERROR
        error = verdict.get("error") if verdict else failure
        return {
            "case": case.name,
            "pattern": case.pattern,
            "task": case.task,
            "expected": case.expected,
            "observed": observed,
            "ok": observed in case.expected_reasons,
            "verdict": verdict.get("verdict", JUDGE_ERROR),
            "reward": verdict.get("reward"),
            "violations": (verdict.get("violations") or [])[:3],
            "speedup_vs_eager": verdict.get("speedup_vs_eager"),
            "error": (error or "")[:ERROR_EXCERPT_CHARS],
            "device_name": verdict.get("device_name"),
            "seconds": round(time.monotonic() - start, 2),
            "verdict_json": _without_build_log(verdict),
        }

    def run(
        self,
        device: str,
        only: Iterable[str] | None = None,
        jobs: int = 1,
        progress: Callable[[str], None] | None = None,
        exclude: Iterable[str] | None = None,
        behind_static: bool = False,
    ) -> dict:
        """Judge every case for `device` on `jobs` threads; return the report (records by name).

        With more than one job, cases expected to exhaust device memory are judged alone at
        the end: beside the others they would starve them. behind_static: judge only the
        cases with a Runtime field, with the static checks skipped, against their Runtime.
        """
        cases = self.load_cases(device, only, exclude)
        if behind_static:
            cases = [c.behind_static() for c in cases if c.runtime]
        alone = [c for c in cases if c.expected == "oom" and jobs > 1]
        shared = sorted((c for c in cases if c not in alone), key=_cost_rank)
        start = time.monotonic()
        records: list[dict] = []

        def report(record: dict) -> None:
            records.append(record)
            if progress:
                mark = "ok" if record["ok"] else "MISMATCH"
                line = (
                    f"[{len(records)}/{len(cases)}] {record['case']}: {record['observed']} "
                    f"(expected {record['expected']}) {mark} {record['seconds']:.1f} s"
                )
                if not record["ok"]:  # the reason, in case the run is cut before its report
                    line += "\n    " + " ".join(record["error"].split())[:600]
                progress(line)

        skipped = static_checks_skipped() if behind_static else contextlib.nullcontext()
        with skipped, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(self.judge_case, c, device) for c in shared]
            for future in as_completed(futures):
                report(future.result())
            for case in alone:
                report(self.judge_case(case, device))
        records.sort(key=lambda r: r["case"])
        names = {r.get("device_name") for r in records} - {None}
        return {
            "suite": f"{self.name} behind static" if behind_static else self.name,
            "behind_static": behind_static,
            "device": device,
            "device_name": sorted(names)[0] if names else None,
            "torch": importlib.metadata.version("torch"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "jobs": jobs,
            "wall_s": round(time.monotonic() - start, 1),
            "passed": sum(r["ok"] for r in records),
            "failed": sum(not r["ok"] for r in records),
            "cases": records,
        }


@contextlib.contextmanager
def static_checks_skipped():
    """While it lasts, this process's judges find nothing in model_new.py or kernels/ statically.

    For judging what the layers behind the static checks make of a case the checks stop. It
    changes only the trusted side of this process (the benchmark's own Judge objects).
    """
    from cuda_gym.judge import judge as judge_module

    saved = judge_module.static_violations
    judge_module.static_violations = lambda *args, **kwargs: []
    try:
        yield
    finally:
        judge_module.static_violations = saved


def _without_build_log(verdict: dict) -> dict:
    """The verdict as a dict, minus the compiler log (long, and the same each time)."""
    build = verdict.get("build")
    if not isinstance(build, dict):
        return verdict
    return dict(verdict, build={k: v for k, v in build.items() if k != "log"})


def _cost_rank(case: Case) -> int:
    """Start the slowest cases first so they overlap the rest: hangs, timing, self-builds."""
    if case.expected == "timeout":
        return 0
    if case.timing or "load_inline" in case.path.read_text():
        return 1
    return 2


def format_table(report: dict) -> str:
    """The report as a text table closing with a "<suite>: N passed, M failed" line."""
    header = ("case", "pattern", "expected", "observed", "verdict", "ok")
    rows = [
        (
            r["case"],
            r["pattern"] if len(r["pattern"]) <= 48 else r["pattern"][:45] + "...",
            r["expected"],
            r["observed"],
            r["verdict"],
            "ok" if r["ok"] else "FAIL",
        )
        for r in report["cases"]
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    rule = "  ".join("-" * w for w in widths)
    head = "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()
    where = f"device {report['device']}, {report['wall_s']:.0f} s"
    # The last line is the plain "N passed, N failed" that CI logs are read for.
    summary = f"{report['suite']}: {report['passed']} passed, {report['failed']} failed"
    return "\n".join([head, rule, *lines, where, summary])


def build_parser(suite: Suite, doc: str) -> argparse.ArgumentParser:
    """The command line of `suite`, described by the first line of `doc`."""
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{suite.root.name}", description=doc.splitlines()[0]
    )
    parser.add_argument("--device", choices=DEVICES, help="judge the cases for this device")
    parser.add_argument("--out", type=Path, help="write the per-case records as JSON here")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these cases")
    parser.add_argument("--exclude", nargs="+", metavar="NAME", help="skip these cases")
    parser.add_argument("--jobs", type=int, default=1, help="cases judged at once (default 1)")
    parser.add_argument(
        "--list", action="store_true", help="list the cases (for --device if given); judge none"
    )
    parser.add_argument(
        "--behind-static",
        action="store_true",
        help="judge the cases with a Runtime field, static checks skipped, against that field",
    )
    return parser


def main(suite: Suite, doc: str, argv: list[str] | None = None) -> int:
    """Run `suite` from the command line; 0 when every case is observed as expected, else 1."""
    parser = build_parser(suite, doc)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        print("error: --jobs must be at least 1", file=sys.stderr)
        return 2
    try:
        if args.list:
            for case in suite.load_cases(args.device, args.only, args.exclude):
                if args.behind_static and case.runtime:
                    print(f"{case.name}  {','.join(case.devices)}  {case.runtime}")
                elif not args.behind_static:
                    print(f"{case.name}  {','.join(case.devices)}  {case.expect}")
            return 0
        if args.device is None:
            parser.error("--device is required unless --list is given")
        report = suite.run(
            args.device,
            args.only,
            args.jobs,
            lambda line: print(line, file=sys.stderr),
            exclude=args.exclude,
            behind_static=args.behind_static,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_table(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["failed"] == 0 else 1
