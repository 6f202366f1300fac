"""fusedmoe as a plugin of the shared peer harness (../shared/bench/peers/run_peers.py).

    PYTHONPATH=src python3 ../shared/bench/peers/run_peers.py --plugin benchmarks/harness_plugin.py --out DIR

Uses the harness's own quantized weights and scales (so both peers compute on identical data),
wrapped as fm.ExpertWeights without re-quantization, and runs the public ``fm.fused_moe`` with the
``triton`` backend. The harness's I values are multiples of 16, so no padding is needed.

Peers: ``fusedmoe`` (the default configs) and ``fusedmoe-fastacc`` (FP8 per-tensor / per-channel
cases only: ``KernelConfig.fp8_fast_accum`` with wider prefill tiles, the candidate FP8 default,
measured side by side with it); ``fusedmoe-pdl`` / ``fusedmoe-nopdl`` (the default configs with
programmatic dependent launch always on / off; the default turns it on up to 512 tokens);
``fusedmoe-nofuse`` / ``fusedmoe-fuseall`` (the top-k combine in GEMM2 never / at every token
count; the default does not fuse it: ``set_fused_combine``); ``fusedmoe-noalq`` (hidden quantized
by its own kernel at decode too, instead of inside the align launch: ``triton_moe._ALIGN_QUANT``);
``fusedmoe-alzero`` / ``fusedmoe-noalzero`` (split-K counters of a captured call zeroed by the align launch --
the default since the twenty-sixth session -- or by a memset node: ``set_align_zero_fill(True / False)``);
``fusedmoe-nopersist`` (GEMM2 always one program per tile: ``set_persistent_gemm2(False)``);
``fusedmoe-notrim`` (each GEMM's pipeline stages as configured even past its K loop's trip count:
``set_trim_stages(False)``);
``fusedmoe-ws`` / ``fusedmoe-ws1`` (BF16 and FP8 per-tensor / per-channel / block cases: from 512
tokens up, both GEMMs / GEMM1 alone by the warp-specialized Gluon kernels,
``kernel_configs.warp_specialized_variant``; below, the default configs); ``fusedmoe-noskip`` /
``fusedmoe-ws-noskip`` (``fusedmoe`` / ``fusedmoe-ws`` with both MMA warpgroups running blocks whose
second half is padding: ``set_ws_skip_padding_half(False)``; it only changes FP8 weights' warp-specialized
GEMMs: 16-bit ones never skip); ``fusedmoe-divq`` (GEMM1's FP8 re-quantization of the intermediate by
IEEE divisions, ``set_reciprocal_quant(False)``; the default divides by reciprocals, same bits);
``fusedmoe-g16`` / ``fusedmoe-g32`` (the chosen configs with GROUP_M 16 / 32 on the warp-specialized
GEMMs: more M-blocks per column sweep); ``fusedmoe-wswide`` (the FP8 warp-specialized GEMMs at 2 x 128 / 256
columns with one promoted partial set: half the L2 bytes of A per FLOP); ``fusedmoe-nohandoff`` (GEMM1 stores
by slot and the warp-specialized GEMM2 gathers its input again: ``set_ws_padded_handoff(False)``);
``fusedmoe-wsdec`` (the opt-in 16-bit / FP8 decode kernel, ``kernels/_ws_dec.py``, for decode tiles:
``set_ws_decode(True)``); ``fusedmoe-wsdecfused`` (the same with both GEMMs in one launch where nothing runs between
them: ``set_ws_decode(True, fused=True)``); ``fusedmoe-wsdec4`` (the decode kernel at 4 programs an SM, 64 registers:
``set_ws_decode(True, 4)``); ``fusedmoe-tabler`` (the default -- the tuned table's decode-kernel entries -- with
every consumer thread freeing the ring slots: ``set_ws_decode(False, thread_release=True)``); ``fusedmoe-nosib``
(no tuned entries of a sibling GPU: on an H100 SXM the heuristic where the default takes the H200's entries,
``set_table_siblings(False)``); ``fusedmoe-wspipe`` (the warp-specialized FP8 GEMMs -- blocks too -- with the
promotion pipelined, two partial sets taking turns: ``set_ws_pipelined_promotion(True)``; same bits);
``fusedmoe-noblkscalar`` / ``fusedmoe-ws-noblkscalar`` (``fusedmoe`` / ``fusedmoe-ws`` with the narrow
warp-specialized FP8 block tiles reading a per-column vector of weight scales instead of one scale a column group, as
before the fortieth session: ``set_ws_block_scalar_scales(False)``; same bits; the wide FP8 block tiles always read
one);
``fusedmoe-noblkw1`` (the Triton FP8 block GEMMs with a 128-vector of weight scales over each tile's rows, as before the
thirty-eighth session, instead of one scale a tile: ``set_block_w1(False)``; same bits); ``fusedmoe-noaltrig`` (the
decode align letting the next grid launch only as its programs exit, as before the fortieth session:
``set_align_early_trigger(False)``; same bits); ``fusedmoe-noxg`` / ``fusedmoe-xg`` (the warp-specialized prefill
GEMMs' input rows always by a gather launch / always copied by the kernel, against the default rule,
``set_ws_x_gather(False / True)``; same bits); ``fusedmoe-nodyn`` / ``fusedmoe-dyn`` (the warp-specialized prefill
GEMMs' tiles always by a fixed stride / always by a global counter, against the default rule,
``set_ws_dynamic_tiles(False / True)``; same bits).
"""

