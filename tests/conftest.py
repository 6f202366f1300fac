"""Shared test setup: GPU tests (marker ``gpu``) are skipped where no CUDA device exists."""

import os

import torch

# Triton's interpreter must be chosen before triton is first imported (its language builtins are
# created then): on machines without CUDA, every Triton kernel in the tests runs interpreted.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _release_gpu_memory(request):
    """GPU tests build multi-GB real-shape problems; hand the cached blocks back after each one so
    that several test workers can share the GPU (the caching allocator would otherwise keep every
    worker's high-water mark)."""
    yield
    if torch.cuda.is_available() and "gpu" in request.keywords:
        import gc

        gc.collect()
        torch.cuda.empty_cache()
