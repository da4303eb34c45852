"""Incremental build directories: a build never waits for a lineage's busy slots."""

import fcntl
import hashlib
import json
import threading

from cuda_gym.judge.build import INCREMENTAL_SLOTS, incremental_slot


def _hold_every_slot(root):
    locks = []
    for i in range(INCREMENTAL_SLOTS):
        lock = open(root / f"slot{i}.lock", "w")  # noqa: SIM115 - closed by the caller
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        locks.append(lock)
    return locks


def test_a_free_slot_is_used_and_the_best_matching_one_first(tmp_path):
    files = {"kernel.cpp": b"a", "binding.cpp": b"b"}
    with incremental_slot(tmp_path, files) as slot:
        assert slot.parent == tmp_path and slot.name.startswith("slot")
        slot.mkdir()
        manifest = {"kernel.cpp": hashlib.sha256(b"a").hexdigest()}
        (slot / "manifest.json").write_text(json.dumps(manifest))
    with incremental_slot(tmp_path, files) as again:
        assert again == slot  # the sources it last built match best


def test_with_every_slot_busy_a_build_gets_a_spare_directory_at_once(tmp_path):
    locks = _hold_every_slot(tmp_path)
    try:
        got = []

        def build():
            with incremental_slot(tmp_path, {"kernel.cpp": b"a"}) as slot:
                got.append(slot)
                assert slot.is_dir() and not slot.name.startswith("slot")
                (slot / "build").mkdir()

        thread = threading.Thread(target=build)
        thread.start()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the build waited for a busy slot"
        assert got and not got[0].exists()  # the spare is removed after the build
    finally:
        for lock in locks:
            lock.close()
