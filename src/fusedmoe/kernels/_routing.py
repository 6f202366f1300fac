"""Triton routing kernel: router logits -> top-k expert ids and weights, every routing method.

One program per token. The token's E experts are held as a 2-D tile ``[BLOCK_G, BLOCK_GS]``:
row ``g`` = expert group ``g`` (``E / N_GROUP`` contiguous experts), so the grouped DeepSeek-V3
selection needs no reshapes; ungrouped methods use one row. Selection is iterative: K times,
``m = max(key over available)``, ``idx = min(expert index among available with key == m)``
(ties to the lower index), then ``idx`` is removed. The formulas, the order of the fp32
operations and the NaN policy are those of ``fusedmoe.routing.reference`` (see its docstring);
the launcher is ``fusedmoe.routing.triton_routing``.
"""

import triton
import triton.language as tl

# RoutingMethod values (FlashInfer's RoutingMethodType), passed as the METHOD constexpr.
DEFAULT = tl.constexpr(0)
RENORMALIZE = tl.constexpr(1)
DEEPSEEK_V3 = tl.constexpr(2)
LLAMA4 = tl.constexpr(3)
RENORMALIZE_NAIVE = tl.constexpr(4)
TOPK = tl.constexpr(5)
SIGMOID_RENORM = tl.constexpr(6)
MINIMAX2 = tl.constexpr(7)
SIGMOID = tl.constexpr(8)
TOPK_SIGMOID = tl.constexpr(9)

_BIG = tl.constexpr(1 << 30)  # larger than any expert / group index
_EPS = tl.constexpr(1e-20)  # reference.RENORM_EPS


@triton.jit
def _sigmoid(x):
    """σ(x) = 1 / (1 + exp(-x)), evaluated as e / (1 + e) with e = exp(x) for x < 0."""
    e = tl.exp(-tl.abs(x))
    return tl.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def _nan_to_neg_inf(x):
    return tl.where(x != x, float("-inf"), x)


