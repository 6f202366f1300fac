"""Shared test-data helpers (imported by the kernel tests; not a test module)."""

import os
import subprocess
import sys

import torch


def distinct_topk_ids(T: int, K: int, E: int, offset: int, E_glob: int, g: torch.Generator) -> torch.Tensor:
    """int32 [T, K] expert ids like a real top-k: distinct within a row, drawn from the E_glob global
    experts, each row holding at least one local expert (``[offset, offset + E)``) in a random slot,
    so that no output row is trivially zero under expert parallelism. Host tensor, drawn from ``g``."""
    rows = []
    for _ in range(T):
        loc = offset + int(torch.randint(0, E, (1,), generator=g))
        others = [int(i) for i in torch.randperm(E_glob, generator=g) if int(i) != loc][: K - 1]
        row = others + [loc]
        rows.append([row[i] for i in torch.randperm(K, generator=g).tolist()])
    return torch.tensor(rows, dtype=torch.int32).reshape(T, K)


def env_starts(setter: str, env: str, want: dict) -> None:
    """A fresh process with ``env`` set to each key of ``want`` starts with ``triton_moe.<setter>``'s setting at its
    value (what the setter returns)."""
    code = f"from fusedmoe.backends import triton_moe as tm; print(tm.{setter}(False))"
    for val, on in want.items():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, env: val}).stdout.strip()
        assert out == str(on), (env, val, out)


def assert_dyn_counters_zero() -> None:
    """The cached tile-counter pairs of the warp-specialized prefill GEMMs (``triton_moe._WS_DYN``, ``DYN``) are all
    back at zero: each launch leaves its pair so for the next."""
    from fusedmoe.backends import triton_moe as tm

    for pairs in tm._WS_DYN["counters"].values():
        assert [c.tolist() for c in pairs] == [[0, 0]] * 2, pairs
