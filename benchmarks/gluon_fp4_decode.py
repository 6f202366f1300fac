"""Prototype: a warp-specialized Gluon GEMM for MXFP4 weights at decode (1-16 token rows an expert), to learn
whether the one-token FP4 GEMMs can stream their weights at >= 3.4 TB/s on the H200 before building the library
kernel (issue 4's decode target; the Triton kernels reach 1.1-1.6 TB/s, a bare Triton stream of the same bytes
~2.2 TB/s at that program count: BENCHMARKS.md, twenty-eighth session).

    PYTHONPATH=src python3 benchmarks/gluon_fp4_decode.py [--preset gpt-oss-120b] [--tokens 1] [--quick]
    PYTHONPATH=src python3 benchmarks/gluon_fp4_decode.py --compile-only     # sm_90 SASS on any machine

Structure (``_dec_kernel``): persistent, ``NCONS`` consumer warpgroups a program, each with its own TMA loader
warp and ring of ``STAGES`` slots; a work unit is (expert, 64 weight rows, a 1 / SPLIT share of K). The loader
streams the unit's K steps -- the step's [64 rows, 64 K] box of FP4 values (2 KB, 16-bit words of ExpertWeights'
tiled / swizzled layout) and the expert's [XT, 64] BF16 token rows -- ahead into the ring. The consumer loads its
words from shared memory straight into registers (each thread 4 words = 16 K values of two rows), converts them
with the library's PTX E2M1 converter (MX fold) and issues a wgmma with the weights as the REGISTER operand
(``DotOperandLayout``) and the token rows from shared memory: no BF16 weight tile goes through shared memory (a
[64, 64] BF16 tile stored and read back per step would move 8x the FP4 bytes through shared memory: at HBM speed
that alone is ~130 % of the shared-memory bandwidth). That needs the token rows in the "dot order" along K
(``dot_order_cols``): the converter's output register j holds nibble s of two consecutive words, which the wgmma
register fragment must see as one K pair, so K position ``16 c + 8 m + 4 p + s`` (thread column c, word 2m + p,
nibble s) sits at dot position ``16 s + 8 m + 2 c + p``; the weights keep their layout. One wgmma in flight per
warpgroup; the step's ring slot released once its wgmma retired. Each unit stores its fp32 partial sums
[64, XT] (SPLIT > 1: one slice per share, summed on the host here; the library kernel would reduce them).

Checks the result against ``fm.dequantize`` of the same weights (fp32 matmul) and prints µs and TB/s of the
weight bytes (values and scales) for each setting (STAGES, SPLIT, NCONS, XT). Not a benchmark of record.
"""

import argparse
import os
import sys

import torch
import triton  # noqa: F401  (the Gluon runtime needs triton imported first)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from fusedmoe.kernels import _blockscaled as _bs

_MX_FOLD_EXP_BIAS = gl.constexpr(110)


@gluon.jit
def _unit_ids(u, R_TILES, SPLIT: gl.constexpr):
    e = u // (R_TILES * SPLIT)
    rem = u % (R_TILES * SPLIT)
    return e, rem // SPLIT, rem % SPLIT