@triton.jit
def routing_kernel(
    logits_ptr,  # [T, E] fp32 / bf16 / fp16
    bias_ptr,  # [E] float (read only when HAS_BIAS)
    ids_ptr,  # [T, K] int32, contiguous (output)
    weights_ptr,  # [T, K] fp32, contiguous (output)
    stride_lt,
    stride_le,
    stride_b,
    routed_scaling_factor,  # fp32; used by DEEPSEEK_V3 and MINIMAX2
    E: tl.constexpr,
    K: tl.constexpr,
    METHOD: tl.constexpr,
    N_GROUP: tl.constexpr,  # > 1 only for grouped DEEPSEEK_V3
    TOPK_GROUP: tl.constexpr,
    RENORM: tl.constexpr,  # DEEPSEEK_V3 / SIGMOID_RENORM: renormalize the selected weights
    HAS_BIAS: tl.constexpr,
    BLOCK_G: tl.constexpr,  # next_power_of_2(N_GROUP)
    BLOCK_GS: tl.constexpr,  # next_power_of_2(E // N_GROUP)
    BLOCK_K: tl.constexpr,  # next_power_of_2(K)
):
    GS: tl.constexpr = E // N_GROUP
    SIGMOID_BIAS_KEY: tl.constexpr = (METHOD == DEEPSEEK_V3) or (METHOD == MINIMAX2)
    NEG_INF: tl.constexpr = float("-inf")

    row = tl.program_id(0).to(tl.int64) * stride_lt
    offs_g = tl.arange(0, BLOCK_G)[:, None]
    offs_j = tl.arange(0, BLOCK_GS)[None, :]
    valid = (offs_g < N_GROUP) & (offs_j < GS)
    eidx = offs_g * GS + offs_j  # expert index, int32 [BLOCK_G, BLOCK_GS]

    lg = tl.load(logits_ptr + row + eidx.to(tl.int64) * stride_le, mask=valid, other=NEG_INF)
    lg = _nan_to_neg_inf(lg.to(tl.float32))

    # ---- selection key ------------------------------------------------------------------------
    if SIGMOID_BIAS_KEY:
        key = _sigmoid(lg)
        if HAS_BIAS:
            b = tl.load(bias_ptr + eidx.to(tl.int64) * stride_b, mask=valid, other=0.0)
            key = key + b.to(tl.float32)
        key = _nan_to_neg_inf(key)
    else:
        key = lg
    key = tl.where(valid, key, NEG_INF)
    avail = valid

    # ---- DeepSeek-V3 groups: score = sum of the two largest keys; keep the TOPK_GROUP best ------
    if N_GROUP > 1:
        m1 = tl.max(key, axis=1)
        j1 = tl.min(tl.where(valid & (key == m1[:, None]), offs_j, _BIG), axis=1)
        m2 = tl.max(tl.where(offs_j == j1[:, None], NEG_INF, key), axis=1)
        gscore = _nan_to_neg_inf(m1 + m2)
        gidx = tl.arange(0, BLOCK_G)
        gavail = gidx < N_GROUP
        kept = gidx < 0
        for _ in tl.static_range(TOPK_GROUP):
            mg = tl.max(tl.where(gavail, gscore, NEG_INF), axis=0)
            gsel = tl.min(tl.where(gavail & (gscore == mg), gidx, _BIG), axis=0)
            kept = kept | (gidx == gsel)
            gavail = gavail & (gidx != gsel)
        avail = avail & kept[:, None]

    # ---- top-K: largest key first, ties to the lower expert index ------------------------------
    koffs = tl.arange(0, BLOCK_K)
    kmask = koffs < K
    sel = tl.zeros([BLOCK_K], dtype=tl.int32)
    for k in range(K):
        mk = tl.max(tl.max(tl.where(avail, key, NEG_INF), axis=1), axis=0)
        ik = tl.min(tl.min(tl.where(avail & (key == mk), eidx, _BIG), axis=1), axis=0)
        sel = tl.where(koffs == k, ik, sel)
        avail = avail & (eidx != ik)

    # ---- weights ------------------------------------------------------------------------------
    ls = tl.load(logits_ptr + row + sel.to(tl.int64) * stride_le, mask=kmask, other=NEG_INF)
    ls = _nan_to_neg_inf(ls.to(tl.float32))
    if (METHOD == DEFAULT) or (METHOD == RENORMALIZE_NAIVE):
        mx = tl.max(tl.max(lg, axis=1), axis=0)  # padding holds -inf
        denom = tl.sum(tl.sum(tl.where(valid, tl.exp(lg - mx), 0.0), axis=1), axis=0)
        w = tl.exp(ls - mx) / denom
        if METHOD == RENORMALIZE_NAIVE:
            w = w / tl.sum(tl.where(kmask, w, 0.0), axis=0)
    elif METHOD == RENORMALIZE:
        ms = tl.max(ls, axis=0)  # padding slots hold -inf
        e = tl.where(kmask, tl.exp(ls - ms), 0.0)
        w = e / tl.sum(e, axis=0)
    elif METHOD == TOPK:
        w = ls
    elif (METHOD == SIGMOID) or (METHOD == TOPK_SIGMOID) or (METHOD == LLAMA4):
        w = _sigmoid(ls)
    else:  # SIGMOID_RENORM, DEEPSEEK_V3, MINIMAX2: σ from the logit, never (σ + b) - b
        s = tl.where(kmask, _sigmoid(ls), 0.0)
        if RENORM:
            w = s / (tl.sum(s, axis=0) + _EPS)
        else:
            w = s
        if SIGMOID_BIAS_KEY:
            w = w * routed_scaling_factor

    out = tl.program_id(0).to(tl.int64) * K + koffs
    tl.store(ids_ptr + out, sel, mask=kmask)
    tl.store(weights_ptr + out, w, mask=kmask)
