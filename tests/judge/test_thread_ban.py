"""The fallback ban on the solution's other threads (cuda_gym.judge.thread_ban): built, loaded
and fed ops from threads in a child process (its RecordFunction callback is once per process)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cuda_gym.judge.runner as runner
from cuda_gym.judge import thread_ban
from cuda_gym.judge.fallback import ALLOWED_OPS, COPY_OPS

pytestmark = pytest.mark.slow

CHILD = textwrap.dedent(
    """
    import json, sys, threading, torch
    sys.path.insert(0, sys.argv[3])
    from runner import _ThreadBan

    clear = torch._C._autograd._clear_callbacks  # (taken before the ban replaces it)
    ban = _ThreadBan(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[4]), torch)
    x = torch.randn(32, 48)
    cases = {
        "contiguous": lambda: x.t().contiguous(),
        "to_half": lambda: x.to(torch.float16),
        "to_same_dtype": lambda: x.to(torch.float32),
        "views": lambda: x.reshape(-1).view(32, 48).flatten().narrow(0, 0, 4),
        "empty_fill": lambda: torch.empty(5).fill_(1.0),
        "matmul": lambda: x @ x.t(),
        "add": lambda: x + 1,
    }
    found = {}
    for name, fn in cases.items():
        fn()  # forward's own thread: the dispatch mode's to judge, never this ban's
        found[name + "_main"] = ban.take()
        thread = threading.Thread(target=fn)
        thread.start()
        thread.join()
        found[name] = ban.take()
        ban.watch(ban.ALL)  # the runner's thread outside forward: judged as the others are
        fn()
        ban.watch(ban.OFF)
        found[name + "_watched"] = ban.take()
        ban.watch(ban.NESTED)  # forward: its own calls are the mode's
        fn()
        ban.watch(ban.OFF)
        found[name + "_nested"] = ban.take()
    slot = torch.empty(32, 48)  # the runner's copy into a slot: allowed once, by address
    ban.watch(ban.ALL)
    ban.allow_copy(slot.data_ptr())
    slot.copy_(x)
    found["slot_copy"] = ban.take()
    slot.copy_(x)
    found["slot_copy_again"] = ban.take()
    ban.allow_copy(torch.empty(4).data_ptr())
    slot.copy_(x)
    ban.allow_copy(None)
    found["other_slot_copy"] = ban.take()
    ban.watch(ban.OFF)
    # An op whose kernel calls others (as a kernel registered for an allowed op would): what
    # runs inside it is judged at NESTED, and passes inside an opaque op (a vendor GEMM's).
    lib = torch.library.Library("tb", "DEF")
    lib.define("inner(Tensor x) -> Tensor")
    lib.define("threaded(Tensor x) -> Tensor")

    def threaded(t):
        worker = threading.Thread(target=lambda: t + 1)
        worker.start()
        worker.join()
        return t.clone()

    lib.impl("inner", lambda t: t @ t.t(), "CPU")
    lib.impl("threaded", threaded, "CPU")
    for level in ("NESTED", "ALL", "OFF"):
        ban.watch(getattr(ban, level))
        torch.ops.tb.inner(x)
        torch.ops.tb.threaded(x)
        ban.watch(ban.OFF)
        found["inner_" + level] = ban.take()
    handle = torch._C._dispatch_find_schema_or_throw("aten::clone", "")
    switches = (
        lambda: torch.autograd._enable_record_function(False),
        torch._C._autograd._clear_callbacks,
        lambda: handle.redispatch_boxed(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), x),
    )
    for switch in switches:
        try:
            switch()
        except RuntimeError:
            pass
    found["switches"] = ban.take()
    clear()  # the callback removed by a way the ban did not refuse
    found["removed"] = ban.take()
    print(json.dumps(found))
    """
)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return thread_ban.library(tmp_path_factory.mktemp("thread_ban"))


def _records(tmp_path, library, allowed: set, opaque: set = frozenset()) -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            str(library),
            json.dumps(sorted(allowed)),
            str(Path(runner.__file__).parent),
            json.dumps(sorted(opaque)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_records_refused_ops_of_other_threads_only(tmp_path, library):
    found = _records(tmp_path, library, set(ALLOWED_OPS))
    assert all(not v for k, v in found.items() if k.endswith("_main")), found
    for allowed in ("contiguous", "to_same_dtype", "views", "empty_fill"):
        assert found[allowed] == [] == found[allowed + "_watched"], (allowed, found)
        # forward's own calls are the mode's at NESTED; what an allowed one runs passes too
        assert found[allowed + "_nested"] == [], (allowed, found)
    # inside a refused op (run here with no mode to stop it): its parts (matmul's mm, the
    # conversion inside .half(), the wrapped scalar's inside x + 1)
    assert found["matmul_nested"] == [
        "torch_fallback: PyTorch ops run inside an op ModelNew.forward called (aten::mm): an"
        " allowed op made to run other code is still PyTorch doing the work"
    ]
    assert "aten::add" not in found["add_nested"][0]
    refused_ops = {"to_half": "aten::_to_copy", "matmul": "aten::mm", "add": "aten::add"}
    for refused, op in refused_ops.items():
        for key in (refused, refused + "_watched"):
            assert len(found[key]) == 1 and op in found[key][0], (key, found[key])
            assert found[key][0].startswith("torch_fallback: ")
    # inside another op: the GEMM a kernel calls and its worker thread's add (NESTED); at ALL
    # the op itself is refused as well
    inside, other = found["inner_NESTED"]
    assert "inside an op ModelNew.forward called (aten::mm)" in inside
    assert "aten::add" in other and "aten::mm" not in other and "tb::" not in other
    assert "tb::inner" in " ".join(found["inner_ALL"])
    # OFF leaves this thread alone, never the others
    assert len(found["inner_OFF"]) == 1 and "aten::mm" not in found["inner_OFF"][0]
    assert "aten::add" in found["inner_OFF"][0]
    # RecordFunction's switches in torch's Python API are refused, and a removed callback told
    assert len(found["switches"]) == 3, found["switches"]
    assert all(v.startswith("torch_fallback: torch's ") for v in found["switches"])
    assert len(found["removed"]) == 1 and "callback was removed" in found["removed"][0]


def test_the_insides_of_an_opaque_op_pass(tmp_path, library):
    found = _records(
        tmp_path,
        library,
        set(ALLOWED_OPS) | {"tb::inner", "tb::threaded"},
        opaque={"tb::inner", "tb::threaded"},
    )
    assert found["inner_NESTED"] == found["inner_ALL"] == found["inner_OFF"] == [], found
    assert len(found["add"]) == 1 and len(found["matmul"]) == 1  # other ops: judged as ever


def test_copies_are_refused_on_a_data_movement_task(tmp_path, library):
    found = _records(tmp_path, library, set(ALLOWED_OPS) - COPY_OPS)
    assert "aten::clone" in found["contiguous"][0]
    assert found["contiguous_main"] == []
    assert found["views"] == [] and found["empty_fill"] == []
    assert found["slot_copy"] == []
    assert "aten::copy_" in found["slot_copy_again"][0]
    assert "aten::copy_" in found["other_slot_copy"][0]


def test_a_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(thread_ban.ThreadBanUnavailable, match="no-such-compiler"):
        thread_ban.library(tmp_path / "cache")