@gluon.jit
def _dec_loader(x_desc, w_desc, x_bufs, w_bufs, ready, empty, q, NQ, rb, n_units, R_TILES, K_PIECES, n_k, n64,
                TK: gl.constexpr, XT: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr, KB: gl.constexpr):
    """TMA producer (one warp) of consumer slot ``q``'s ring (slots ``rb + [0, STAGES)``): per step (KB x 64 K
    values) KB [64, 64] boxes of FP4 words and KB [XT, 64] boxes of the expert's token rows. 64-wide blocks past
    K (the last step of a K not a multiple of KB x 64) load token rows of zeros (TMA's bounds) and whatever words
    follow (finite E2M1, masked scales): their products are zero -- wasted bytes, so pick KB to divide K / 64."""
    xbytes: gl.constexpr = x_desc.block_type.nbytes
    wbytes: gl.constexpr = w_desc.block_type.nbytes
    it = 0
    for u in range(q, n_units, NQ):  # consumer slot q of NQ: units q, q + NQ, ...
        e, rt, ks = _unit_ids(u, R_TILES, SPLIT)
        k0 = (n_k * ks) // SPLIT
        k1 = (n_k * (ks + 1)) // SPLIT
        base = (e * R_TILES + rt) * K_PIECES
        for kk in range(k0, k1):
            s = it % STAGES
            mbarrier.wait(empty.index(rb + s), ((it // STAGES) & 1) ^ 1)
            bar = ready.index(rb + s)
            mbarrier.expect(bar, KB * (xbytes + wbytes))
            for h in gl.static_range(KB):
                kq = kk * KB + h  # the 64-wide K block
                slot = (rb + s) * KB + h
                tma.async_copy_global_to_shared(x_desc, [e * XT, kq * 64], bar, x_bufs.index(slot))
                piece = (kq * 64) // TK
                col = ((kq * 64) % TK) // 4
                tma.async_copy_global_to_shared(w_desc, [(base + piece) * 64, col], bar, w_bufs.index(slot))
            it += 1


@gluon.jit
def _dec_a_operand(words, sc, SWZ: gl.constexpr, dot_l: gl.constexpr):
    """[4 warps, 2 row halves, 8 row groups, 4 columns c, 4 words] int16 -> the wgmma's register A [64, 64] bf16
    in dot order (module docstring), times the block scales ``sc`` [4, 2, 8, 4] (UE8M0 codes, MX fold)."""
    n0, n1, n2, n3 = _bs._e2m1x4_bf16_nib(words, False, SWZ)  # nibble s of word j: K 4 j + s (e2m1 * 2^-126)
    f = ((sc.to(gl.int32) + _MX_FOLD_EXP_BIAS) << 7).to(gl.int16).to(gl.bfloat16, bitcast=True)[:, :, :, :, None]
    v = gl.join(gl.join(n0 * f, n1 * f), gl.join(n2 * f, n3 * f))  # [w, h, g, c, word, s & 1, s >> 1]
    v = gl.reshape(v, [4, 2, 8, 4, 2, 2, 2, 2])  # [w, h, g, c, m, p, s0, s1]
    v = gl.permute(v, [0, 1, 2, 7, 6, 4, 3, 5])  # [w, h, g, s1, s0, m, c, p]: row 16 w + 8 h + g, dot k 16 s + 8 m + 2 c + p
    return gl.convert_layout(gl.reshape(v, [64, 64]), dot_l)


@gluon.jit
def _dec_consumer(x_bufs, w_bufs, ready, empty, out_ptr, s_ptr, q, NQ, rb, n_units, R_TILES, R, n_k, n64,
                  stride_se, stride_sr, stride_os, XT: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
                  SWZ: gl.constexpr, KB: gl.constexpr):
    """Consumer warpgroup: per unit, its K steps of KB 64-wide blocks, each block's weights converted into the
    wgmma's register operand and multiplied with the block's token rows; one wgmma in flight (each block's A
    registers kept alive -- a ``deps`` of the next wait -- until its wgmma retired); then the fp32 partial sums."""
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, XT, 16])
    dot_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    # a thread: rows 16 w + g and 16 w + 8 + g (g = lane // 4), words 4 c .. 4 c + 3 (c = lane % 4)
    wl: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 2, 1, 1, 4], threads_per_warp=[1, 1, 8, 4, 1],
                                        warps_per_cta=[4, 1, 1, 1, 1], order=[4, 3, 2, 1, 0])
    sl: gl.constexpr = gl.SliceLayout(4, wl)
    rw = gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, sl))))
    rh = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, sl))))
    rg = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, sl))))
    cc = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, sl))))
    row = (rw[:, None, None, None] * 16 + rh[None, :, None, None] * 8 + rg[None, None, :, None])
    blk = cc[None, None, None, :] // 2  # the thread's 16 values lie in MX block c // 2 of the 64-wide block
    it = 0
    a_prev = gl.zeros((64, 64), gl.bfloat16, layout=dot_l)
    for u in range(q, n_units, NQ):  # consumer slot q of NQ: units q, q + NQ, ...
        e, rt, ks = _unit_ids(u, R_TILES, SPLIT)
        k0 = (n_k * ks) // SPLIT
        k1 = (n_k * (ks + 1)) // SPLIT
        sp = s_ptr + e.to(gl.int64) * stride_se + (rt * 64 + row).to(gl.int64) * stride_sr + blk
        acc = gl.zeros((64, XT), dtype=gl.float32, layout=acc_l)
        # block scales two 64-wide blocks ahead (L1 / L2 hits mostly: a row's 32-byte sector serves 8 blocks); past
        # the unit's last block the last one again (no masks: the index is uniform, a clamp is one instruction)
        b_last = gl.minimum(k1 * KB, n64) - 1
        sc = gl.load(sp + (k0 * KB) * 2)
        sc_n = gl.load(sp + gl.minimum(k0 * KB + 1, b_last) * 2)
        for kk in range(k0, k1):
            s = it % STAGES
            mbarrier.wait(ready.index(rb + s), (it // STAGES) & 1)
            for h in gl.static_range(KB):
                b = kk * KB + h
                sc_nn = gl.load(sp + gl.minimum(b + 2, b_last) * 2)
                words = w_bufs.index((rb + s) * KB + h).reshape([4, 2, 8, 4, 4]).load(wl)
                a = _dec_a_operand(words, sc, SWZ, dot_l)
                acc = warpgroup_mma(a, x_bufs.index((rb + s) * KB + h).permute((1, 0)), acc, is_async=True)
                acc, a_prev = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a_prev))  # the previous block's
                a_prev = a
                if h == 0:
                    if kk > k0:  # the previous step's last wgmma retired: its ring slot is free
                        mbarrier.arrive(empty.index(rb + (it + STAGES - 1) % STAGES), count=1)
                sc = sc_n
                sc_n = sc_nn
            it += 1
        acc, a_prev = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a_prev))
        mbarrier.arrive(empty.index(rb + (it + STAGES - 1) % STAGES), count=1)
        acc = acc * 65536.0  # the MX fold's 2^16
        ol: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, XT // 4], threads_per_warp=[32, 1],
                                            warps_per_cta=[4, 1], order=[1, 0])
        o = gl.convert_layout(acc, ol)
        r = gl.arange(0, 64, layout=gl.SliceLayout(1, ol))
        t = gl.arange(0, XT, layout=gl.SliceLayout(0, ol))
        offs = ks.to(gl.int64) * stride_os + ((e * R + rt * 64 + r).to(gl.int64) * XT)[:, None] + t[None, :]
        gl.store(out_ptr + offs, o)


