"""The run's report: report.json, report.md and plots/ under the output directory."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from benchmarks.kernelbench.metrics import BASELINES, FAST_P, spread
from cuda_gym.judge.verdict import Flag

logger = logging.getLogger(__name__)


def _fmt_rate(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _fmt_x(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}×"


def markdown(report: dict) -> str:
    """The report as a Markdown document: configuration, metric tables, problems with issues."""
    cfg = report["config"]
    sysf = report["system"]
    metrics = report["metrics"]
    lines = [
        "# KernelBench harness report",
        "",
        f"- solver: **{report['solver']}**; device: {cfg['device']} "
        f"({sysf['device']['name']}); precision mode: **{cfg['tolerance_mode']}**",
        f"- torch {sysf['torch']} (CUDA {sysf['torch_cuda']}); cuda_gym {sysf['cuda_gym']}; "
        f"harness {report['harness_version']} at {sysf.get('harness_commit')}",
        "- records judged by harness commit: "
        + ", ".join(f"{c} ({n})" for c, n in report.get("records_by_harness_commit", {}).items()),
        f"- KernelBench: {cfg['kernelbench_dir']} at {sysf.get('kernelbench_commit')}",
        f"- timing: {report['timing']['description']}",
        f"- numerics: {report['numerics']}",
        f"- problems: {report['counts']['problems']} ({report['counts']['done']} judged, "
        f"{report['counts']['missing']} missing, {report['counts']['error']} errors)",
        *(
            []
            if report.get("complete", True)
            else ["", "**Incomplete run**: problems not run count as incorrect; resume it."]
        ),
        "",
        "## Metrics",
        "",
        "| scope | n | pass | faster than eager | faster than compile "
        "| geomean vs eager | geomean vs compile |",
        "|---|---|---|---|---|---|---|",
    ]
    scopes = [*metrics["levels"].items(), ("overall", metrics["overall"])]
    for name, m in scopes:
        lines.append(
            f"| {name} | {m['n']} | {_fmt_rate(m['pass_rate'])} "
            f"| {_fmt_rate(m['faster_than_eager_rate'])} "
            f"| {_fmt_rate(m['faster_than_compile_rate'])} "
            f"| {_fmt_x(m['geomean_speedup_vs_eager'])} "
            f"| {_fmt_x(m['geomean_speedup_vs_compile'])} |"
        )
    for baseline in BASELINES:
        header = " | ".join(f"fast_{p:g}" for p in FAST_P)
        lines += [
            "",
            f"### fast_p vs {baseline}",
            "",
            f"| scope | {header} |",
            "|---|" + "---|" * len(FAST_P),
        ]
        for name, m in scopes:
            row = " | ".join(_fmt_rate(v) for v in m[f"fast_p_vs_{baseline}"].values())
            lines.append(f"| {name} | {row} |")
    if report.get("final_submission"):
        fin = report["final_submission"]["overall"]
        lines += [
            "",
            "Scored above: the best solution of each trajectory. Final submissions alone: "
            f"pass {_fmt_rate(fin['pass_rate'])}, faster than eager "
            f"{_fmt_rate(fin['faster_than_eager_rate'])}, faster than compile "
            f"{_fmt_rate(fin['faster_than_compile_rate'])}.",
        ]
    if report.get("speedup_spread"):
        lines += ["", "## Speedup spread (correct solutions)", ""]
        lines += [
            "| scope | vs | n | median | p05 | p95 | min | max |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for scope, per in report["speedup_spread"].items():
            for baseline, s in per.items():
                if s:
                    lines.append(
                        f"| {scope} | {baseline} | {s['n']} | {s['median']:.3f} | {s['p05']:.3f} "
                        f"| {s['p95']:.3f} | {s['min']:.3f} | {s['max']:.3f} |"
                    )
        if {"gpu_bound", "host_bound"} & set(report["speedup_spread"]):
            lines += [
                "",
                f"gpu_bound: profiled GPU kernels fill at least {GPU_BOUND_SHARE:.0%} of the "
                "timed call; host_bound: the rest, whose time is mostly the host launching "
                "work and moves with CPU load beside the timing.",
            ]
    eff = report["effort"]["overall"]
    lines += ["", "## Effort", ""]
    lines.append(
        f"- wall time: {eff['wall_s_total']:.1f} s in problem jobs"
        + (
            "; report rebuilt from the records (--report-only), system facts from "
            f"{report['system_source']}"
            if report.get("system_source")
            else f" ({report['run_wall_s']:.1f} s for this invocation)"
        )
    )
    if report.get("invocations"):
        lines.append(
            f"- whole run: {report['total_wall_s']:.1f} s over {len(report['invocations'])} "
            "invocation(s) (resumed runs add up)"
        )
    if "episodes" in eff:
        lines.append(
            f"- turns: {eff['turns_total']} (mean {eff['turns_mean']:.1f}); tokens: "
            f"{eff['tokens_total']} ({eff['prompt_tokens_total']} prompt, "
            f"{eff['completion_tokens_total']} completion)"
        )
    issues = [p for p in report["problems"] if p["status"] != "done" or not p["correct"]]
    if issues:
        lines += [
            "",
            "## Problems not solved",
            "",
            "| problem | status | reason |",
            "|---|---|---|",
        ]
        for p in issues:
            reason = (p.get("error") or "").splitlines()[0][:120] if p.get("error") else ""
            lines.append(f"| {p['problem']} | {p['status']} | {reason.replace('|', '/')} |")
    if report.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{n}]({path})" for n, path in report["plots"].items()]
    return "\n".join(lines) + "\n"


def write_plots(report: dict, records: list[dict], out: Path) -> dict[str, str]:
    """Speedup distribution per level and pass/faster bars, as PNG files under out/plots.

    Returns:
        Plot name -> path relative to `out`; empty (with a warning) without matplotlib.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no plots (pip install 'cuda-gym[bench]')")
        return {}
    plots_dir = out / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    levels = sorted({r["level"] for r in records})
    written = {}

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, baseline in zip(axes, BASELINES):
        data, labels = [], []
        for level in levels:
            values = [
                r[f"speedup_vs_{baseline}"]
                for r in records
                if r["level"] == level
                and r.get("status") == "done"
                and r.get("correct")
                and r.get(f"speedup_vs_{baseline}")
            ]
            data.append([math.log2(v) for v in values] or [float("nan")])
            labels.append(f"L{level} (n={len(values)})")
        ax.boxplot(data, showfliers=True)
        ax.set_xticks(range(1, len(labels) + 1), labels)
        ax.axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_title(f"speedup vs {baseline} (correct solutions)")
        ax.set_ylabel("log2 speedup")
    fig.tight_layout()
    path = plots_dir / "speedup_distribution.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written["speedup_distribution"] = str(path.relative_to(out))

    scopes = [*report["metrics"]["levels"].items(), ("overall", report["metrics"]["overall"])]
    keys = [
        ("pass_rate", "pass"),
        ("faster_than_eager_rate", "faster than eager"),
        ("faster_than_compile_rate", "faster than compile"),
    ]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(keys)
    for i, (key, label) in enumerate(keys):
        xs = [j + i * width for j in range(len(scopes))]
        ax.bar(xs, [100 * m[key] for _, m in scopes], width, label=label)
    ax.set_xticks([j + width for j in range(len(scopes))], [name for name, _ in scopes])
    ax.set_ylabel("% of problems")
    ax.set_ylim(0, 100)
    ax.legend()
    ax.set_title(f"KernelBench ({report['config']['tolerance_mode']} mode)")
    fig.tight_layout()
    path = plots_dir / "pass_faster.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written["pass_faster"] = str(path.relative_to(out))
    return written


