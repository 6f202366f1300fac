"""Top-k combine of the Triton MoE backend (private; launched by
``fusedmoe.backends.triton_moe``).

    out[t, :] = cast( sum_{k < K, topk_ids[t, k] local} float32(y[t*K + k, :]) )

Deterministic: a fixed k order, fp32 accumulation, no atomics. Rows of non-local slots are never
read (they were never written), so they contribute exactly 0.
"""

import triton
import triton.language as tl


@triton.jit
def _combine_kernel(
    y_ptr,  # [T*K, H] per-slot expert outputs (routing weight applied), output dtype
    topk_ids_ptr,  # [T*K] global expert ids (any int dtype)
    out_ptr,  # [T, H] (row stride stride_om)
    T,
    H,
    expert_offset,
    stride_ym,
    stride_om,
    E_LOC: tl.constexpr,
    TOP_K: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    USE_GDC: tl.constexpr,  # launched with programmatic dependent launch: wait for the prior grid first
):
    """grid = (cdiv(T, BLOCK_T), cdiv(H, BLOCK_H))."""
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
    pid_t = tl.program_id(0)
    pid_h = tl.program_id(1)
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    t_ok = rows < T
    h_ok = cols < H
    rows64 = rows.to(tl.int64)
    acc = tl.zeros([BLOCK_T, BLOCK_H], dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        ids = tl.load(topk_ids_ptr + rows64 * TOP_K + k, mask=t_ok, other=-1).to(tl.int32)
        local = t_ok & (ids >= expert_offset) & (ids < expert_offset + E_LOC)
        y = tl.load(y_ptr + (rows64 * TOP_K + k)[:, None] * stride_ym + cols[None, :],
                    mask=local[:, None] & h_ok[None, :], other=0.0)
        acc += y.to(tl.float32)
    tl.store(out_ptr + rows64[:, None] * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=t_ok[:, None] & h_ok[None, :])
