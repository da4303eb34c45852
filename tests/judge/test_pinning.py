"""Registering host pages with the CUDA driver around large copies (cuda_gym.judge.pinning)."""

import mmap

import pytest
import torch

from cuda_gym.judge import pinning
from cuda_gym.judge.pinning import page_span, registered

PAGE = mmap.PAGESIZE


class FakeDriver:
    """Records the driver calls; cuMemHostRegister_v2 returns `status`."""

    def __init__(self, status: int = 0) -> None:
        self.status = status
        self.calls: list[tuple] = []

    def cuMemHostRegister_v2(self, start, length, flags):  # noqa: N802 (the driver's name)
        self.calls.append(("register", start, length, flags))
        return self.status

    def cuMemHostUnregister(self, start):  # noqa: N802
        self.calls.append(("unregister", start))
        return 0


@pytest.fixture
def driver(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(pinning, "_driver", lambda: fake)
    monkeypatch.setattr(pinning, "MIN_BYTES", PAGE)
    monkeypatch.delenv(pinning.PIN_ENV, raising=False)
    return fake


def test_page_span_keeps_only_whole_pages():
    assert page_span(0, 3 * PAGE) == (0, 3 * PAGE)
    assert page_span(10, 3 * PAGE) == (PAGE, 2 * PAGE)
    assert page_span(PAGE - 1, PAGE) == (PAGE, 0)
    assert page_span(5 * PAGE, 0) == (5 * PAGE, 0)


def test_registers_the_pages_for_the_block_then_releases_them(driver):
    host = torch.empty(8 * PAGE, dtype=torch.uint8)
    start, length = page_span(host.data_ptr(), 8 * PAGE)
    with registered(host) as pinned:
        assert pinned is True
        assert driver.calls == [("register", start, length, pinning.CU_MEMHOSTREGISTER_PORTABLE)]
    assert driver.calls[-1] == ("unregister", start)


def test_released_when_the_block_raises(driver):
    host = torch.empty(8 * PAGE, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="copy failed"):
        with registered(host):
            raise RuntimeError("copy failed")
    assert [c[0] for c in driver.calls] == ["register", "unregister"]


def test_a_refused_registration_runs_the_block_pageable(driver):
    driver.status = 201  # CUDA_ERROR_INVALID_CONTEXT
    host = torch.empty(8 * PAGE, dtype=torch.uint8)
    ran = False
    with registered(host) as pinned:
        ran = True
        assert pinned is False
    assert ran and [c[0] for c in driver.calls] == ["register"]


def test_small_buffers_switched_off_or_no_driver_are_not_registered(driver, monkeypatch):
    with registered(torch.empty(PAGE // 2, dtype=torch.uint8)) as pinned:
        assert pinned is False
    monkeypatch.setenv(pinning.PIN_ENV, "0")
    with registered(torch.empty(8 * PAGE, dtype=torch.uint8)) as pinned:
        assert pinned is False
    assert driver.calls == []
    monkeypatch.delenv(pinning.PIN_ENV)
    monkeypatch.setattr(pinning, "_driver", lambda: None)
    with registered(torch.empty(8 * PAGE, dtype=torch.uint8)) as pinned:
        assert pinned is False


def test_the_reader_registers_the_pages_its_views_use_until_hold_closes(
    driver, tmp_path, monkeypatch
):
    import contextlib

    from cuda_gym.judge import transfer
    from cuda_gym.judge.transfer import ArenaPool, OutputWriter, load_outputs, to_device

    # The arena must grow however full the test machine's disk is (else the writer falls back
    # to host copies and there is nothing to register).
    monkeypatch.setattr(transfer, "ROOM_SHARE", 0.0)
    monkeypatch.setattr(transfer, "ROOM_MIN_BYTES", 0)
    tree = {"trials": [[torch.randn(3 * PAGE)]], "repeat": [], "timed": None}
    with ArenaPool(tmp_path).lease() as arena:
        writer = OutputWriter(str(arena))
        writer.save(writer.put(tree), str(tmp_path / "index.pt"))
        assert writer.arena_bytes > 0 and writer.host_bytes == 0
        assert arena.stat().st_size % PAGE == 0  # whole pages, all registrable
        assert writer.pinned_bytes == 0  # host tensors: nothing to register for
        with contextlib.ExitStack() as hold:
            lazy = load_outputs(str(tmp_path / "index.pt"), str(arena), None, hold)
            assert [c[0] for c in driver.calls] == ["register"]
            assert driver.calls[0][2] >= 3 * PAGE * 4 - PAGE
            back = to_device(lazy, "cpu")
        assert [c[0] for c in driver.calls] == ["register", "unregister"]
    assert torch.equal(back["trials"][0][0], tree["trials"][0][0])
