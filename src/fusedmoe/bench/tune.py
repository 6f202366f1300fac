"""``fusedmoe tune``: search Triton kernel configs per shape and token bucket on this GPU.

For one (shape, weight format, token count) the search space (:func:`search_space`) starts with
the heuristic config (``choose_moe_config`` with an empty table) and adds its neighbours: each
launch parameter of GEMM1 moved one step (block_n, block_k halved / doubled, warps 4 <-> 8,
stages +-1, group_m, swap_ab), the same for GEMM2, and block_m (shared by both GEMMs, it is the
align's padding unit) halved and doubled, and each GEMM's split_k halved / doubled at decode tile
sizes. Right after the heuristic come the config the active table serves the point now (so a
re-tune never ends slower than the table it replaces; for FP8 per tensor / channel also the other
one's entry), on Hopper at 1-8 tokens of the 16-bit and FP8 formats the Gluon decode kernel
(``triton_moe.ws_decode_config``, one and two K blocks a ring step at 2 and 3 programs an SM -- the configs'
``persistent`` -- faster than the Triton GEMMs on some shapes only, so the table decides), where K = I_pad <= 256
(TP shards) of the 16-bit and FP8 formats GEMM2 holding its activation tile across column tiles
(``KernelConfig.n_tiles``) at 64- and 128-row tiles, and, at prefill tiles of the 16-bit / FP8 formats, GEMM2 run persistent (``KernelConfig.persistent`` = 2
programs per SM, at 4 warps with at most 64 accumulators per thread and at the base's warps) or,
where the auto rule would run it persistent, explicitly not. ``fp8_fast_accum=True`` (CLI
``--fp8-fast-accum``) also tries, for FP8 per-tensor / per-channel weights, FP8 accumulation in
the tensor cores with 256-row weight tiles where block_m is 128: faster at prefill but 2.3-2.8x the
RMS error of the default path (H200, K 2048), so a table tuned with it changes results; off by
default. ``exhaustive=True`` adds the grid of block_m x
block_n x block_k x warps x stages per GEMM instead of single steps. Candidates that cannot
compile or would not fit in shared memory are dropped up front.

:func:`tune_point` runs every candidate once, **validates its output against the reference
before timing it** (a candidate that errors or misses the bound is recorded and never timed),
times the valid ones, then also tries the best GEMM1 variant combined with the best GEMM2 variant.
The fastest then has to hold its lead: it and what the point ran before (the table's entry, else the
heuristic) are timed ``confirm_rounds`` more times each, in turns, and it replaces that only ``min_gain``
ahead on the medians (CLI ``--confirm-rounds`` 2, ``--min-gain`` 0.02 by default; one timing a
candidate picks a noise winner among dozens easily). The winner's two GEMM configs are added to a
:class:`~fusedmoe.backends.kernel_configs.TunedTable` under (device name, weight format, activation,
gemm, N, K, E, token bucket) -- the key the triton backend looks up; not where the winner is the heuristic the
point ran without an entry (``TuneOutcome.needs_entry``) -- and the file is written with
``save_tuned_configs`` (merged with the entries already in it). The default output is the table the
package loads automatically (``kernel_configs.DEFAULT_TABLE_PATH``).

The runner, validator and timer are injected, so the search logic is tested on a CPU with fakes.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..backends.kernel_configs import (HELD_A_FORMATS, HELD_A_MAX_K, KernelConfig, MoEKernelConfig, TunedTable,
                                       auto_persistent, choose_moe_config, compile_problem, fp8_fast_accum_variant,
                                       held_a_config, held_a_problem, load_tuned_configs, save_tuned_configs,
                                       token_bucket, triton_tile, warp_specialized_config, warp_specialized_problem,
                                       warp_specialized_variant, with_block_m, ws_block_scale_problem, ws_pipelined,
                                       ws_wide_config, WS_DEC_BLOCK_M, WS_FORMATS, WS_PROMOTED_FORMATS, _device_traits)
from ..config import Activation, Format

__all__ = [
    "DEFAULT_TUNE_TOKENS",
    "SMEM_LIMIT",
    "SWAP_PREFILL_FORMATS",
    "search_space",
    "Candidate",
    "TuneOutcome",
    "tune_point",
    "table_key",
    "add_to_table",
    "merge_into_file",
    "write_report",
]

# the warp-specialized kernels are tried from this many tokens up (prefill: compute-bound GEMMs), for
# these formats: a format joins once its GPU tests (tests/test_ws_gemm.py) have passed on the H200 -- a
# new warp-specialized variant that hangs would stall the tuner (FP8 128 x 128 blocks and 16-bit weights:
# fourteenth session)
WS_MIN_TOKENS = 512
WS_TUNE_FORMATS = (Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK)
# weight formats dequantized in registers, whose prefill tiles the tuner also tries with swap_ab (the weight tile
# as wgmma's register operand instead of a trip through shared memory; :func:`_swap_prefill_tiles`)
SWAP_PREFILL_FORMATS = (Format.NVFP4, Format.MXFP4, Format.MXFP8)
_FP8_SIBLING = {Format.FP8_TENSOR: Format.FP8_CHANNEL, Format.FP8_CHANNEL: Format.FP8_TENSOR}

#: Token buckets tuned without ``--tokens``: powers of two (the table's buckets), the same as
#: ``fusedmoe bench``'s default token counts.
DEFAULT_TUNE_TOKENS = (1, 8, 64, 512, 4096)
#: Shared memory a program may use (Hopper: 227 KiB per block, minus room for the epilogue).
SMEM_LIMIT = 200 * 1024


@dataclass(frozen=True)
class Candidate:
    """One config to try; ``varies`` says which part moved from the base ("base", "ws_decode", "gemm1",
    "gemm2", "block_m", "fast_accum", "grid", "combined", "pipelined", ...); "table": what the active tuned table
    serves the point now (where that is not the heuristic), "fp8_sibling": FP8 per channel's entry for a per
    tensor point or the other way round."""

    config: MoEKernelConfig
    varies: str


def _smem_bytes(c: KernelConfig, weight_format: Format, gated_gemm1: bool) -> int:
    a_bytes = 2 if weight_format is Format.BF16 else 1
    w_bytes = 2 if weight_format is Format.BF16 else 1
    if c.n_tiles > 1:  # the activation tile once, the weight tiles staged
        return c.block_m * c.block_k * a_bytes + c.num_stages * c.stage_bytes(0, w_bytes, 1)
    return c.num_stages * c.stage_bytes(a_bytes, w_bytes, 2 if gated_gemm1 else 1)


def _pow2_at_least(n: int) -> int:
    return max(16, 1 << (max(n, 1) - 1).bit_length())


def _valid(c: KernelConfig, gemm: str, N: int, K: int, weight_format: Format, gated: bool,
           base: Optional[KernelConfig] = None) -> bool:
    """Whether a candidate is worth compiling: FP8 block needs block_k 128; swap-AB needs block_n >= 64, and
    block_m < 64 (FP8) or weights dequantized in registers (:data:`SWAP_PREFILL_FORMATS`, any block_m); tiles
    no larger than the GEMM (or than the heuristic's); operand buffers within :data:`SMEM_LIMIT`."""
    if weight_format is Format.FP8_BLOCK and c.block_k != 128:
        return False
    if compile_problem(c, weight_format) is not None:
        return False  # aborts the process in Triton's compiler
    if weight_format.block_size and weight_format is not Format.FP8_BLOCK and (
            c.block_k % weight_format.block_size or c.block_k > 128):
        return False  # micro-scaled weights: whole scale blocks per K tile, dequantized tile in registers
    if c.swap_ab and (weight_format not in SWAP_PREFILL_FORMATS if c.block_m >= 64 else weight_format is Format.BF16):
        return False
    if c.swap_ab and c.block_n < 64:  # wgmma's M side needs >= 64 weight rows
        return False
    if c.n_tiles > 1 and (gemm != "gemm2" or held_a_problem(c, weight_format, K) is not None):
        return False  # GEMM2 only; the held activation tile must cover K
    if warp_specialized_problem(c, weight_format, gemm, gated, K) is not None:
        return False  # the warp-specialized kernel's tile rules
    gated1 = gemm == "gemm1" and gated
    n_cols = N // 2 if gated1 else N
    if ws_block_scale_problem(c, weight_format, gated1, n_cols) is not None:
        return False  # one weight scale a column group (FP8 blocks)
    if c.block_n > max(_pow2_at_least(n_cols), base.block_n if base else 0):
        return False
    if c.block_k > max(_pow2_at_least(K), base.block_k if base else 0):
        return False
    return _smem_bytes(c, weight_format, gated1) <= SMEM_LIMIT


def _kc(base: KernelConfig, **kw) -> Optional[KernelConfig]:
    try:
        return KernelConfig(**{**base.to_dict(), **kw})
    except (TypeError, ValueError):
        return None


def _steps(base: KernelConfig) -> List[KernelConfig]:
    out = []
    if base.block_m <= 32:  # split-K: decode tile sizes
        for v in (base.split_k // 2, base.split_k * 2):
            if v >= 1:
                out.append(_kc(base, split_k=v))
    for f in ("block_n", "block_k"):
        for v in (getattr(base, f) // 2, getattr(base, f) * 2):
            out.append(_kc(base, **{f: v}))
    out.append(_kc(base, num_warps=8 if base.num_warps == 4 else 4))
    for s in (base.num_stages - 1, base.num_stages + 1):
        out.append(_kc(base, num_stages=s))
    out.append(_kc(base, group_m=1 if base.group_m != 1 else 8))
    out.append(_kc(base, swap_ab=not base.swap_ab))
    if base.n_tiles > 1:
        for v in (base.n_tiles // 2, base.n_tiles * 2):
            out.append(_kc(base, n_tiles=v))
    return [c for c in out if c is not None]


def _grid(base: KernelConfig) -> List[KernelConfig]:
    out = []
    for bn in (32, 64, 128, 256):
        for bk in (64, 128, 256):
            for w in (4, 8):
                for st in (2, 3, 4, 5):
                    c = _kc(base, block_n=bn, block_k=bk, num_warps=w, num_stages=st)
                    if c is not None:
                        out.append(c)
    return out


def _swap_prefill_tiles(base: KernelConfig, gated: bool) -> List[KernelConfig]:
    """swap_ab variants of a prefill tile (block_m >= 64 token rows on wgmma's N side): 64 or 128 weight rows per
    warpgroup (a gated GEMM1 joins gate and up: 2 x block_n rows), block_k 64 and 128, the base's stages. Tiles whose
    accumulators spill in the sm_90 compile (256 rows at 8 warps for GEMM2, 128 x 128-wide at 4 warps) are left out."""
    if base.split_k != 1 or base.warp_specialized:
        return []
    tiles = ((64, 4), (64, 8), (128, 8)) if gated else ((64, 4), (128, 4), (128, 8))
    out = []
    for bn, nw in tiles:
        for bk in (64, 128):
            if not gated and bn == 128 and nw == 4 and bk == 128:
                continue
            c = _kc(base, block_n=bn, block_k=bk, num_warps=nw, swap_ab=True, group_m=8, persistent=None)
            if c is not None:
                out.append(c)
    return out


WS_DEC_TUNE_MAX_TOKENS = 8  # the decode kernel is a candidate up to this many tokens (it lost at 8 on most shapes)
# the FP4 decode kernel (kernels/_ws_fp4_dec.py, MXFP4 / NVFP4 x BF16) up to this many tokens (issue 4's decode range),
# at these programs an SM: the table, not a rule, takes it where it measures faster than the Triton GEMMs
WS_FP4_DEC_TUNE_MAX_TOKENS = 64
WS_FP4_DEC_TUNE_CTAS = (3, 4)
# ... each at these ring stages (at most those that fit: 6 of 128 K values at 4 an SM) -- the switch's default 4
# since the fifty-third session, the 8 before it (H100, one token: the table's entries kept theirs, unmeasured since)
WS_FP4_DEC_TUNE_STAGES = (4, 8)


def search_space(tokens: int, hidden: int, intermediate_padded: int, experts: int, top_k: int,
                 weight_format: Format, activation: Activation, device_name: str, *, exhaustive: bool = False,
                 fp8_fast_accum: bool = False,
                 num_sms: Optional[int] = None, max_candidates: Optional[int] = None) -> List[Candidate]:
    """Candidates for one point, the heuristic config first (see the module docstring)."""
    gated = activation.is_gated
    n1 = intermediate_padded * (2 if gated else 1)
    dims = {"gemm1": (n1, hidden), "gemm2": (hidden, intermediate_padded)}
    heur = choose_moe_config(tokens, hidden, intermediate_padded, experts, top_k, weight_format, activation,
                             device_name, table=TunedTable(), num_sms=num_sms)
    seen = set()
    out: List[Candidate] = []

    def fit(c: Optional[KernelConfig], gemm: str) -> Optional[KernelConfig]:
        # a step that doubles block_n / block_k keeps as many stages as fit the shared memory (>= 2)
        # instead of being dropped: 128 x 256-wide FP8 K tiles need 3 stages, not the base's 4
        gated1 = gemm == "gemm1" and gated
        while c is not None and c.num_stages > 2 and _smem_bytes(c, weight_format, gated1) > SMEM_LIMIT:
            c = _kc(c, num_stages=c.num_stages - 1)
        return c

    def add(g1: Optional[KernelConfig], g2: Optional[KernelConfig], varies: str) -> None:
        g1, g2 = fit(g1, "gemm1"), fit(g2, "gemm2")
        if g1 is None or g2 is None or g1.block_m != g2.block_m:
            return
        if not (_valid(g1, "gemm1", *dims["gemm1"], weight_format, gated, heur.gemm1)
                and _valid(g2, "gemm2", *dims["gemm2"], weight_format, gated, heur.gemm2)):
            return
        key = (g1, g2)
        if key in seen:
            return
        seen.add(key)
        out.append(Candidate(MoEKernelConfig(g1, g2), varies))

    # the heuristic itself always comes first, even where our pruning would have dropped it
    seen.add((heur.gemm1, heur.gemm2))
    out.append(Candidate(MoEKernelConfig(heur.gemm1, heur.gemm2), "base"))
    if heur.gemm1.warp_specialized or heur.gemm2.warp_specialized:  # and the Triton kernels' tiles
        add(triton_tile(heur.gemm1), triton_tile(heur.gemm2), "base")
    # then what the active table serves this point now (a re-tune never ends slower than it), and
    # GEMM2 run persistent (2 programs per SM, at 4 warps and at the base's; ``KernelConfig.persistent``)
    # from either
    cur = choose_moe_config(tokens, hidden, intermediate_padded, experts, top_k, weight_format, activation,
                            device_name, num_sms=num_sms)
    seen.add((cur.gemm1, cur.gemm2))
    if (cur.gemm1, cur.gemm2) != (heur.gemm1, heur.gemm2) and ws_block_scale_problem(
            cur.gemm1, weight_format, gated, intermediate_padded) is None:
        out.append(Candidate(MoEKernelConfig(cur.gemm1, cur.gemm2), "table"))
    if weight_format in _FP8_SIBLING:
        # FP8 per tensor and per channel share the tile economics (only the epilogue's scales
        # differ): the other one's table entry (Nemotron-Nano at 8192 tokens: per channel's tuned
        # 256-row GEMM1 was never among per tensor's candidates)
        sib = choose_moe_config(tokens, hidden, intermediate_padded, experts, top_k, _FP8_SIBLING[weight_format],
                                activation, device_name, num_sms=num_sms)
        add(sib.gemm1, sib.gemm2, "fp8_sibling")
    hopper = _device_traits(device_name).hopper
    if weight_format in WS_PROMOTED_FORMATS and hopper:
        # the pipelined promotion (KernelConfig.pipelined_promotion; thirty-seventh session, H100: 0.96-1.07x by
        # shape in the two-set tiles): the table's and the heuristic's warp-specialized tiles with it, and the narrow
        # tiles (a partial set per accumulator) of both GEMMs with it, which the wide base GEMM1 never meets (FP8
        # blocks, thirty-eighth session: the heuristic never picks their warp-specialized tiles, so at prefill always)
        bases = [cur, heur]
        if tokens >= WS_MIN_TOKENS and (heur.gemm1.warp_specialized or heur.gemm2.warp_specialized
                                        or weight_format is Format.FP8_BLOCK):
            bases.append(MoEKernelConfig(warp_specialized_config(gated, num_stages=5, weight_format=weight_format),
                                         warp_specialized_config(False, num_stages=5, weight_format=weight_format)))
        for b in bases:
            p1, p2 = ws_pipelined(b.gemm1, weight_format), ws_pipelined(b.gemm2, weight_format)
            if p1 or p2:
                add(p1 or b.gemm1, p2 or b.gemm2, "pipelined")
    if (weight_format in WS_FORMATS and tokens <= WS_DEC_TUNE_MAX_TOKENS and heur.block_m <= WS_DEC_BLOCK_M
            and _device_traits(device_name).hopper):
        # the Gluon decode kernel (kernels/_ws_dec.py), one and two K blocks a ring step, 2 and 3 programs an SM: on
        # the H200 it was 0.77-1.11x the Triton GEMMs at one token depending on the shape (thirty-first session; the
        # best, DeepSeek-V3 TP8 BF16, with 3 programs an SM), so the table, not a rule, takes it where it measures
        # faster
        from ..backends.triton_moe import ws_decode_config
        for ctas in (2, 3):
            for kb in (1, 2):
                d = ws_decode_config(tokens, hidden, intermediate_padded, experts, top_k, weight_format, gated, kb,
                                     num_sms, ctas)
                add(d.gemm1, d.gemm2, "ws_decode")
    if (weight_format in (Format.MXFP4, Format.NVFP4) and tokens <= WS_FP4_DEC_TUNE_MAX_TOKENS
            and heur.block_m <= WS_DEC_BLOCK_M and _device_traits(device_name).hopper):
        # the Gluon FP4 decode kernel (the tuner's FP4 points run BF16 activations, W4A16: the kernel's only pairing;
        # a call with other activations falls back to the Triton config, triton_moe.auto_ws_fp4)
        from ..backends.triton_moe import ws_fp4_decode_config
        for ctas in WS_FP4_DEC_TUNE_CTAS:
            for st in WS_FP4_DEC_TUNE_STAGES:
                d = ws_fp4_decode_config(tokens, hidden, intermediate_padded, experts, top_k, gated, num_sms, ctas, st)
                add(d.gemm1, d.gemm2, "ws_fp4_decode")
    short_k = weight_format in HELD_A_FORMATS and intermediate_padded <= HELD_A_MAX_K
    if weight_format in WS_TUNE_FORMATS and tokens >= WS_MIN_TOKENS and _device_traits(device_name).hopper:
        # the warp-specialized Gluon kernels (KernelConfig.warp_specialized) at 4 and 5 stages (16-bit: 3, 4): both
        # GEMMs, and GEMM1 alone with each base's GEMM2 at 128 rows (on short K also the
        # held-activation GEMM2)
        # the wide FP8 tiles (one promoted partial set for two 128-column halves; 4 stages of 48 KB; FP8 blocks: one
        # weight scale a half -- a gated intermediate of whole 128-row scale blocks, triton_moe._ws_block_w_scalar,
        # which search_space's own callers may pass otherwise)
        wide = weight_format in WS_PROMOTED_FORMATS and not (weight_format is Format.FP8_BLOCK and gated
                                                             and intermediate_padded % 128)
        g1w = ws_wide_config(gated, weight_format) if wide else None
        if short_k:
            # short K (TP shards): the held-activation GEMM2 beat the warp-specialized one (layer 1.06-1.19x) at
            # every DeepSeek-V3 TP8 FP8 point (H100, forty-eighth session), so its pairs with the warp-specialized
            # GEMM1s come first -- each base's, and the wide one (with the pipelined promotion: 1.08-1.11x the layer
            # at 8192 tokens; no pair had it before, and a max_candidates cut dropped the later ones)
            g2h = (cur.gemm2 if cur.gemm2.n_tiles > 1 and cur.gemm2.block_m == 128
                   else held_a_config(128, hidden, intermediate_padded, weight_format))
            g1s = [warp_specialized_variant(b, gated, gemm2=False, weight_format=weight_format).gemm1
                   for b in (cur, heur)]
            if wide:
                g1s += [ws_pipelined(g1w, weight_format), g1w]
            for g1 in g1s:
                add(g1, g2h, "warp_specialized")
        for st in ((3, 4) if weight_format is Format.BF16 else (4, 5)):  # (16-bit: 48 KB stages, at most 4)
            v = warp_specialized_variant(heur, gated, num_stages=st, weight_format=weight_format)
            add(v.gemm1, v.gemm2, "warp_specialized")
        if wide:  # both GEMMs wide, the wide GEMM1 with the narrow GEMM2, the narrow GEMM1 with the wide GEMM2
            g2w = ws_wide_config(False, weight_format)
            add(g1w, g2w, "warp_specialized")
            add(g1w, warp_specialized_config(False, num_stages=5, weight_format=weight_format), "warp_specialized")
            add(warp_specialized_config(gated, num_stages=5, weight_format=weight_format), g2w, "warp_specialized")
        for b in (cur, heur):
            v = warp_specialized_variant(b, gated, gemm2=False, weight_format=weight_format)
            add(v.gemm1, v.gemm2, "warp_specialized")
    if short_k:
        # short K (TP shards): GEMM2 holding its activation tile across column tiles
        # (``KernelConfig.n_tiles``) at 64- and 128-row tiles (GEMM1 follows the block_m), 64 and
        # 128 weight rows, the default and twice the columns per program
        for b in (cur, heur):
            if b.block_m < 64:
                continue
            for bm in sorted({b.block_m, 64, 128}):
                g1 = with_block_m(b.gemm1, bm)
                h = held_a_config(bm, hidden, intermediate_padded, weight_format)
                add(g1, h, "held_a")
                add(g1, _kc(h, block_n=128, num_warps=8, n_tiles=max(1, h.n_tiles // 2)), "held_a")
                add(g1, _kc(h, n_tiles=h.n_tiles * 2), "held_a")
    if weight_format not in (Format.NVFP4, Format.MXFP4, Format.MXFP8):  # dequantizing: no persistent GEMM2
        for b in (cur, heur):
            g2 = triton_tile(b.gemm2)  # a warp-specialized GEMM2: its Triton tile run persistent
            if g2.block_m >= 64 and g2.split_k == 1:
                # <= 64 accumulators per thread at 4 warps (128 x 128 ran 3x slower: spills)
                bn = min(g2.block_n, 64 * 128 // g2.block_m)
                for st in (3, 4):
                    add(b.gemm1, _kc(g2, block_n=bn, num_warps=4, num_stages=st, persistent=2), "persistent")
                add(b.gemm1, _kc(g2, block_n=bn, persistent=2), "persistent")  # at the base's warps
                if auto_persistent(g2, weight_format, 2 if weight_format is Format.BF16 else 1):
                    add(b.gemm1, _kc(g2, persistent=0), "persistent")  # what the rule would run persistent
    if weight_format in SWAP_PREFILL_FORMATS and heur.block_m >= 64 and _device_traits(device_name).hopper:
        # prefill tiles with swap_ab: each GEMM alone (varies "gemm1" / "gemm2", so that the best of each is
        # combined), from the table's config and the heuristic's
        for b in (cur, heur):
            for c1 in _swap_prefill_tiles(b.gemm1, gated):
                add(c1, b.gemm2, "gemm1")
            for c2 in _swap_prefill_tiles(b.gemm2, False):
                add(b.gemm1, c2, "gemm2")
    bms = [heur.block_m] + [b for b in (heur.block_m // 2, heur.block_m * 2) if 16 <= b <= 128]
    bases = {bm: (with_block_m(heur.gemm1, bm), with_block_m(heur.gemm2, bm)) for bm in bms}
    # order: block_m moves first, then single steps at the heuristic's block_m, then at the others
    # (so that --max-candidates keeps the most informative ones)
    for bm in bms[1:]:
        add(*bases[bm], "block_m")
    if fp8_fast_accum and weight_format in (Format.FP8_TENSOR, Format.FP8_CHANNEL):
        # FP8 accumulation in the tensor cores (KernelConfig.fp8_fast_accum), alone and -- where
        # it frees the registers for it -- with 256-row weight tiles
        add(_kc(triton_tile(heur.gemm1), fp8_fast_accum=True), _kc(triton_tile(heur.gemm2), fp8_fast_accum=True),
            "fast_accum")
        if heur.block_m >= 128:
            wide = fp8_fast_accum_variant(heur, gated)
            add(wide.gemm1, wide.gemm2, "fast_accum")
    for bm in bms:
        b1, b2 = bases[bm]
        if b1 is None or b2 is None:
            continue
        vary1 = _grid(b1) if exhaustive else _steps(b1)
        vary2 = _grid(b2) if exhaustive else _steps(b2)
        # GEMM1 and GEMM2 steps alternate, so that a --max-candidates cut keeps moves of both
        for c1, c2 in itertools.zip_longest(vary1, vary2):
            if c1 is not None:
                add(c1, b2, "gemm1")
            if c2 is not None:
                add(b1, c2, "gemm2")
    if max_candidates is not None and len(out) > max_candidates:
        out = out[:max(1, max_candidates)]
    return out


@dataclass
class TuneOutcome:
    """Result of one point: every candidate's fate, the heuristic's time, the time of what the active table served
    (``table_s``: the "table" candidate, or the heuristic where the table has nothing else) and the winner."""

    rows: List[Dict[str, Any]] = field(default_factory=list)
    heuristic_s: Optional[float] = None
    table_s: Optional[float] = None
    best: Optional[MoEKernelConfig] = None
    best_s: Optional[float] = None
    #: the fastest candidate's re-timing against what the point ran before (``confirm_rounds``): True it held its
    #: lead, False it did not (``best`` is then that reference), None not run (the reference won outright)
    confirmed: Optional[bool] = None
    #: what the point ran before the tune: "table" (an entry of the active table, the device's own or its
    #: sibling's) or "base" (the heuristic: the table had nothing else); None when neither was timed
    reference: Optional[str] = None
    reference_config: Optional[MoEKernelConfig] = None

    @property
    def needs_entry(self) -> bool:
        """Whether the winner belongs in the table: not where it is the heuristic the point already ran without an
        entry. Such an entry would change nothing at its own bucket on this device, yet it would shadow the
        heuristic at the neighbouring token counts (the nearest-bucket lookup) and the sibling GPU's own heuristic
        or entries (``kernel_configs.table_devices``) -- unmeasured there."""
        if self.best is None:
            return False
        return not (self.reference == "base" and self.best == self.reference_config)

    @property
    def speedup(self) -> Optional[float]:
        """Heuristic time / the winner's."""
        if self.heuristic_s and self.best_s:
            return self.heuristic_s / self.best_s
        return None

    @property
    def vs_table(self) -> Optional[float]:
        """The active table's time / the winner's: what the new entry gains over what the point ran before the
        tune (1.00x: the table already held the winner, or one as fast)."""
        t = self.table_s if self.table_s is not None else self.heuristic_s
        if t and self.best_s:
            return t / self.best_s
        return None


def _cfg_dict(c: MoEKernelConfig) -> Dict[str, Any]:
    return {"gemm1": c.gemm1.to_dict(), "gemm2": c.gemm2.to_dict()}


def tune_point(candidates: Sequence[Candidate], run: Callable[[MoEKernelConfig], Any],
               validate: Callable[[Any], Tuple[bool, str]], time_fn: Callable[[MoEKernelConfig], float], *,
               deadline: Optional[float] = None,
               progress: Optional[Callable[[str, int], None]] = None, confirm_rounds: int = 0,
               min_gain: float = 0.0) -> TuneOutcome:
    """Try ``candidates`` in order: ``run(config)`` -> output, ``validate(output)`` -> (ok, why);
    only valid candidates are timed with ``time_fn(config)`` (seconds). Afterwards the best
    GEMM1-only and GEMM2-only variants at the winning block_m are combined and tried the same
    way. ``deadline`` (``time.perf_counter()`` value) stops trying new candidates (the heuristic,
    first, is always tried).

    The fastest candidate then has to beat the reference -- what the point ran before: the "table" candidate, else
    the heuristic (the first "base") -- by ``min_gain`` (0.02: 2 %) on the median of its times, after
    ``confirm_rounds`` more timings of both, taken in turns (the order alternating each round) so that drift hits
    both alike; otherwise the reference stays the point's config (``confirmed`` False, a "confirm" row says why).
    One timing each picks the winner among many candidates, so a lead of a percent or two is often noise -- the
    forty-ninth session's H100 tune took a Mixtral FP8 entry 1.01x ahead that the harness then measured 1.08x
    behind. Past the ``deadline`` the rule applies to the timings at hand, without re-timing."""
    if not isinstance(confirm_rounds, int) or isinstance(confirm_rounds, bool) or confirm_rounds < 0:
        raise ValueError(f"confirm_rounds must be an int >= 0, got {confirm_rounds!r}")
    if not isinstance(min_gain, (int, float)) or isinstance(min_gain, bool) or not 0.0 <= min_gain < 1.0:
        raise ValueError(f"min_gain must be a fraction in [0, 1), got {min_gain!r}")
    res = TuneOutcome()
    timed: List[Tuple[float, Candidate]] = []

    def attempt(cand: Candidate) -> None:
        row: Dict[str, Any] = {"varies": cand.varies, "config": _cfg_dict(cand.config)}
        try:
            out = run(cand.config)
        except Exception as exc:
            row.update(status="error", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
            res.rows.append(row)
            return
        ok, why = validate(out)
        if not ok:
            row.update(status="rejected", error=why)
            res.rows.append(row)
            return
        try:
            t = float(time_fn(cand.config))
        except Exception as exc:
            row.update(status="error", error=f"timing: {type(exc).__name__}: {exc}")
            res.rows.append(row)
            return
        row.update(status="ok", t_us=t * 1e6)
        res.rows.append(row)
        timed.append((t, cand))
        if cand.varies == "base" and res.heuristic_s is None:  # the heuristic itself comes first; a second
            res.heuristic_s = t                                  # "base" is its Triton tile (a ws heuristic)
        elif cand.varies == "table":
            res.table_s = t

    for i, cand in enumerate(candidates):
        if i > 0 and deadline is not None and time.perf_counter() > deadline:
            res.rows.append({"varies": "-", "status": "budget", "error": f"{len(candidates) - i} candidates not tried"})
            if progress:
                progress("budget", len(candidates) - i)
            break
        attempt(cand)
        if progress:
            progress(cand.varies, 1)
    if not timed:
        return res
    t_best, c_best = min(timed, key=lambda p: p[0])
    bm = c_best.config.block_m
    same_bm = [(t, c) for t, c in timed if c.config.block_m == bm]
    g1 = min(((t, c) for t, c in same_bm if c.varies in ("gemm1", "grid")), default=None, key=lambda p: p[0])
    g2 = min(((t, c) for t, c in same_bm if c.varies == "gemm2"), default=None, key=lambda p: p[0])
    if g1 and g2 and (deadline is None or time.perf_counter() <= deadline):
        combo = MoEKernelConfig(g1[1].config.gemm1, g2[1].config.gemm2)
        if all(combo != c.config for _, c in timed):
            attempt(Candidate(combo, "combined"))
    t_best, c_best = min(timed, key=lambda p: p[0])
    res.best, res.best_s = c_best.config, t_best
    ref = next((p for p in timed if p[1].varies == "table"), None) or next(
        (p for p in timed if p[1].varies == "base"), None)
    if ref is not None:
        res.reference, res.reference_config = ref[1].varies, ref[1].config
    if ref is not None and ref[1].config != c_best.config and (confirm_rounds or min_gain):
        _confirm(res, ref, (t_best, c_best), time_fn, confirm_rounds, min_gain, deadline)
    return res


def _confirm(res: TuneOutcome, ref: Tuple[float, Candidate], best: Tuple[float, Candidate],
             time_fn: Callable[[MoEKernelConfig], float], rounds: int, min_gain: float,
             deadline: Optional[float]) -> None:
    """:func:`tune_point`'s last step: the winner ``best`` against the reference ``ref`` over ``rounds`` more
    timings each, in turns; the reference stays unless the winner's median is ``min_gain`` ahead of its."""
    s_ref, s_best = [ref[0]], [best[0]]
    notes = []
    if rounds and (deadline is None or time.perf_counter() <= deadline):
        try:
            for r in range(rounds):
                for s, c in ((s_ref, ref[1]), (s_best, best[1]))[::1 if r % 2 == 0 else -1]:
                    s.append(float(time_fn(c.config)))
        except Exception as exc:  # a timing that failed now: the first timings decide
            notes.append(f"timing: {type(exc).__name__}: {exc}")
            s_ref, s_best = s_ref[:1], s_best[:1]
    elif rounds:
        notes.append("budget spent: not re-timed")
    m_ref, m_best = statistics.median(s_ref), statistics.median(s_best)
    held = m_ref >= m_best * (1.0 + min_gain)
    if not held:
        notes.append(f"{m_ref / m_best:.3f}x the {ref[1].varies}'s median, under the {1 + min_gain:.2f}x needed: "
                     f"the {ref[1].varies}'s config stays")
    row: Dict[str, Any] = {"varies": "confirm", "config": _cfg_dict(best[1].config), "against": ref[1].varies,
                           "status": "ok" if held else "kept", "t_us": m_best * 1e6, "ref_us": m_ref * 1e6,
                           "samples": len(s_best)}
    if notes:
        row["error"] = "; ".join(notes)
    res.rows.append(row)
    res.confirmed = held
    if ref[1].varies == "table":
        res.table_s = m_ref
    else:
        res.heuristic_s = m_ref
    res.best, res.best_s = (best[1].config, m_best) if held else (ref[1].config, m_ref)


def table_key(device_name: str, weight_format: Format, activation: Activation, hidden: int,
              intermediate_padded: int, experts: int) -> Dict[str, Tuple[int, int]]:
    """(N, K) of both GEMMs as the tuned table keys them."""
    n1 = intermediate_padded * (2 if activation.is_gated else 1)
    return {"gemm1": (n1, hidden), "gemm2": (hidden, intermediate_padded)}


def add_to_table(table: TunedTable, config: MoEKernelConfig, *, device_name: str, weight_format: Format,
                 activation: Activation, hidden: int, intermediate_padded: int, experts: int, tokens: int) -> None:
    """Add both GEMM configs of ``config`` for ``tokens``' bucket."""
    dims = table_key(device_name, weight_format, activation, hidden, intermediate_padded, experts)
    for gemm, kc in (("gemm1", config.gemm1), ("gemm2", config.gemm2)):
        N, K = dims[gemm]
        table.add(device=device_name, weight_format=weight_format, activation=activation, gemm=gemm, N=N, K=K,
                  E=experts, tokens=tokens, config=kc)


def merge_into_file(new: TunedTable, path: str) -> TunedTable:
    """Entries already in ``path`` (if it exists) plus ``new`` (``new`` wins on the same key and
    bucket); written back to ``path`` and returned."""
    merged = TunedTable()
    if os.path.exists(path):
        old = load_tuned_configs(path)
        for tbl in (old, new):
            for ent in tbl.to_json_dict()["entries"]:
                merged.add(device=ent["device"], weight_format=ent["weight_format"], activation=ent["activation"],
                           gemm=ent["gemm"], N=ent["N"], K=ent["K"], E=ent["E"], tokens=ent["tokens"],
                           config=KernelConfig.from_dict(ent["config"]))
    else:
        merged = new
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    save_tuned_configs(merged, path)
    return merged


def write_report(points: List[Dict[str, Any]], path: str, env: Dict[str, Any]) -> str:
    """The tuning report: per point the heuristic and tuned times and every candidate's fate."""
    with open(path, "w") as f:
        json.dump({"format": "fusedmoe-tune-report", "version": 1, "env": env, "points": points}, f, indent=1)
        f.write("\n")
    return path


def describe_config(c: MoEKernelConfig) -> str:
    """Compact text of a config: ``bm16 | g1 n64 k128 w4 s5 g1 swap | g2 ...``."""
    def one(k: KernelConfig) -> str:
        return (f"n{k.block_n} k{k.block_k} w{k.num_warps} s{k.num_stages}" + (f" g{k.group_m}" if k.group_m != 1 else "")
                + (" swap" if k.swap_ab else "") + (" fastacc" if k.fp8_fast_accum else "")
                + (f" split{k.split_k}" if k.split_k != 1 else "")
                + (f" persist{k.persistent}" if k.persistent is not None else "")
                + (f" ntiles{k.n_tiles}" if k.n_tiles != 1 else "") + (" ws" if k.warp_specialized else "")
                + (" pipe" if k.pipelined_promotion else ""))

    return f"bm{c.block_m} | {one(c.gemm1)} | {one(c.gemm2)}"


# ---- the GPU driver ------------------------------------------------------------------------------


def _precompile_worker(preset, weight_format_value: str, seed: int, items) -> int:
    """Worker process: run each (tokens, config) once so Triton compiles it into the on-disk cache
    (shared with the tuning process, which then only loads the binaries). Returns how many ran."""
    import torch

    from ..backends.triton import run_weights
    from .presets import BenchCase, calibrate_static_scales, make_inputs, make_weights

    wf = Format(weight_format_value)
    dev = torch.device("cuda")
    case = BenchCase(preset, wf, wf.natural_activation_format(), preset.routing_config(), torch.bfloat16)
    w = calibrate_static_scales(make_weights(preset, wf, device=dev, seed=seed), case, device=dev)
    done = 0
    sets = {}
    for T, cfg in items:
        if T not in sets:
            sets[T] = make_inputs(case, T, device=dev, nsets=1, seed=seed)[0]
        s = sets[T]
        try:
            run_weights(s.x, w, s.topk, activation_format=case.act_format,
                        weight_on_input=case.weight_on_input, config=cfg)
            torch.cuda.synchronize()
            done += 1
        except Exception:  # the tuning process records the error when it runs the candidate itself
            pass
    return done


def precompile(preset, weight_format: Format, items: Sequence[Tuple[int, MoEKernelConfig]], *, jobs: int,
               weight_bytes: int, seed: int = 0, log: Callable[[str], None] = print) -> int:
    """Compile ``items`` ((tokens, config) pairs) in up to ``jobs`` spawned processes on the same
    GPU, each holding its own copy of the weights (fewer processes when memory is short).
    Returns the number of processes used (0: nothing done)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import torch

    if jobs < 2 or len(items) < 2:
        return 0
    free, _ = torch.cuda.mem_get_info()
    n = int(min(jobs, len(items), max(0, 0.5 * free // max(1.3 * weight_bytes + (256 << 20), 1))))
    if n < 2:
        return 0
    chunks = [list(items[i::n]) for i in range(n)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as ex:
        futs = [ex.submit(_precompile_worker, preset, weight_format.value, seed, c) for c in chunks]
        ran = 0
        for f in futs:
            try:
                ran += f.result()
            except Exception as exc:  # a worker died (e.g. out of memory): the tuner compiles the rest itself
                log(f"precompile worker failed: {type(exc).__name__}: {exc}")
    log(f"precompiled {ran}/{len(items)} candidates in {n} processes ({time.perf_counter() - t0:.0f} s)")
    return n


@dataclass
class TuneOptions:
    """What ``fusedmoe tune`` was asked for."""

    presets: Sequence[Any]
    weight_formats: Sequence[Format]
    tokens: Sequence[int] = DEFAULT_TUNE_TOKENS
    out: str = ""
    report: Optional[str] = None
    exhaustive: bool = False
    fp8_fast_accum: bool = False  # also try FP8 accumulation in the tensor cores (changes numerics)
    max_candidates: Optional[int] = None
    budget_s: Optional[float] = None
    seed: int = 0
    device: str = "cuda"
    jobs: int = 0  # processes compiling candidates ahead of timing (0/1: none)
    confirm_rounds: int = 2  # re-timings of the winner and of what the point ran before (tune_point)
    min_gain: float = 0.02  # the winner's lead over that, on the medians, to replace it


def point_candidates(opts: TuneOptions, preset: Any, weight_format: Format, tokens: int, intermediate_padded: int,
                     device_name: str, num_sms: Optional[int]) -> Tuple[List[Candidate], int]:
    """``search_space`` of one point under ``opts``, and how many candidates it offered before the
    ``--max-candidates`` cut (the tune reports both: a cut can drop the winner -- the forty-eighth session's
    DeepSeek-V3 TP8 pair sat past it)."""
    full = search_space(tokens, preset.hidden, intermediate_padded, preset.experts, preset.top_k, weight_format,
                        preset.activation, device_name, exhaustive=opts.exhaustive,
                        fp8_fast_accum=opts.fp8_fast_accum, num_sms=num_sms)
    keep = full if opts.max_candidates is None else full[:max(1, opts.max_candidates)]
    return keep, len(full)


def plan(opts: TuneOptions, device_name: str = "NVIDIA H200", num_sms: Optional[int] = None) -> List[Dict[str, Any]]:
    """The points and their candidates, without running anything (``--dry-run``)."""
    from ..weights.expert_weights import padded_intermediate
    from .presets import format_problem

    out = []
    for p in opts.presets:
        for wf in opts.weight_formats:
            why = format_problem(p, wf)
            I_pad = padded_intermediate(p.intermediate, wf, p.gated)
            for T in opts.tokens:
                entry = {"preset": p.name, "weight_format": wf.value, "activation": p.activation.value,
                         "tokens": T, "bucket": token_bucket(T), "H": p.hidden, "I_pad": I_pad, "E": p.experts,
                         "top_k": p.top_k}
                if why:
                    entry.update(skip=why, candidates=[], offered=0)
                else:
                    entry["candidates"], entry["offered"] = point_candidates(opts, p, wf, T, I_pad, device_name,
                                                                             num_sms)
                out.append(entry)
    return out


def run_tune(opts: TuneOptions, *, progress: Optional[Callable[[str, int], None]] = None,
             log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Tune every (preset, format, token count) of ``opts`` on the CUDA device; merge the winners
    into ``opts.out`` after every case (an interrupted run keeps what it finished) and write the
    report. Returns {"table": path, "report": path or None, "points": [...]}."""
    import torch

    from ..backends.reference import reference_moe
    from ..backends.triton import run_weights
    from .peers import check_bound, rel_errors
    from .presets import BenchCase, calibrate_static_scales, format_problem, make_inputs, make_weights
    from .timing import time_calls

    dev = torch.device(opts.device)
    cuda = dev.type == "cuda"
    if not cuda and os.environ.get("TRITON_INTERPRET", "0") != "1":
        raise ValueError("tuning needs a CUDA device (a CPU runs it only under TRITON_INTERPRET=1, for tests)")
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if cuda else None
    dtype = torch.bfloat16 if cuda else torch.float16  # the interpreter's bf16 dot is wrong
    t0 = time.perf_counter()
    deadline = None if opts.budget_s is None else t0 + opts.budget_s
    points: List[Dict[str, Any]] = []
    for p in opts.presets:
        for wf in opts.weight_formats:
            why = format_problem(p, wf)
            if why:
                log(f"{p.name}/{wf.value}: skipped: {why}")
                continue
            if deadline is not None and time.perf_counter() > deadline:
                log(f"{p.name}/{wf.value}: not tuned: time budget spent")
                points.append({"preset": p.name, "weight_format": wf.value, "status": "budget"})
                continue
            case = BenchCase(p, wf, wf.natural_activation_format(), p.routing_config(), dtype)
            weights = make_weights(p, wf, device=dev, seed=opts.seed, dtype=dtype)
            weights = calibrate_static_scales(weights, case, device=dev)
            I_pad = weights.padded_intermediate_size
            new = TunedTable()
            cands_by_T = {T: point_candidates(opts, p, wf, T, I_pad, name, sms) for T in opts.tokens}
            if opts.jobs > 1 and cuda:
                from .presets import weights_nbytes

                items = [(T, c.config) for T, (cs, _) in cands_by_T.items() for c in cs]
                precompile(p, wf, items, jobs=opts.jobs, weight_bytes=weights_nbytes(weights), seed=opts.seed, log=log)
            for T in opts.tokens:
                if deadline is not None and time.perf_counter() > deadline:
                    points.append({"preset": p.name, "weight_format": wf.value, "tokens": T, "status": "budget"})
                    continue
                sets = make_inputs(case, T, device=dev, nsets=4, seed=opts.seed)
                ref = reference_moe(sets[0].x, weights, sets[0].topk, activation=weights.activation,
                                    activation_format=case.act_format, weight_on_input=case.weight_on_input)
                bound = check_bound(case.act_format, dtype)

                def run(cfg, s=sets[0], weights=weights):
                    out = run_weights(s.x, weights, s.topk, activation_format=case.act_format,
                                      weight_on_input=case.weight_on_input, config=cfg)
                    if cuda:
                        torch.cuda.synchronize(dev)
                    return out

                def validate(out, ref=ref, bound=bound):
                    mx, rms = rel_errors(out, ref)
                    ok = mx <= bound[0] and rms <= bound[1]
                    return ok, f"max_rel {mx:.2e}, rms_rel {rms:.2e} (bounds {bound[0]:.0e}, {bound[1]:.0e})"

                def time_fn(cfg, sets=sets, weights=weights):
                    calls = [(lambda s=s: run_weights(s.x, weights, s.topk, activation_format=case.act_format,
                                                      weight_on_input=case.weight_on_input, config=cfg))
                             for s in sets]
                    return time_calls(calls, dev, reps=30, budget_s=0.3).median_s

                cands, offered = cands_by_T[T]
                if progress:
                    progress(f"{p.name}/{wf.value} T={T}", 0)
                res = tune_point(cands, run, validate, time_fn, deadline=deadline, progress=progress,
                                 confirm_rounds=opts.confirm_rounds, min_gain=opts.min_gain)
                pt = {"preset": p.name, "weight_format": wf.value, "activation": p.activation.value, "tokens": T,
                      "bucket": token_bucket(T), "H": p.hidden, "I_pad": I_pad, "E": p.experts, "top_k": p.top_k,
                      "candidates": len(cands), "offered": offered, "tried": len(res.rows),
                      "rejected": sum(1 for r in res.rows if r.get("status") == "rejected"),
                      "errors": sum(1 for r in res.rows if r.get("status") == "error"),
                      "heuristic_us": None if res.heuristic_s is None else res.heuristic_s * 1e6,
                      "table_us": None if res.table_s is None else res.table_s * 1e6,
                      "tuned_us": None if res.best_s is None else res.best_s * 1e6, "speedup": res.speedup,
                      "vs_table": res.vs_table, "confirmed": res.confirmed, "entry_written": res.needs_entry,
                      "best": None if res.best is None else _cfg_dict(res.best), "rows": res.rows}
                points.append(pt)
                if res.best is not None:
                    if res.needs_entry:
                        add_to_table(new, res.best, device_name=name, weight_format=wf, activation=p.activation,
                                     hidden=p.hidden, intermediate_padded=I_pad, experts=p.experts, tokens=T)
                    kept = (f"; the fastest candidate, re-timed, was not {opts.min_gain:.0%} ahead: kept"
                            if res.confirmed is False else "")
                    if not res.needs_entry:
                        kept += "; the heuristic stays, no entry written"
                    log(f"{p.name}/{wf.value} T={T}: heuristic {pt['heuristic_us'] or float('nan'):.1f} us -> "
                        f"tuned {pt['tuned_us']:.1f} us ({(res.speedup or float('nan')):.2f}x; "
                        f"{(res.vs_table or float('nan')):.2f}x the table's{kept}) {describe_config(res.best)}")
                else:
                    log(f"{p.name}/{wf.value} T={T}: no valid candidate ({pt['rejected']} rejected, {pt['errors']} errors)")
                del sets, ref
            # written even with no new entry (every winner the heuristic it already ran): the file the run names
            # exists afterwards, holding what it held before
            merge_into_file(new, opts.out)
            del weights
            if cuda:
                torch.cuda.empty_cache()
    env = {"device": name, "torch": torch.__version__, "triton": __import__("triton").__version__,
           "wall_s": time.perf_counter() - t0}
    report = write_report(points, opts.report, env) if opts.report else None
    return {"table": opts.out, "report": report, "points": points, "env": env}
