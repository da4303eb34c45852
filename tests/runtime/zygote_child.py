"""A worker for the zygote tests: `python -m tests.runtime.zygote_child ACTION`."""

import os
import signal
import subprocess
import sys
import time

action = sys.argv[1]
if action == "echo":
    data = sys.stdin.read()
    print(f"stdin={data} cwd={os.getcwd()} x={os.environ.get('ZYGOTE_TEST_X')}")
    print("to stderr", file=sys.stderr)
elif action == "sleep":
    time.sleep(600)
elif action == "nap":
    time.sleep(2.0)
elif action == "segv":
    os.kill(os.getpid(), signal.SIGSEGV)
elif action == "exit3":
    sys.exit(3)
elif action == "raise":
    raise ValueError("boom from the worker")
elif action == "grandchild":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(child.pid, flush=True)
elif action == "torch":
    import torch

    print(float((torch.arange(1000.0) * 2).sum()))
elif action == "ppid":
    print(os.getppid())
elif action == "cuda_nvml_oom":
    # In a child forked from the zygote: CUDA starts, NVML initialises, and an allocation far
    # beyond the device is PyTorch's OutOfMemoryError (whose message PyTorch builds with NVML).
    import ctypes

    import torch

    torch.ones(1, device="cuda")
    nvml_rc = ctypes.CDLL("libnvidia-ml.so.1").nvmlInit_v2()
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        outcome = "allocated"
    except Exception as exc:  # the type is the result
        outcome = type(exc).__name__
    print(os.getppid(), nvml_rc, outcome)
