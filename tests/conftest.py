"""Shared fixtures: a private build/baseline cache per test session, and GPU test skipping."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Every build and baseline of this session goes to a fresh cache directory."""
    path = tmp_path_factory.mktemp("cuda_gym_cache")
    old = os.environ.get("CUDA_GYM_CACHE")
    os.environ["CUDA_GYM_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("CUDA_GYM_CACHE", None)
    else:
        os.environ["CUDA_GYM_CACHE"] = old


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # torch missing or broken: no GPU tests
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
