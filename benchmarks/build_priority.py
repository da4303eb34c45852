"""How much compiles beside a timing loop disturb it, at the judge's priority and niced.

    python -m benchmarks.build_priority [--compiles N] [--seconds S] [--size N] [--out FILE]

A single-threaded timing loop (a float matmul of --size, one intra-op thread, as a CPU runner
times a call; 1024 takes ~13 ms on a 2-core VM, longer than a scheduler's time slice: calls
much shorter than a slice keep their median beside anything, only their tail moves) is timed
alone, then beside N compiles of a C++ file that includes torch/extension.h (what a busy
judge runs most), started through `run_process` as the judge starts its builds (each in a
session of its own: where the kernel groups tasks by session, autogroup, a scheduling group
of its own): once at niceness 0 and once at +`JudgeConfig.build_nice`, each phase's compiles
ended before the next. Prints each phase's median, 90th percentile and maximum per iteration
and the median's ratio to the loop alone, and writes them as JSON with --out. N defaults to
the number of CPUs (a saturated host).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

from cuda_gym.judge.config import JudgeConfig
from cuda_gym.runtime import run_process

SOURCE = "#include <torch/extension.h>\nint probe() { return 1; }\n"


def compile_command(source: Path) -> list[str]:
    """A syntax-only compile of `source` with torch's include paths (the expensive part)."""
    from torch.utils import cpp_extension

    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    includes.append(f"-I{sysconfig.get_paths()['include']}")
    return [os.environ.get("CXX", "c++"), "-std=c++17", "-fsyntax-only", *includes, str(source)]


def time_loop(seconds: float, size: int) -> list[float]:
    """Per-iteration seconds of the timing loop for about `seconds`."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    out = torch.empty(size, size)
    for _ in range(20):
        torch.mm(a, b, out=out)
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        samples.append(time.perf_counter() - start)
    return samples


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_us": round(statistics.median(ordered) * 1e6, 2),
        "p90_us": round(ordered[int(0.9 * (len(ordered) - 1))] * 1e6, 2),
        "max_us": round(ordered[-1] * 1e6, 2),
    }


def beside_compiles(count: int, nice: int, seconds: float, size: int, source: Path) -> dict:
    """The loop's figures while `count` compiles run at niceness +`nice` (restarted as they end)."""
    stop = threading.Event()
    done = []

    def compiler() -> None:
        while not stop.is_set():
            proc = run_process(compile_command(source), timeout_s=600, nice=nice)
            if not stop.is_set():
                done.append(proc.ok)

    threads = [threading.Thread(target=compiler, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # the compilers past their start-up, into the headers
    samples = time_loop(seconds, size)
    stop.set()
    for thread in threads:  # the next phase starts with none of these compiles left
        thread.join()
    result = summary(samples)
    result["compiles_finished"] = len(done)
    result["compiles_ok"] = all(done)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compiles", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    nice = JudgeConfig(device="cpu").build_nice
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "probe.cpp"
        source.write_text(SOURCE)
        probe = run_process(compile_command(source), timeout_s=600)
        if not probe.ok:
            raise SystemExit(f"the compile does not work here:\n{probe.stderr[-2000:]}")
        phases = {"alone": summary(time_loop(args.seconds, args.size))}
        for level in (0, nice):
            phases[f"beside_{args.compiles}_compiles_nice_{level}"] = beside_compiles(
                args.compiles, level, args.seconds, args.size, source
            )
        phases["alone_again"] = summary(time_loop(args.seconds, args.size))
    alone = statistics.mean(phases[k]["median_us"] for k in ("alone", "alone_again"))
    for name, figures in phases.items():
        figures["median_over_alone"] = round(figures["median_us"] / alone, 3)
        print(
            f"{name:30} median {figures['median_us']:9.1f} us  p90 {figures['p90_us']:9.1f} us"
            f"  max {figures['max_us']:9.1f} us  x{figures['median_over_alone']:.2f}"
        )
    report = {
        "benchmark": "build_priority",
        "command": "python -m benchmarks.build_priority " + " ".join(argv or sys.argv[1:]),
        "cpus": os.cpu_count(),
        "compiles": args.compiles,
        "size": args.size,
        "build_nice": nice,
        "phases": phases,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