import torch

import fusedmoe as fm

_FMT = {
    "bf16": (fm.Format.BF16, fm.Format.BF16),
    "fp8_tensor": (fm.Format.FP8_TENSOR, fm.Format.FP8_TENSOR),
    "fp8_channel": (fm.Format.FP8_CHANNEL, fm.Format.FP8_TOKEN),
    "fp8_block": (fm.Format.FP8_BLOCK, fm.Format.FP8_BLOCK),
}
_ACT = {"swiglu": fm.Activation.SWIGLU, "relu2": fm.Activation.RELU2}


def _weights(case):
    wf, _ = _FMT[case.dtype]
    act = _ACT[case.activation]
    if wf is fm.Format.BF16:
        q13 = fm.QuantizedTensor(case.w1.contiguous(), wf)
        q2 = fm.QuantizedTensor(case.w2.contiguous(), wf)
        extra = {}
    else:
        br = 128 if wf is fm.Format.FP8_BLOCK else 1
        s1 = case.w1_scale.float().reshape(-1) if wf is fm.Format.FP8_TENSOR else case.w1_scale.float()
        s2 = case.w2_scale.float().reshape(-1) if wf is fm.Format.FP8_TENSOR else case.w2_scale.float()
        q13 = fm.QuantizedTensor(case.w1_q.contiguous(), wf, s1.contiguous(), block_rows=br)
        q2 = fm.QuantizedTensor(case.w2_q.contiguous(), wf, s2.contiguous(), block_rows=br)
        extra = {}
        if wf is fm.Format.FP8_TENSOR:
            extra = dict(input_scale=case.a1_scale.float().reshape(1), intermediate_scale=case.a2_scale.float().reshape(1))
    return fm.ExpertWeights(w13=q13, w2=q2, activation=act, intermediate_size=case.I, **extra), act


def make_fusedmoe(case):
    if case.dtype not in _FMT:
        raise NotImplementedError(f"{case.dtype}: not a harness format fusedmoe maps")
    weights, act = _weights(case)
    backend = "triton" if case.device.type == "cuda" else "auto"

    def prepare(M):
        return {"backend": backend}

    def run(x, topk_weights, topk_ids):
        return fm.fused_moe(x, weights, fm.TopK(topk_ids, topk_weights), activation=act, backend=backend)

    return prepare, run


def _config_peer(pick, what: str, dtypes=("fp8_tensor", "fp8_channel")):
    """A peer running fusedmoe's triton backend with ``pick(M, cfg, act, weight_format)`` -- a config
    derived from the one fusedmoe would choose (``choose_moe_config``) -- at each token count M; the
    harness cases of ``dtypes`` only (``what`` names the variant in the refusal of other cases)."""

    def make(case):
        if case.dtype not in dtypes:
            raise NotImplementedError(f"{what}: {' / '.join(dtypes)} cases only")
        from fusedmoe.backends.kernel_configs import choose_moe_config
        from fusedmoe.backends.triton import run_weights

        weights, act = _weights(case)
        wf, af = _FMT[case.dtype]
        dev = torch.cuda.get_device_name(case.device) if case.device.type == "cuda" else "cpu"
        state = {}

        def prepare(M):
            cfg = pick(M, choose_moe_config(M, case.H, case.I, case.E, case.top_k, wf, act, dev), act, wf)
            state["cfg"] = cfg

            def one(k):
                return (f"n{k.block_n}" + (" ws" if k.warp_specialized else "")
                        + (" fastacc" if k.fp8_fast_accum else ""))

            return {"config": f"g1 {one(cfg.gemm1)} g2 {one(cfg.gemm2)} bm{cfg.block_m}"}

        def run(x, topk_weights, topk_ids):
            return run_weights(x, weights, fm.TopK(topk_ids, topk_weights), activation_format=af,
                               config=state["cfg"])

        return prepare, run

    return make


