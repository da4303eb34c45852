"""The output hand-over between the candidate's and the reference's workers."""

import os
import subprocess
import sys

import pytest
import torch

from cuda_gym.judge import transfer
from cuda_gym.judge.transfer import (
    ArenaPool,
    OutputWriter,
    load_outputs,
    remove_stale_arenas,
    to_device,
)


@pytest.fixture(autouse=True)
def room_anywhere(monkeypatch):
    """The arena may grow whatever the filesystem's fill: these tests are not about room.

    (A CI machine's temporary directory can be more than three quarters full, and the room rule
    would then send every tensor into the index.) `test_a_full_filesystem_*` sets the rule back.
    """
    monkeypatch.setattr(transfer, "ROOM_SHARE", 0.0)
    monkeypatch.setattr(transfer, "ROOM_MIN_BYTES", 0)


def sample_tree():
    return {
        "trials": [[torch.randn(3, 5), torch.arange(7)], [torch.ones(2, dtype=torch.bool), 1.5]],
        "repeat": [torch.randn(4).t(), None],
        "timed": {"set": 2, "outputs": [torch.empty(0, 3), torch.randn(6, 2).t()]},
    }


def assert_same(a, b):
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert type(b) is torch.Tensor and b.dtype == a.dtype and b.shape == a.shape
        assert torch.equal(a, b)
    else:
        assert a == b


def write(tree, tmp_path, arena):
    writer = OutputWriter(str(arena) if arena else None)
    index = tmp_path / "outputs.pt"
    # Put in two parts, as the worker does (trials before timing, timed outputs after).
    first = writer.put({"trials": tree["trials"], "repeat": tree["repeat"]})
    timed = writer.put(tree["timed"])
    writer.save({**first, "timed": timed}, str(index))
    return writer, index


def test_round_trip_through_an_arena(tmp_path):
    pool = ArenaPool(tmp_path)
    tree = sample_tree()
    with pool.lease() as arena:
        writer, index = write(tree, tmp_path, arena)
        assert writer.arena_bytes > 0 and writer.host_bytes == 0
        # The index holds no tensor data: it stays small whatever the outputs' size.
        assert index.stat().st_size < 4096
        back = load_outputs(str(index), str(arena), "cpu")
    assert_same(tree, back)
    # Private copies: later writes to the arena do not reach what was loaded.
    arena.write_bytes(b"\0" * arena.stat().st_size)
    assert_same(tree, back)
    pool.close()
    assert not list(tmp_path.glob(f"{transfer.ARENA_PREFIX}*"))


def test_loading_lazily_then_one_part_at_a_time(tmp_path):
    pool = ArenaPool(tmp_path)
    tree = sample_tree()
    with pool.lease() as arena:
        _, index = write(tree, tmp_path, arena)
        lazy = load_outputs(str(index), str(arena), None)
        # Views of the arena until copied: the reference copies one trial at a time.
        first = to_device(lazy["trials"][0], "cpu")
        assert_same(tree["trials"][0], first)
        assert_same(tree, to_device(lazy, "cpu"))
        arena.write_bytes(b"\0" * arena.stat().st_size)
        assert_same(tree["trials"][0], first)
    pool.close()


def test_an_arena_is_reused_and_grows(tmp_path):
    pool = ArenaPool(tmp_path)
    with pool.lease() as first:
        write({"trials": [[torch.randn(10)]], "repeat": [], "timed": None}, tmp_path, first)
    small = first.stat().st_size
    with pool.lease() as second:
        assert second == first  # lent again, not a new file
        tree = {"trials": [[torch.randn(10000)]], "repeat": [], "timed": None}
        _, index = write(tree, tmp_path, second)
        assert second.stat().st_size > small
        assert_same(tree, load_outputs(str(index), str(second), "cpu"))
    # Two evaluations at once get two files.
    with pool.lease() as a, pool.lease() as b:
        assert a != b
    pool.close()


