"""Probe: how fast can a grouped-GEMM-shaped program read packed FP4 weights, by weight layout?

    PYTHONPATH=src python3 benchmarks/fp4_stream_probe.py [--experts 110 --rows 5760 --k 2880]

Each program streams one [ROWS_T, K] weight tile of one expert the way the decode GEMMs do --
ROWS_T rows, ``bytes_k`` bytes of each row per K step -- and only XOR-reduces the bytes (no
conversion, no MMA), so the time is the memory system's. Layouts: ``row`` (row-major
[E, N, K/2], a K step reads ROWS_T pieces ``row stride`` apart) and ``tile`` (each
[ROWS_T, bytes_k] piece of a K step contiguous, the steps of a row-tile one after the other).
Prints TB/s per (layout, bytes per row per step, warps). Not a benchmark of record: it isolates
whether the access pattern of the weights caps the FP4 decode GEMMs.
"""

import argparse

import torch
import triton
import triton.language as tl


@triton.jit
def _stream(w_ptr, out_ptr, n_tiles, K_STEPS, row_stride, tile_stride, step_stride, ROWS_T: tl.constexpr,
            BYTES_K: tl.constexpr, TILED: tl.constexpr):
    t = tl.program_id(0)
    r = tl.arange(0, ROWS_T)
    c = tl.arange(0, BYTES_K // 4)  # int32 words
    base = w_ptr + t.to(tl.int64) * tile_stride
    acc = tl.zeros([ROWS_T, BYTES_K // 4], dtype=tl.int32)
    for ks in range(K_STEPS):
        if TILED:
            off = ks * step_stride + r[:, None] * (BYTES_K // 4) + c[None, :]
        else:
            off = r[:, None] * row_stride + ks * (BYTES_K // 4) + c[None, :]
        acc ^= tl.load(base + off)
    tl.store(out_ptr + t, tl.sum(tl.sum(acc, axis=1), axis=0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experts", type=int, default=110)
    ap.add_argument("--rows", type=int, default=5760)
    ap.add_argument("--k", type=int, default=2880)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    E, N, K = a.experts, a.rows, a.k
    kb = K // 2  # bytes per row
    nbytes = E * N * kb
    w = torch.randint(-2**31, 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device="cuda")
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    print(f"{E} experts x {N} rows x {kb} bytes = {nbytes / 1e6:.0f} MB")
    print("layout  rows_t  bytes/row/step  warps   us      TB/s")
    for rows_t in (64, 128):
        for bytes_k in (32, 64, 128):
            steps = kb // bytes_k
            n_tiles = E * N // rows_t
            for tiled in (False, True):
                for warps in (4, 8):
                    out = torch.empty(n_tiles, dtype=torch.int32, device="cuda")
                    args = (w, out, n_tiles, steps, kb // 4, rows_t * kb // 4, rows_t * bytes_k // 4)
                    kw = dict(ROWS_T=rows_t, BYTES_K=bytes_k, TILED=tiled, num_warps=warps, num_stages=4)
                    _stream[(n_tiles,)](*args, **kw)
                    ts = []
                    for _ in range(a.reps):
                        flush.zero_()
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        _stream[(n_tiles,)](*args, **kw)
                        e.record()
                        torch.cuda.synchronize()
                        ts.append(s.elapsed_time(e) * 1e3)
                    t = sorted(ts)[len(ts) // 2]
                    print(f"{'tile' if tiled else 'row':6s}  {rows_t:6d}  {bytes_k:14d}  {warps:5d}  {t:7.1f}  "
                          f"{nbytes / t / 1e6:6.2f}", flush=True)


if __name__ == "__main__":
    main()