def _fastacc(M, cfg, act, wf):
    """KernelConfig.fp8_fast_accum on both GEMMs (FP8 accumulated in the tensor cores, as SGLang
    does) and, for compute-bound tiles (block_m 128), 256-row weight tiles for GEMM2 and a non-gated
    GEMM1 -- the candidate default for FP8 prefill, measured side by side with the current default."""
    from fusedmoe.backends.kernel_configs import fp8_fast_accum_variant

    return fp8_fast_accum_variant(cfg, act.is_gated)


def _ws(gemm2: bool):
    """The warp-specialized kernels (``KernelConfig.warp_specialized``) at 512+ tokens: GEMM1, and
    GEMM2 too (``gemm2``) or GEMM2's chosen tile at 128 rows; below, the chosen config."""

    def pick(M, cfg, act, wf):
        from fusedmoe.backends.kernel_configs import warp_specialized_variant

        return warp_specialized_variant(cfg, act.is_gated, gemm2=gemm2, weight_format=wf) if M >= 512 else cfg

    return pick


def _group_m(g: int):
    """The chosen configs with GROUP_M ``g`` on the warp-specialized GEMMs (their tile order: ``g``
    M-blocks share each column sweep; the tuner tries 8 only)."""

    def pick(M, cfg, act, wf):
        import dataclasses

        from fusedmoe.backends.kernel_configs import MoEKernelConfig

        def one(k):
            return dataclasses.replace(k, group_m=g) if k.warp_specialized else k

        return MoEKernelConfig(one(cfg.gemm1), one(cfg.gemm2), atomic_combine=cfg.atomic_combine)

    return pick


def _ws_wide(M, cfg, act, wf):
    """The chosen configs with their FP8 warp-specialized GEMMs widened to one promoted partial set
    for two 128-column halves (2 x 128 gated, 256 otherwise; ``_ws_gemm``'s ONE_PART, 4 stages)."""
    from fusedmoe.backends.kernel_configs import MoEKernelConfig, warp_specialized_config

    def one(k, gated):
        if not k.warp_specialized or k.block_k != 128:  # FP8 tiles only (16-bit ones have 64-wide K blocks)
            return k
        return warp_specialized_config(gated, num_stages=4, group_m=k.group_m, block_n=128 if gated else 256)

    return MoEKernelConfig(one(cfg.gemm1, act.is_gated), one(cfg.gemm2, False), atomic_combine=cfg.atomic_combine)


def _with_setting(setter, value, base=None):
    """fusedmoe (default configs, or the peer ``base`` makes) with
    ``fusedmoe.backends.triton_moe.<setter>(value)`` in force for its calls
    (``set_programmatic_dependent_launch``: default "auto", on up to 512 tokens;
    ``set_fused_combine``: default 0, off); ``setter`` may also be the setter itself."""
    from fusedmoe.backends import triton_moe

    set_ = getattr(triton_moe, setter) if isinstance(setter, str) else setter

    def make(case):
        prepare, run_default = (base or make_fusedmoe)(case)

        def run(x, topk_weights, topk_ids):
            prev = set_(value)
            try:
                return run_default(x, topk_weights, topk_ids)
            finally:
                set_(prev)

        return prepare, run

    return make


def _set_align_quant(on):
    """``triton_moe._ALIGN_QUANT`` (decode: hidden quantized in the align launch; default on);
    returns the previous value."""
    from fusedmoe.backends import triton_moe

    prev, triton_moe._ALIGN_QUANT = triton_moe._ALIGN_QUANT, bool(on)
    return prev