def test_without_room_the_tensors_go_into_the_index(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_GYM_ARENA_MAX_BYTES", "16")
    tree = sample_tree()
    with ArenaPool(tmp_path).lease() as arena:
        writer, index = write(tree, tmp_path, arena)
        assert writer.arena_bytes == 0 and writer.host_bytes > 0
        assert_same(tree, load_outputs(str(index), str(arena), "cpu"))
    writer, index = write(tree, tmp_path, None)
    assert_same(tree, load_outputs(str(index), None, "cpu"))


def test_a_full_filesystem_keeps_its_reserve(tmp_path, monkeypatch):
    # Growing the arena must leave ROOM_MIN_BYTES free; ask for more than the filesystem has.
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    monkeypatch.setattr(transfer, "ROOM_MIN_BYTES", free + (1 << 30))
    tree = sample_tree()
    with ArenaPool(tmp_path).lease() as arena:
        writer, index = write(tree, tmp_path, arena)
        assert writer.arena_bytes == 0 and writer.host_bytes > 0
        assert arena.stat().st_size == 0
        assert_same(tree, load_outputs(str(index), str(arena), "cpu"))


@pytest.mark.parametrize(
    "entry",
    [
        {transfer.MARKER: 1 << 40, "shape": [4], "dtype": "torch.float32"},
        {transfer.MARKER: 0, "shape": [-1], "dtype": "torch.float32"},
        {transfer.MARKER: 0, "shape": [4], "dtype": "torch.no_such_type"},
        {transfer.MARKER: 0, "shape": [4], "dtype": "Tensor"},
        {transfer.MARKER: "0", "shape": [4], "dtype": "torch.float32"},
    ],
)
def test_a_forged_index_is_refused(tmp_path, entry):
    arena = tmp_path / f"{transfer.ARENA_PREFIX}{os.getpid()}_x"
    arena.write_bytes(b"\0" * 1024)
    index = tmp_path / "outputs.pt"
    torch.save({"tree": {"trials": [[entry]], "repeat": [], "timed": None}}, index)
    with pytest.raises(ValueError):
        load_outputs(str(index), str(arena), "cpu")


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    return int(child.stdout)


def test_arenas_of_dead_processes_are_removed(tmp_path):
    dead = dead_pid()
    stale = tmp_path / f"{transfer.ARENA_PREFIX}{dead}_abc"
    mine = tmp_path / f"{transfer.ARENA_PREFIX}{os.getpid()}_abc"
    stale.touch()
    mine.touch()
    assert remove_stale_arenas(tmp_path) == 1
    assert not stale.exists() and mine.exists()


def test_scratch_directories_of_dead_processes_are_removed(tmp_path):
    dead = dead_pid()
    stale = tmp_path / f"cuda_gym_judge_{dead}_abc"
    (stale / "solution").mkdir(parents=True)
    (stale / "solution" / "model_new.py").write_text("x = 1\n")
    live = tmp_path / f"cuda_gym_judge_{os.getpid()}_abc"
    live.mkdir()
    assert transfer.remove_stale(tmp_path, "cuda_gym_judge_") == 1
    assert not stale.exists() and live.exists()


def test_only_whole_byte_counts_are_kept_as_a_workers_peak_memory():
    from cuda_gym.judge.judge import _device_peak

    assert _device_peak({"allocated": 5, "reserved": 8}) == {"allocated": 5, "reserved": 8}
    assert _device_peak({"allocated": 5, "reserved": 8, "x": 1}) == {"allocated": 5, "reserved": 8}
    assert _device_peak({"allocated": 5}) is None
    assert _device_peak({"allocated": 5.0, "reserved": 8}) is None
    assert _device_peak({"allocated": -1, "reserved": 8}) is None
    assert _device_peak({"allocated": False, "reserved": 8}) is None
    assert _device_peak(None) is None and _device_peak([5, 8]) is None


def test_a_worker_that_never_used_cuda_reports_no_peak_memory():
    import torch  # noqa: F401  (imported, as in every worker, but CUDA is not initialised)

    from cuda_gym.judge.roles import device_peak as _device_peak

    assert _device_peak() is None
