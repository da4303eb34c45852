"""Trusted caches: a tampered, truncated or unsigned entry is discarded and computed again."""

import json
import logging

import pytest

from cuda_gym.judge import JudgeConfig
from cuda_gym.judge.baselines import KEY_FILE, JsonCache
from cuda_gym.judge.build import SEAL_FILE, _sealed_slot, build_kernels, seal_dir


def test_an_intact_entry_reads_back(tmp_path):
    cache = JsonCache(tmp_path, "baselines")
    cache.put("k", {"eager": {"median_ms": 0.19}})
    assert cache.get("k") == {"eager": {"median_ms": 0.19}}
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    # Another cache object on the same directory shares the key.
    assert JsonCache(tmp_path, "baselines").get("k") == {"eager": {"median_ms": 0.19}}


@pytest.mark.parametrize("damage", ["rewrite", "truncate", "unsigned", "resigned"])
def test_a_damaged_entry_is_discarded_with_a_log_line(tmp_path, caplog, damage):
    cache = JsonCache(tmp_path, "baselines")
    cache.put("k", {"eager": {"median_ms": 0.19}})
    path = tmp_path / "baselines" / "k.json"
    stored = path.read_bytes()
    if damage == "rewrite":  # the attack seen: baselines x1000
        path.write_bytes(stored.replace(b"0.19", b"190.0"))
    elif damage == "truncate":
        path.write_bytes(stored[: len(stored) // 2])
    elif damage == "unsigned":  # the format before entries were sealed
        path.write_text(json.dumps({"eager": {"median_ms": 0.19}}))
    else:  # sealed again with a key of the attacker's
        mac, _, data = stored.partition(b"\n")
        path.write_bytes(b"0" * len(mac) + b"\n" + data)
    with caplog.at_level(logging.WARNING, logger="cuda_gym.judge.baselines"):
        assert cache.get("k") is None
    assert "discarding" in caplog.text
    assert not path.exists()
    cache.put("k", {"eager": {"median_ms": 0.2}})
    assert cache.get("k") == {"eager": {"median_ms": 0.2}}


def test_an_altered_work_directory_is_emptied_before_reuse(tmp_path, caplog):
    cache = tmp_path / "cache"
    slot = tmp_path / "slot0"
    with _sealed_slot(slot, cache):
        (slot / "build").mkdir()
        (slot / "build" / "binding.o").write_bytes(b"honest object")
        (slot / "build" / "build.ninja").write_text("rule cxx\n")
    with _sealed_slot(slot, cache):  # intact: kept for an incremental build
        assert (slot / "build" / "binding.o").read_bytes() == b"honest object"
    (slot / "build" / "binding.o").write_bytes(b"attacker object")  # the poisoned slot
    with caplog.at_level(logging.WARNING, logger="cuda_gym.judge.build"):
        with _sealed_slot(slot, cache):
            assert not (slot / "build").exists()
    assert "discarding" in caplog.text
    # A file planted beside sealed ones counts as a change too.
    (slot / "kernels_ext.py").write_text("import os")
    with _sealed_slot(slot, cache):
        assert not (slot / "kernels_ext.py").exists()


def test_a_seal_lists_every_file(tmp_path):
    root = tmp_path / "build"
    root.mkdir()
    (root / "kernels_ext.so").write_bytes(b"\x7fELF")
    seal_dir(root, tmp_path / "cache")
    assert (root / SEAL_FILE).read_bytes().count(b"kernels_ext.so") == 1


@pytest.mark.slow
def test_a_tampered_cached_build_is_built_again(tmp_path, caplog):
    config = JudgeConfig(device="cpu", cache_dir=tmp_path / "cache")
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "k.cpp").write_text('extern "C" int seven(void) { return 7; }\n')
    first = build_kernels(kernels, config)
    assert first.ok and not first.cached, first.errors
    assert build_kernels(kernels, config).cached
    library = next(p for p in (tmp_path / first.module_dir).rglob("*.so"))
    library.write_bytes(library.read_bytes() + b"\0")
    with caplog.at_level(logging.WARNING, logger="cuda_gym.judge.build"):
        again = build_kernels(kernels, config)
    assert again.ok and not again.cached and "discarding" in caplog.text
    assert build_kernels(kernels, config).cached
