"""Probe: how fast can a grouped-GEMM-shaped program read packed FP4 weights, by weight layout?

    PYTHONPATH=src python3 benchmarks/fp4_stream_probe.py [--experts 110 --rows 5760 --k 2880] [--ladder]

Each program streams one [ROWS_T, K] weight tile of one expert the way the decode GEMMs do --
ROWS_T rows, ``bytes_k`` bytes of each row per K step -- and only XOR-reduces the bytes (no
conversion, no MMA), so the time is the memory system's. Layouts: ``row`` (row-major
[E, N, K/2], a K step reads ROWS_T pieces ``row stride`` apart) and ``tile`` (each
[ROWS_T, bytes_k] piece of a K step contiguous, the steps of a row-tile one after the other).
Prints TB/s per (layout, bytes per row per step, warps). Not a benchmark of record: it isolates
whether the access pattern of the weights caps the FP4 decode GEMMs. ``--ladder``: the steps from
that stream to the decode GEMM's K step (``_ladder``: + the software pipeline and a wgmma, + the
scales and the E2M1 conversion), to see which one loses the bandwidth (H200, nineteenth session:
the stream reaches 2.2-2.8 TB/s from row-major weights, the GEMMs 1.7-2.4).
"""

import argparse

import torch
import triton
import triton.language as tl

from fusedmoe.kernels import _blockscaled as _bs


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