def _set_chunked_rows(on):
    """Per-token / per-tensor-scaled FP8 quantization (``formats.triton_quant._row_blocks``) at the
    seventeenth session's launch sizes when ``on``: 1024-wide column chunks, 2048 elements a program
    (two rows at 1024 columns), two passes for a per-row scale -- instead of one row a program held
    in registers; returns the previous sizing function."""
    from fusedmoe.formats import triton_quant as tq
    from fusedmoe.kernels._host import next_pow2

    def chunked(T, C):
        block_c = min(next_pow2(C), 1024)
        return min(next_pow2(T), max(1, 2048 // block_c)), block_c, 4

    prev = tq._row_blocks
    if callable(on):  # restoring what an earlier call returned
        tq._row_blocks = on
    elif on:
        tq._row_blocks = chunked
    return prev


def _set_pad_garbage(on):
    """``triton_moe._WS_ZERO_PAD_ROWS`` off when ``on``: the padded hand-off's padding rows left
    unwritten (whatever the buffer held) instead of stored as zeros; returns the previous "on"."""
    from fusedmoe.backends import triton_moe

    prev = not triton_moe._WS_ZERO_PAD_ROWS
    triton_moe._WS_ZERO_PAD_ROWS = not on
    return prev


def _set_ws_decode(on):
    """``triton_moe.set_ws_decode`` from a bool or the tuple it returned (the 16-bit / FP8 decode kernel, opt-in);
    returns the previous tuple."""
    from fusedmoe.backends import triton_moe

    return triton_moe.set_ws_decode(*on) if isinstance(on, tuple) else triton_moe.set_ws_decode(on)


_PDL, _FUSE = "set_programmatic_dependent_launch", "set_fused_combine"
_WS_DTYPES = ("bf16", "fp8_tensor", "fp8_channel", "fp8_block")
PEERS = {"fusedmoe": make_fusedmoe,
         "fusedmoe-fastacc": _config_peer(_fastacc, "the FP8 fast-accumulation variant"),
         "fusedmoe-ws": _config_peer(_ws(True), "the warp-specialized kernels", _WS_DTYPES),
         "fusedmoe-ws1": _config_peer(_ws(False), "the warp-specialized kernels", _WS_DTYPES),
         "fusedmoe-pdl": _with_setting(_PDL, True), "fusedmoe-nopdl": _with_setting(_PDL, False),
         "fusedmoe-nofuse": _with_setting(_FUSE, 0), "fusedmoe-fuseall": _with_setting(_FUSE, 1 << 30),
         "fusedmoe-noalq": _with_setting(_set_align_quant, False),
         "fusedmoe-alzero": _with_setting("set_align_zero_fill", True),
         "fusedmoe-noalzero": _with_setting("set_align_zero_fill", False),
         "fusedmoe-nopersist": _with_setting("set_persistent_gemm2", False),
         "fusedmoe-nosib": _with_setting("set_table_siblings", False),
         "fusedmoe-wspipe": _with_setting("set_ws_pipelined_promotion", True),
         "fusedmoe-noblkscalar": _with_setting("set_ws_block_scalar_scales", False),
         "fusedmoe-noblkw1": _with_setting("set_block_w1", False),
         "fusedmoe-noaltrig": _with_setting("set_align_early_trigger", False),
         "fusedmoe-noxg": _with_setting("set_ws_x_gather", False),
         "fusedmoe-xg": _with_setting("set_ws_x_gather", True),
         "fusedmoe-dyn": _with_setting("set_ws_dynamic_tiles", True),
         "fusedmoe-nodyn": _with_setting("set_ws_dynamic_tiles", False),
         "fusedmoe-ws-noblkscalar": _with_setting("set_ws_block_scalar_scales", False,
                                                _config_peer(_ws(True), "the warp-specialized kernels", _WS_DTYPES)),
         "fusedmoe-notrim": _with_setting("set_trim_stages", False),
         "fusedmoe-noskip": _with_setting("set_ws_skip_padding_half", False),
         "fusedmoe-divq": _with_setting("set_reciprocal_quant", False),
         "fusedmoe-nohandoff": _with_setting("set_ws_padded_handoff", False),
         "fusedmoe-wsdec": _with_setting(_set_ws_decode, True),
         "fusedmoe-wsdecfused": _with_setting(_set_ws_decode, (True, 2, 0, 1, True, True)),
         "fusedmoe-wsdec4": _with_setting(_set_ws_decode, (True, 4)),
         # the tuned table's decode-kernel entries with every consumer thread freeing the ring slots
         "fusedmoe-tabler": _with_setting(_set_ws_decode, (False, 2, 0, 1, True, False, True)),
         "fusedmoe-rowchunks": _with_setting(_set_chunked_rows, True),
         "fusedmoe-padgarbage": _with_setting(_set_pad_garbage, True),
         "fusedmoe-s17": _with_setting(_set_chunked_rows, True, _with_setting("set_ws_padded_handoff", False)),
         "fusedmoe-wswide": _config_peer(_ws_wide, "the wide FP8 warp-specialized tiles",
                                         ("fp8_tensor", "fp8_channel", "fp8_block")),
         "fusedmoe-g16": _config_peer(_group_m(16), "GROUP_M 16 on the warp-specialized GEMMs", _WS_DTYPES),
         "fusedmoe-g32": _config_peer(_group_m(32), "GROUP_M 32 on the warp-specialized GEMMs", _WS_DTYPES),
         "fusedmoe-ws-noskip": _with_setting("set_ws_skip_padding_half", False,
                                             _config_peer(_ws(True), "the warp-specialized kernels", _WS_DTYPES))}