@gluon.jit
def _dec_kernel(x_desc, w_desc, out_ptr, s_ptr, n_units, R_TILES, R, K_PIECES, n_k, n64, stride_se, stride_sr,
                stride_os, TK: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr, SWZ: gl.constexpr,
                NCONS: gl.constexpr, KB: gl.constexpr, CREGS: gl.constexpr):
    """Persistent; ``NCONS`` consumer warpgroups (1-3) a program, each with its own loader warp and ring."""
    XT: gl.constexpr = x_desc.block_type.shape[0]
    NQ = gl.num_programs(0) * NCONS
    q0 = gl.program_id(0) * NCONS
    xb = gl.allocate_shared_memory(x_desc.dtype, [NCONS * STAGES * KB] + x_desc.block_type.shape, x_desc.layout)
    wb = gl.allocate_shared_memory(w_desc.dtype, [NCONS * STAGES * KB] + w_desc.block_type.shape, w_desc.layout)
    rd = gl.allocate_shared_memory(gl.int64, [NCONS * STAGES, 1], mbarrier.MBarrierLayout())
    em = gl.allocate_shared_memory(gl.int64, [NCONS * STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(NCONS * STAGES):
        mbarrier.init(rd.index(s), count=1)
        mbarrier.init(em.index(s), count=1)
    if NCONS == 1:
        gl.warp_specialize([
            (_dec_consumer, (xb, wb, rd, em, out_ptr, s_ptr, q0, NQ, 0, n_units, R_TILES, R, n_k, n64, stride_se,
                             stride_sr, stride_os, XT, STAGES, SPLIT, SWZ, KB)),
            (_dec_loader, (x_desc, w_desc, xb, wb, rd, em, q0, NQ, 0, n_units, R_TILES, K_PIECES, n_k, n64, TK, XT,
                           STAGES, SPLIT, KB)),
        ], [1], [40])
    elif NCONS == 2:
        gl.warp_specialize([
            (_dec_consumer, (xb, wb, rd, em, out_ptr, s_ptr, q0, NQ, 0, n_units, R_TILES, R, n_k, n64, stride_se,
                             stride_sr, stride_os, XT, STAGES, SPLIT, SWZ, KB)),
            (_dec_consumer, (xb, wb, rd, em, out_ptr, s_ptr, q0 + 1, NQ, STAGES, n_units, R_TILES, R, n_k, n64,
                             stride_se, stride_sr, stride_os, XT, STAGES, SPLIT, SWZ, KB)),
            (_dec_loader, (x_desc, w_desc, xb, wb, rd, em, q0, NQ, 0, n_units, R_TILES, K_PIECES, n_k, n64, TK, XT,
                           STAGES, SPLIT, KB)),
            (_dec_loader, (x_desc, w_desc, xb, wb, rd, em, q0 + 1, NQ, STAGES, n_units, R_TILES, K_PIECES, n_k, n64,
                           TK, XT, STAGES, SPLIT, KB)),
        ], [4, 1, 1], [CREGS, 40, 40])
    else:
        gl.warp_specialize([
            (_dec_consumer, (xb, wb, rd, em, out_ptr, s_ptr, q0, NQ, 0, n_units, R_TILES, R, n_k, n64, stride_se,
                             stride_sr, stride_os, XT, STAGES, SPLIT, SWZ, KB)),
            (_dec_consumer, (xb, wb, rd, em, out_ptr, s_ptr, q0 + 1, NQ, STAGES, n_units, R_TILES, R, n_k, n64,
                             stride_se, stride_sr, stride_os, XT, STAGES, SPLIT, SWZ, KB)),
            (_dec_consumer, (xb, wb, rd, em, out_ptr, s_ptr, q0 + 2, NQ, 2 * STAGES, n_units, R_TILES, R, n_k, n64,
                             stride_se, stride_sr, stride_os, XT, STAGES, SPLIT, SWZ, KB)),
            (_dec_loader, (x_desc, w_desc, xb, wb, rd, em, q0, NQ, 0, n_units, R_TILES, K_PIECES, n_k, n64, TK, XT,
                           STAGES, SPLIT, KB)),
            (_dec_loader, (x_desc, w_desc, xb, wb, rd, em, q0 + 1, NQ, STAGES, n_units, R_TILES, K_PIECES, n_k, n64,
                           TK, XT, STAGES, SPLIT, KB)),
            (_dec_loader, (x_desc, w_desc, xb, wb, rd, em, q0 + 2, NQ, 2 * STAGES, n_units, R_TILES, K_PIECES, n_k,
                           n64, TK, XT, STAGES, SPLIT, KB)),
        ], [4, 4, 1, 1, 1], [CREGS, CREGS, 40, 40, 40])


def dot_order_cols(K: int) -> torch.Tensor:
    """Column permutation ``perm`` with ``x_dot = x[:, perm]``: dot position 16 s + 8 m + 2 c + p of each 64-wide
    K block holds K position 16 c + 8 m + 4 p + s (module docstring)."""
    d = torch.arange(64)
    s, m, c, p = d // 16, (d // 8) % 2, (d // 2) % 4, d % 2
    n = 16 * c + 8 * m + 4 * p + s
    return (torch.arange(0, K, 64)[:, None] + n[None, :]).reshape(-1)


def creg(ncons: int) -> int:
    """Registers a thread of the worker consumer warpgroups: what 64K leave after the loaders' 40 (the warp count
    rounded up to a multiple of 4), a multiple of 8, at most 232."""
    warps = 4 * ncons + ncons
    warps = -(-warps // 4) * 4
    spare = 65536 - (warps - 4 * ncons) * 32 * 40
    return min(232, spare // (4 * ncons * 32) // 8 * 8)


MAXNREG = {1: None, 2: 128, 3: 80}  # CTAs an SM -> the kernel's register cap (8 warps a CTA)


def _compile_only():
    """sm_90 SASS of the settings the GPU run sweeps (NCONS 1, KB 1-2, 1-3 CTAs an SM): whether the wgmmas stay
    asynchronous (ptxas serializes them -- one ``DEPBAR.LE gsb0, 0x0`` per wgmma -- when it cannot prove the register
    operand safe: two consumer warpgroups a program or KB >= 3 did, ptxas C7512 / C7513), spills, the K loop."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    import re

    from gluon_sm90 import compile_sm90

    for XT, STAGES, KB, CTAS, TK in ((16, 8, 2, 3, 64), (16, 4, 2, 2, 128), (16, 8, 1, 3, 64), (8, 8, 2, 3, 64),
                                     (16, 8, 2, 1, 64)):
        xl = gl.NVMMASharedLayout.get_default_for([XT, 64], gl.bfloat16)
        wl = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
        sig = {"x_desc": f"tensordesc<bf16[{XT}, 64],{xl}>", "w_desc": f"tensordesc<i16[64, 16],{wl}>",
               "out_ptr": "*fp32", "s_ptr": "*u8", "n_units": "i32", "R_TILES": "i32", "R": "i32", "K_PIECES": "i32",
               "n_k": "i32", "n64": "i32", "stride_se": "i32", "stride_sr": "i32", "stride_os": "i32"}
        cx = dict(TK=TK, STAGES=STAGES, SPLIT=2, SWZ=True, NCONS=1, KB=KB, CREGS=232)
        opts = {} if MAXNREG[CTAS] is None else dict(maxnreg=MAXNREG[CTAS])
        k, sass = compile_sm90(_dec_kernel, sig, cx, **opts)
        ins = [(int(m.group(1), 16), m.group(2)) for m in
               (re.match(r"\s*/\*([0-9a-f]{4})\*/\s*(.*?);", line) for line in sass.splitlines()) if m]
        at = {a: n for n, (a, _) in enumerate(ins)}
        loops = []  # backward branches around an HGMMA: the K loop is the shortest
        for n, (a, t) in enumerate(ins):
            m = re.search(r"BRA (0x[0-9a-f]+)", t)
            if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
                body = [x for _, x in ins[at[int(m.group(1), 16)]:n + 1]]
                if any("HGMMA" in x for x in body):
                    loops.append(body)
        loop = min(loops, key=len)
        print(f"XT={XT} STAGES={STAGES} KB={KB} CTAS={CTAS} (maxnreg {MAXNREG[CTAS]}) TK={TK}: warps "
              f"{k.metadata.num_warps}, smem {k.metadata.shared} B, K loop {len(loop)} instructions "
              f"({len(loop) / KB:.0f} a 64 x 64 block), HGMMA {sum('HGMMA' in x for x in loop)} "
              f"A in registers {all(re.search(r'HGMMA[^,]*, R[0-9]+, gdesc', x) for x in loop if 'HGMMA' in x)}, "
              f"serialized waits {sum('DEPBAR.LE gsb0, 0x0' in x for x in loop)}, STS in loop "
              f"{sum(x.startswith('STS') for x in loop)}, spills {sum(('LDL' in x) or ('STL' in x) for _, x in ins)}")


def _shapes(preset: str):
    """(name, rows R, K) of the preset's two GEMMs, MXFP4 padding as ExpertWeights does (non-gated I to 128)."""
    from fusedmoe.bench.presets import get_preset

    p = get_preset(preset)
    gated = p.activation.is_gated
    i_pad = -(-p.intermediate // (16 if gated else 128)) * (16 if gated else 128)
    return p, [("gemm1", 2 * i_pad if gated else i_pad, p.hidden), ("gemm2", p.hidden, i_pad)]


def _time(fn, reps: int, flush: torch.Tensor) -> float:
    """Median µs of ``reps`` launches, each after an L2 flush (CUDA events)."""
    fn()
    ts = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return sorted(ts)[len(ts) // 2]


def run_shape(name, E, R, K, tokens, settings, reps, flush, seed=0):
    import fusedmoe as fm
    from fusedmoe.config import Format
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    if R % 64 or K % 64:
        print(f"{name}: R={R} K={K} not multiples of 64, skipped")
        return []
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(E, R, K, device="cuda", generator=g) * K ** -0.5
    q = fm.quantize(w, Format.MXFP4).tiled_values(swizzle=True).padded_scale_rows().with_scale_code_range()
    lo, hi = q.scale_code_range
    if not (_bs.MX_FOLD_CODE_MIN <= lo and hi <= _bs.MX_FOLD_CODE_MAX):
        raise SystemExit(f"scale codes {lo}..{hi} outside the MX fold's range")
    wd = fm.dequantize(q).float()  # [E, R, K]
    tk = q.value_tile_k
    nbytes = q.data.numel() + E * R * (K // 32)  # values + the scales in use
    results = []
    for XT, STAGES, SPLIT, CTAS, KB in settings:
        x = torch.zeros(E, XT, K, device="cuda", dtype=torch.bfloat16)
        x[:, :tokens] = torch.randn(E, tokens, K, device="cuda", generator=g).to(torch.bfloat16)
        ref = torch.einsum("erk,etk->ert", wd, x.float())  # [E, R, XT]
        xd = x.reshape(E * XT, K)[:, dot_order_cols(K).cuda()].contiguous()
        xl = gl.NVMMASharedLayout.get_default_for([XT, 64], gl.bfloat16)
        wl = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
        x_desc = TensorDescriptor.from_tensor(xd, [XT, 64], xl)
        w_desc = TensorDescriptor.from_tensor(q.data.view(torch.int16).reshape(-1, tk // 4), [64, 16], wl)
        out = torch.zeros(SPLIT, E * R, XT, device="cuda", dtype=torch.float32)
        n64 = K // 64
        n_k = -(-n64 // KB)
        n_units = E * (R // 64) * SPLIT
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        grid = (min(n_units, CTAS * sms),)
        maxnreg = MAXNREG[CTAS]

        def launch():
            _dec_kernel[grid](x_desc, w_desc, out, q.scale, n_units, R // 64, R, K // tk, n_k, n64, q.scale.stride(0),
                              q.scale.stride(1), out.stride(0), TK=tk, STAGES=STAGES, SPLIT=SPLIT, SWZ=True,
                              NCONS=1, KB=KB, CREGS=232, num_warps=4, maxnreg=maxnreg)

        launch()
        torch.cuda.synchronize()
        got = out.sum(0).reshape(E, R, XT)
        err = ((got - ref).norm() / ref.norm()).item()
        t = _time(launch, reps, flush)
        row = dict(shape=name, E=E, R=R, K=K, XT=XT, STAGES=STAGES, SPLIT=SPLIT, CTAS=CTAS, KB=KB, units=n_units,
                   grid=grid[0], us=t, tbps=nbytes / t / 1e6, rel_err=err)
        results.append(row)
        print(f"{name:22s} E={E:3d} R={R:5d} K={K:5d}  XT={XT:2d} st={STAGES} split={SPLIT} ctas={CTAS} kb={KB}  "
              f"{t:7.1f} us  {row['tbps']:5.2f} TB/s  err {err:.1e}{'  WRONG' if err > 1e-3 else ''}", flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", action="store_true", help="compile for sm_90 (no GPU needed), print SASS stats")
    ap.add_argument("--preset", default="gpt-oss-120b,nemotron-super,nemotron-nano")
    ap.add_argument("--tokens", type=int, default=1, help="token rows an expert (of XT)")
    ap.add_argument("--experts", type=int, default=0, help="experts hit (default: the preset's top_k)")
    ap.add_argument("--quick", action="store_true", help="fewer settings")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="", help="write the results here")
    a = ap.parse_args()
    if a.compile_only:
        os.environ.pop("TRITON_INTERPRET", None)
        _compile_only()
        return
    if a.quick:
        settings = [(16, st, sp, c, 2) for st in (4, 8) for sp in (1, 2, 4) for c in (2, 3)]
    else:
        settings = [(xt, st, sp, c, kb) for xt in (16,) for st in (4, 8) for sp in (1, 2, 4) for c in (1, 2, 3)
                    for kb in (1, 2)] + [(8, 8, sp, 3, 2) for sp in (1, 2, 4)]
    flush = torch.empty(256 * 2 ** 20, dtype=torch.int8, device="cuda")
    allr = []
    for preset in a.preset.split(","):
        p, shapes = _shapes(preset)
        E = a.experts or p.top_k
        for gemm, R, K in shapes:
            allr += run_shape(f"{preset}:{gemm}", E, R, K, a.tokens, settings, a.reps, flush)
    if a.json:
        import json

        with open(a.json, "w") as f:
            json.dump(allr, f, indent=1)
    print("\nbest per shape:")
    for shape in dict.fromkeys(r["shape"] for r in allr):
        rs = [r for r in allr if r["shape"] == shape and r["rel_err"] <= 1e-3]
        if rs:
            b = min(rs, key=lambda r: r["us"])
            print(f"  {shape:22s} {b['us']:7.1f} us {b['tbps']:5.2f} TB/s  (XT={b['XT']} st={b['STAGES']} "
                  f"split={b['SPLIT']} ctas={b['CTAS']} kb={b['KB']})")


if __name__ == "__main__":
    main()
