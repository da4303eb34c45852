"""What a call from one process into another costs on the GPU, beside the kernel it runs.

The trusted driver times each call of the candidate's runner on the host clock, from sending
the call to the runner's "done", and subtracts empty calls measured before the runner has a
CUDA context. On the H200 fast kernels still read 0.27-0.52 ms above their own CUDA-event time
(`results/timing_fidelity_h200.json`, `legit_speedups_422c7ac`). This separates the suspects
with two bare processes and no judge: a parent (the driver's part: GPU work of its own before
the call, `_preludes`) and a child with its own CUDA context (the runner's part), over a Unix
socket polled on both sides as the driver and runner poll. What the child does per call:

- `idle`: answers at once (what the judge's empty calls measure now);
- `sync`: synchronises its idle context, then answers;
- `tiny`: launches one tiny kernel, synchronises, answers;
- `kernel`: launches a ~1 ms kernel between two CUDA events, synchronises, answers with the
  events' time.

Printed per prelude and condition: the host median; for `kernel`, the host median minus the
events' median minus `idle`'s host median: what the judge's timer would count beyond the GPU's
time. At 071d0c0 on the H200, after the flush, `tiny - idle` (0.161 ms) matched it (0.174 ms),
and both were 0.03 ms with no prelude: the GPU's switch from the driver's busy context to the
runner's. The other preludes (2026-12-04): it costs the same (0.155-0.168 ms) after a tiny
kernel of the driver's, after a read-only flush, and after the flush and 1 ms idle; so any GPU
work of another process since the runner's last makes the GPU switch
(`results/timing_fidelity_h200.json`, `cross_process_call_preludes`).

    python -m benchmarks.cross_process_call --calls 200 --out FILE.json

`--device cpu` runs `idle` alone (the plumbing, for tests).
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import subprocess
import sys
import time

SPIN_S = 0.02  # as the judge's driver and runner poll (cuda_gym.judge.driver.SPIN_S)
FLUSH_BYTES = 512 << 20  # as the driver's L2 flush (cuda_gym.judge.timing.L2_FLUSH_BYTES)
KERNEL_CYCLES = 2_000_000  # torch.cuda._sleep: about 1 ms at the H200's 1.98 GHz
CONDITIONS = ("idle", "sync", "tiny", "kernel")

CHILD = r"""
import json, socket, sys, time
fd, device, spin_s, cycles = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
sock = socket.socket(fileno=fd)
if device == "cuda":
    import torch
    torch.cuda.init()
    tiny = torch.zeros(1, device="cuda")
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()

def receive():
    deadline = time.perf_counter() + spin_s
    sock.setblocking(False)
    try:
        while time.perf_counter() < deadline:
            try:
                return sock.recv(64)
            except BlockingIOError:
                pass
    finally:
        sock.setblocking(True)
    return sock.recv(64)

sock.sendall(b"ready")
while True:
    what = receive().decode()
    if what in ("", "exit"):
        break
    reply = {}
    if what == "sync":
        torch.cuda.synchronize()
    elif what == "tiny":
        tiny.add_(1)
        torch.cuda.synchronize()
    elif what == "kernel":
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        reply["event_ms"] = start.elapsed_time(end)
    sock.sendall(json.dumps(reply).encode())
