"""The output hand-over on a real GPU: the arena's pages are registered with the CUDA driver
while outputs are copied through them, and a refused registration leaves PyTorch working.
Run with: python -m pytest -m gpu"""

import contextlib

import pytest
import torch

from cuda_gym.judge import pinning
from cuda_gym.judge.transfer import ArenaPool, OutputWriter, load_outputs, to_device

pytestmark = pytest.mark.gpu


def test_outputs_cross_through_registered_pages(tmp_path):
    outputs = [torch.randn(48 << 20, device="cuda"), torch.arange(5, device="cuda")]  # 192 MiB
    # The judge's own arena directory (/dev/shm): Linux refuses to pin pages of files on a
    # disk filesystem (pytest's tmp_path) for long, and there the copies stay pageable.
    pool = ArenaPool()
    with pool.lease() as arena:
        writer = OutputWriter(str(arena))
        writer.save({"trials": [writer.put(outputs)]}, str(tmp_path / "index.pt"))
        assert writer.pinned_bytes == writer.arena_bytes > 0
        with contextlib.ExitStack() as hold:
            lazy = load_outputs(str(tmp_path / "index.pt"), str(arena), None, hold)
            view = lazy["trials"][0][0]
            # Registered now: registering the same pages again is refused.
            with pinning.registered(view) as again:
                assert again is False
            back = to_device(lazy, "cuda")
        # Released when `hold` closed: the pages can be registered again.
        with pinning.registered(view) as again:
            assert again is True
        del lazy, view
    pool.close()
    assert torch.equal(back["trials"][0][0], outputs[0])
    assert torch.equal(back["trials"][0][1], outputs[1])
    # The refused registration above left no error for PyTorch's next launch check.
    assert float((outputs[0] * 0 + 1).sum()) == outputs[0].numel()
