"""The untrusted runner holds nothing of the judge: no cuda_gym import, started isolated."""

import ast
import subprocess
import sys

from cuda_gym.judge import protocol, runner
from cuda_gym.judge.untrusted import RUNNER_PATH


def test_the_runner_imports_no_cuda_gym_module():
    tree = ast.parse(RUNNER_PATH.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    assert not any(n.split(".")[0] == "cuda_gym" for n in names), names


def test_the_runners_replies_have_the_protocols_fields():
    """The runner builds its replies by hand; they must decode as the protocol's dataclasses."""
    ready = {"error": None, "build_failed": False, "weights_not_copied": []}
    protocol.decode(protocol.RunnerReady, ready)
    source = RUNNER_PATH.read_text()
    for field in ("call_id", "error", "violations", "values", "own_calls", "profile_rows"):
        assert f'"{field}"' in source
    assert runner.ERROR_CHARS > 0


def test_the_fallback_ban_neither_imports_dynamo_nor_lets_compute_through():
    """Torch wraps a dispatch mode's handler in torch._dynamo.disable unless told not to; its
    first call then imports torch._dynamo (seconds of CPU in every candidate's first call)."""
    code = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(RUNNER_PATH.parent)!r})\n"
        "import runner\n"
        "ban = runner._Ban(torch, {'aten::empty_like'})\n"
        "x = torch.ones(4)\n"
        "with ban.active():\n"
        "    torch.empty_like(x)\n"
        "    try:\n"
        "        torch.sigmoid(x)\n"
        "    except RuntimeError:\n"
        "        pass\n"
        "print('torch._dynamo' in sys.modules, len(ban.violations))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "1"]


def test_the_runners_ban_refuses_dtype_conversions_and_allows_in_place_views():
    """Its conversion rule is cuda_gym.judge.fallback's: `.half()` (aten::_to_copy with a dtype)
    is compute; `unsqueeze_` (keepdim after an own kernel) only changes metadata."""
    from cuda_gym.judge.fallback import ALLOWED_OPS

    code = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(RUNNER_PATH.parent)!r})\n"
        "import runner\n"
        f"ban = runner._Ban(torch, {sorted(ALLOWED_OPS)!r})\n"
        "x = torch.ones(4)\n"
        "refused = []\n"
        "for how in ('half', 'to_bf16', 'copy_int'):\n"
        "    with ban.active():\n"
        "        try:\n"
        "            if how == 'half': x.half()\n"
        "            elif how == 'to_bf16': x.to(torch.bfloat16)\n"
        "            else: torch.empty(4, dtype=torch.int32).copy_(x)\n"
        "        except RuntimeError:\n"
        "            refused.append(how)\n"
        "with ban.active():\n"
        "    out = torch.empty(4)\n"
        "    out.unsqueeze_(1).squeeze_(1).t_()\n"
        "    y = x.to('cpu').clone()\n"
        "print(','.join(refused), len(ban.violations), tuple(out.shape))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["half,to_bf16,copy_int", "3", "(4,)"]


def test_the_runners_ban_refuses_tensor_bytes_through_files_and_puts_them_back():
    """torch.save writes a storage's raw bytes with no operator, torch.frombuffer wraps bytes
    back: NumPy could compute in between (a red-team find under the external rules)."""
    code = (
        "import io, sys, torch\n"
        f"sys.path.insert(0, {str(RUNNER_PATH.parent)!r})\n"
        "import runner\n"
        "ban = runner._Ban(torch, {'aten::empty_like'})\n"
        "x = torch.ones(4)\n"
        "refused = []\n"
        "for how in ('save', 'frombuffer'):\n"
        "    with ban.active():\n"
        "        try:\n"
        "            if how == 'save': torch.save(x, io.BytesIO())\n"
        "            else: torch.frombuffer(bytearray(16), dtype=torch.float32)\n"
        "        except RuntimeError:\n"
        "            refused.append(how)\n"
        "torch.save(x, io.BytesIO())\n"
        "print(','.join(refused), len(ban.violations))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["save,frombuffer", "2"]


def test_candidate_processes_hash_strings_alike():
    """The build stage and the runners get one PYTHONHASHSEED (which `python -I` would ignore):
    an extension named after hash(source) has one name in both."""
    from cuda_gym.judge.untrusted import runner_command, runner_env_for

    argv = runner_command("FD")
    env = runner_env_for({"PATH": "/usr/bin:/bin", "PYTHONPATH": "/elsewhere", "PYTHONHOME": "/x"})
    assert "PYTHONPATH" not in env and "PYTHONHOME" not in env and env["PATH"] == "/usr/bin:/bin"
    if sys.version_info < (3, 11):
        assert argv[1] == "-I"
        return
    assert argv[1:3] == ["-s", "-P"] and argv[3] == str(RUNNER_PATH)
    hashes = {
        subprocess.run(
            [*argv[:3], "-c", "print(hash('frc_silu'))"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for _ in range(2)
    }
    assert len(hashes) == 1


def test_host_escapes_taken_before_forward_are_the_judges_stand_ins():
    """`host = torch.Tensor.numpy` at import: the stand-ins are in place for the runner's life
    (before, only while forward ran), passing through outside forward and refusing inside."""
    code = (
        "import io, sys, torch\n"
        f"sys.path.insert(0, {str(RUNNER_PATH.parent)!r})\n"
        "import runner\n"
        "ban = runner._Ban(torch, {'aten::empty_like'}, 'cuda')\n"
        "host, save = torch.Tensor.numpy, torch.save\n"
        "x = torch.ones(4)\n"
        "outside = [float(host(x).sum()), x.tolist()[0], x.__dlpack__() is not None]\n"
        "refused = []\n"
        "for how in ('numpy', 'save', 'dlpack'):\n"
        "    with ban.active():\n"
        "        try:\n"
        "            if how == 'numpy': host(x)\n"
        "            elif how == 'save': save(x, io.BytesIO())\n"
        "            else: x.__dlpack__()\n"
        "        except RuntimeError:\n"
        "            refused.append(how)\n"
        "torch.Tensor.tolist = lambda self: [0.0]\n"
        "with ban.active():\n"
        "    pass\n"
        "print(outside, ','.join(refused), len(ban.violations), x.tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # (DLPack stays open on CUDA: CuPy takes torch's tensors through it.)
    assert out.stdout.split() == [
        "[4.0,",
        "1.0,",
        "True]",
        "numpy,save",
        "3",
        "[1.0,",
        "1.0,",
        "1.0,",
        "1.0]",
    ]


def test_the_processs_memory_cannot_be_opened_as_a_file():
    """Under the external rules open() may read files: not /proc/self/mem (tensor data by
    address, read and written back from Python), by any of its names or through a link."""
    code = (
        "import os, sys, tempfile\n"
        f"sys.path.insert(0, {str(RUNNER_PATH.parent)!r})\n"
        "import runner\n"
        "main = runner._MainThread([], ())\n"
        "main.refuse_audit_hooks()\n"
        "link = os.path.join(tempfile.mkdtemp(), 'm')\n"
        "os.symlink('/proc/self/mem', link)\n"
        "refused = 0\n"
        "for path in ('/proc/self/mem', '/proc/thread-self/mem', link):\n"
        "    try:\n"
        "        open(path, 'rb')\n"
        "    except PermissionError:\n"
        "        refused += 1\n"
        "status = open('/proc/self/status').read()\n"
        "print(refused, len(main.violations), 'Pid' in status)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "3", "True"]