# A timed call is GPU-bound when the profiled GPU kernels fill at least this share of its median
# time. Below it the time is mostly the host launching work (Python, the dispatcher), which CPU
# load beside the timing moves: in the H200 sanity run the GPU-bound problems' speedups against
# themselves sat at 0.99-1.01 (5th-95th percentile), the others at 0.59-1.42.
GPU_BOUND_SHARE = 0.9


def kernel_share(record: dict) -> float | None:
    """Profiled GPU kernel time per call over the timed median; None where not profiled."""
    verdict = record.get("verdict") or {}
    kernels_ms = (verdict.get("flags") or {}).get(Flag.PROFILE_KERNEL_MS_PER_CALL)
    timed_ms = (verdict.get("time_ms") or {}).get("candidate")
    if not kernels_ms or not timed_ms:
        return None
    return kernels_ms / timed_ms


def speedup_spread(records: list[dict]) -> dict:
    """Median and 5th–95th percentiles of the correct solutions' speedups, per level and overall.

    Where solutions were profiled (CUDA), also over the GPU-bound ones ("gpu_bound": kernels
    fill at least GPU_BOUND_SHARE of the timed call) and the rest ("host_bound").
    """
    scopes: dict[str, list[dict]] = {}
    for r in records:
        scopes.setdefault(f"level{r['level']}", []).append(r)
    scopes["overall"] = list(records)
    for r in records:
        share = kernel_share(r)
        if share is not None:
            scope = "gpu_bound" if share >= GPU_BOUND_SHARE else "host_bound"
            scopes.setdefault(scope, []).append(r)
    result = {}
    for scope, rows in scopes.items():
        result[scope] = {
            b: spread(
                [
                    r[f"speedup_vs_{b}"]
                    for r in rows
                    if r.get("status") == "done" and r.get("correct") and r.get(f"speedup_vs_{b}")
                ]
            )
            for b in BASELINES
        }
    return result


def write_report(report: dict, records: list[dict], out: Path, plots: bool) -> None:
    """Write plots (optional), report.json and report.md."""
    report["plots"] = write_plots(report, records, out) if plots else {}
    (out / "report.json").write_text(json.dumps(report, indent=1, default=repr) + "\n")
    (out / "report.md").write_text(markdown(report))


def print_summary(summary: dict, out: str | None) -> None:
    """Print a summary (the spread, the memory check) as JSON; write it to `out` too if given."""
    text = json.dumps(summary, indent=1) + "\n"
    print(text, end="")
    if out:
        Path(out).write_text(text)