"""


class Child:
    """The runner's part: a process of its own at the other end of a socket pair."""

    def __init__(self, device: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        argv = [sys.executable, "-c", CHILD, str(theirs.fileno()), device, str(SPIN_S)]
        self.proc = subprocess.Popen([*argv, str(KERNEL_CYCLES)], pass_fds=[theirs.fileno()])
        theirs.close()
        if self._receive(120.0) != b"ready":
            raise RuntimeError("the child process did not start")

    def _receive(self, limit_s: float) -> bytes:
        deadline = time.perf_counter() + SPIN_S
        self.sock.setblocking(False)
        try:
            while time.perf_counter() < deadline:
                try:
                    return self.sock.recv(4096)
                except BlockingIOError:
                    pass
        finally:
            self.sock.setblocking(True)
        self.sock.settimeout(limit_s)
        try:
            return self.sock.recv(4096)
        finally:
            self.sock.settimeout(None)

    def call(self, what: str) -> tuple[float, dict]:
        """(host ms from sending to the answer, the child's answer)."""
        start = time.perf_counter()
        self.sock.sendall(what.encode())
        data = self._receive(60.0)
        host_ms = (time.perf_counter() - start) * 1e3
        return host_ms, json.loads(data)

    def close(self) -> None:
        try:
            self.sock.sendall(b"exit")
        except OSError:
            pass
        self.sock.close()
        self.proc.wait(timeout=30)


def _preludes(device: str) -> dict:
    """The driver's part before a call, by name: GPU work of its own, synchronised, or none.

    - `none`: nothing;
    - `flush`: its L2 flush (a 512 MiB fill on its own stream, as the judge's);
    - `flush_gap`: the flush, then 1 ms with the GPU idle before the call;
    - `read_flush`: the L2 flushed by reading 512 MiB (the cache left holding clean lines);
    - `tiny`: one tiny kernel of its own (its context busy last, nearly no memory touched).
    """
    preludes = {"none": None}
    if device != "cuda":
        return preludes
    import torch

    buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    total = torch.empty((), dtype=torch.int64, device="cuda")
    small = torch.zeros(1, device="cuda")
    stream = torch.cuda.Stream()

    def on_stream(work):
        def run() -> None:
            with torch.cuda.stream(stream):
                work()
            torch.cuda.synchronize()

        return run

    flush = on_stream(buf.zero_)

    def flush_gap() -> None:
        flush()
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            pass

    preludes["flush"] = flush
    preludes["flush_gap"] = flush_gap
    preludes["read_flush"] = on_stream(lambda: total.copy_(torch.sum(buf, dtype=torch.int64)))
    preludes["tiny"] = on_stream(lambda: small.add_(1))
    return preludes


def measure(device: str, calls: int, warmup: int = 20) -> dict:
    """Per prelude of the driver's: host and event medians of each condition, in ms."""
    conditions = CONDITIONS if device == "cuda" else ("idle",)
    preludes = _preludes(device)
    child = Child(device)
    host = {(c, p): [] for c in conditions for p in preludes}
    events = {(c, p): [] for c in conditions for p in preludes}
    try:
        for k in range(warmup + calls):  # the conditions interleaved: drift hits all alike
            for name, fn in preludes.items():
                for condition in conditions:
                    if fn is not None:
                        fn()
                    host_ms, reply = child.call(condition)
                    if k >= warmup:
                        host[(condition, name)].append(host_ms)
                        if "event_ms" in reply:
                            events[(condition, name)].append(reply["event_ms"])
    finally:
        child.close()
    out: dict = {}
    for name in preludes:
        row = {c: round(statistics.median(host[(c, name)]), 4) for c in conditions}
        if "kernel" in conditions and events[("kernel", name)]:
            event_ms = statistics.median(events[("kernel", name)])
            row["kernel_events"] = round(event_ms, 4)
            row["kernel_beyond_events_and_idle"] = round(row["kernel"] - event_ms - row["idle"], 4)
            row["tiny_minus_idle"] = round(row["tiny"] - row["idle"], 4)
        out[name] = row
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda needs a CUDA GPU (use --device cpu for the plumbing)")
    report = {
        "benchmark": "cross_process_call",
        "command": "python -m benchmarks.cross_process_call " + " ".join(argv or sys.argv[1:]),
        "device": args.device,
        "host": platform.node(),
        "calls": args.calls,
        "ms": measure(args.device, args.calls),
    }
    for name, row in report["ms"].items():
        print(name, json.dumps(row))
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