@triton.jit
def _words(w_ptr, r64, ki, stride_w, ROWS_T: tl.constexpr, BK: tl.constexpr, TILED: tl.constexpr):
    """The K step ``ki``'s [ROWS_T, BK/4] int16 words: row-major rows ``stride_w`` words apart, or
    tiled -- 64-row tiles of [K/32 chunks, 64 rows, 8 words] (a step of 64 rows one contiguous run),
    loaded as [ROWS_T, BK/32, 8] so that the 16-byte runs stay visible to Triton."""
    if TILED == 2:  # stepped: the kernels' tiled layout with TK = BK (_blockscaled._w_rows / _k_base)
        rows = _bs._w_rows(r64, 64 * stride_w, BK, 4)
        return tl.load(w_ptr + rows[:, None] + _bs._k_base(ki, BK, BK, 4) + tl.arange(0, BK // 4)[None, :])
    elif TILED:
        c = ki * (BK // 32) + tl.arange(0, BK // 32)
        ptrs = (w_ptr + ((r64 // 64) * (64 * stride_w) + (r64 % 64) * 8)[:, None, None] + (c * 512)[None, :, None]
                + tl.arange(0, 8)[None, None, :])
        return tl.reshape(tl.load(ptrs), [ROWS_T, BK // 4])
    else:
        return tl.load(w_ptr + r64[:, None] * stride_w + ki * (BK // 4) + tl.arange(0, BK // 4)[None, :])


@triton.jit
def _ladder(w_ptr, s_ptr, x_ptr, out_ptr, K_STEPS, K, stride_w, stride_s, ROWS_T: tl.constexpr, BK: tl.constexpr,
            MODE: tl.constexpr, TILED: tl.constexpr = 0):
    """One program = ROWS_T rows of MXFP4 weights (int16 view, row-major [rows, K/4] words; UE8M0
    scales row-major [rows, K/32]) over all K steps, against a 16-row bf16 activation tile (L2-
    resident): MODE 0 loads the words and XORs them; 1 also feeds them, bit-cast to bf16, to a wgmma
    (the pipeline and the MMA, no conversion); 2 is the decode GEMM's K step itself
    (``_blockscaled._load_tile``: scales, E2M1 conversion, KPERM order, then the wgmma). TILED 1 (modes
    0 and 1): the same bytes read as 64 x 32 tiles (``_words``) -- the layout the nineteenth session
    tried in the GEMMs (faster in the plain stream, slower in the GEMMs: which step turns it?);
    TILED 2 (all modes): "stepped" -- per 64-row tile, each K step's [64, BK] piece contiguous, read
    by a plain 2-D load (``_load_tile``'s KSTEP)."""
    t = tl.program_id(0)
    r64 = (t * ROWS_T + tl.arange(0, ROWS_T)).to(tl.int64)
    ok = tl.full([ROWS_T], 1, tl.int1)
    x_rows = tl.arange(0, 16).to(tl.int64)
    x_ok = tl.full([16], 1, tl.int1)
    if MODE == 0:
        acc0 = tl.zeros([ROWS_T, BK // 4], dtype=tl.int16)
        for ki in range(K_STEPS):
            acc0 ^= _words(w_ptr, r64, ki, stride_w, ROWS_T, BK, TILED)
        tl.store(out_ptr + t, tl.sum(tl.sum(acc0.to(tl.int32), axis=1), axis=0).to(tl.float32))
    elif MODE == 1:
        acc1 = tl.zeros([ROWS_T, 16], dtype=tl.float32)
        x1 = tl.load(x_ptr + x_rows[:, None] * K + tl.arange(0, BK // 4)[None, :])
        for ki in range(K_STEPS):
            w1 = _words(w_ptr, r64, ki, stride_w, ROWS_T, BK, TILED)
            acc1 = tl.dot(w1.to(tl.bfloat16, bitcast=True), tl.trans(x1), acc1)
        tl.store(out_ptr + t, tl.sum(tl.sum(acc1, axis=1), axis=0))
    else:
        acc2 = tl.zeros([ROWS_T, 16], dtype=tl.float32)
        # MODE 3: every program reads the scales of the same 8 rows (L1 / L2 hits): the K step without
        # the DRAM latency of its scale load
        s_rows = (r64 % 8) * stride_s if MODE == 3 else r64 * stride_s
        for ki in range(K_STEPS):
            if TILED == 2:
                w2 = _bs._load_tile(w_ptr, _bs._w_rows(r64, 64 * stride_w, BK, 4), s_ptr, s_rows, 1, ki, K, ok,
                                    _bs.F_MXFP4, ROWS_T, BK, True, tl.bfloat16, True, 3, BK)
            else:
                w2 = _bs._load_tile(w_ptr, r64 * stride_w, s_ptr, s_rows, 1, ki, K, ok, _bs.F_MXFP4, ROWS_T,
                                    BK, True, tl.bfloat16, True, 3)
            # MODE 4: the activations stored in the dot's K order already (their producer permuted them):
            # the tile goes from cp.async to the wgmma without the register permutation
            x2 = _bs._load_tile(x_ptr, x_rows * K, x_ptr, x_rows, 1, ki, K, x_ok, _bs.F_PLAIN, 16, BK, True,
                                tl.bfloat16, True, 0 if MODE == 4 else 3)
            acc2 = tl.dot(w2, tl.trans(x2), acc2)
        tl.store(out_ptr + t, tl.sum(tl.sum(acc2, axis=1), axis=0))


def ladder(E, N, K, reps, flush, quick=False):
    """MODEs 0-4 of ``_ladder`` at the decode GEMM's tiles: where the bandwidth goes (``quick``: the
    GEMM K step only -- DRAM vs cached scales, activations permuted in registers or stored permuted --
    three tiles)."""
    rows = E * N
    w = torch.randint(-2**15, 2**15 - 1, (rows, K // 4), dtype=torch.int16, device="cuda")
    s = torch.randint(118, 128, (rows, K // 32), dtype=torch.uint8, device="cuda")
    x = torch.randn(16, K, device="cuda").to(torch.bfloat16)
    nbytes = rows * (K // 2 + K // 32)
    print(f"ladder: {E} experts x {N} rows x K {K}: {nbytes / 1e6:.0f} MB of MXFP4 values and scales")
    print("mode               rows_t  block_k  warps  stages   us      TB/s")
    names = {0: "load+xor", 1: "load+wgmma", 2: "gemm K step", 3: "K step L1 scales", 4: "K step x in K order"}
    tiles = ((128, 64, 4, 5), (128, 64, 8, 5), (64, 64, 4, 5), (128, 128, 4, 4), (128, 128, 8, 4), (64, 128, 4, 4),
             (64, 128, 8, 4), (64, 256, 8, 3))
    modes = ((0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 2), (3, 0), (3, 2), (4, 2))
    if quick:
        tiles, modes = ((128, 64, 4, 5), (64, 64, 4, 5), (128, 128, 4, 4)), ((2, 0), (2, 2), (3, 0), (3, 2), (4, 2))
    for rows_t, bk, warps, stages in tiles:
        n_tiles = rows // rows_t
        out = torch.empty(n_tiles, dtype=torch.float32, device="cuda")
        for mode, tiled in modes:
            args = (w, s, x, out, K // bk, K, w.stride(0), s.stride(0))
            kw = dict(ROWS_T=rows_t, BK=bk, MODE=mode, TILED=tiled, num_warps=warps, num_stages=stages)
            t = _time(lambda: _ladder[(n_tiles,)](*args, **kw), reps, flush)
            name = names[mode] + ("", " tiled", " stepped")[tiled]
            print(f"{name:17s}  {rows_t:6d}  {bk:7d}  {warps:5d}  {stages:6d}  {t:7.1f}  {nbytes / t / 1e6:6.2f}",
                  flush=True)


def _time(fn, reps, flush):
    fn()
    ts = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return sorted(ts)[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experts", type=int, default=110)
    ap.add_argument("--rows", type=int, default=5760)
    ap.add_argument("--k", type=int, default=2880)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--ladder", action="store_true", help="also the steps from a plain stream to the GEMM's K step")
    ap.add_argument("--quick-ladder", action="store_true", help="only the ladder's K step, DRAM vs cached scales")
    a = ap.parse_args()
    E, N, K = a.experts, a.rows, a.k
    kb = K // 2  # bytes per row
    nbytes = E * N * kb
    w = torch.randint(-2**31, 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device="cuda")
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    print(f"{E} experts x {N} rows x {kb} bytes = {nbytes / 1e6:.0f} MB")
    if not a.quick_ladder:
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
                        t = _time(lambda: _stream[(n_tiles,)](*args, **kw), a.reps, flush)
                        print(f"{'tile' if tiled else 'row':6s}  {rows_t:6d}  {bytes_k:14d}  {warps:5d}  {t:7.1f}  "
                              f"{nbytes / t / 1e6:6.2f}", flush=True)
    if a.ladder or a.quick_ladder:
        del w
        ladder(E, N, K, a.reps, flush, quick=a.quick_ladder)


if __name__ == "__main__":
    main()
