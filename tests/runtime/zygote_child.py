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
