"""What ``fusedmoe bench`` measures: our backends and the peers, behind one small interface.

A peer answers ``supports(case, device)`` (None, or why not: reported as ``unsupported``, never a
crash) and ``build(case, weights)``, which returns a :class:`Runner`: ``runner(x, topk)`` computes
the routed experts ``[T, H]`` for one input set; ``runner.info(tokens)`` says what it ran (the
kernel config, its source). Peers whose call synchronizes the host set ``eager = True`` and are
timed with CUDA events instead of graphs.

* ``triton``: our Triton backend (``fusedmoe.backends.triton_moe.triton_experts``) with the
  config ``choose_moe_config`` picks -- the shipped tuned table, else the heuristic; a table file
  (``--tuned-configs``) replaces the shipped table.
* ``triton-heuristic``: the same kernels with the heuristic config only (tuned-vs-heuristic).
* ``reference``: ``fm.reference_moe``, the executable spec (a Python loop over the experts hit).
* ``torch-grouped-mm``: ``torch._grouped_mm`` on expert-sorted slots (BF16 weights only): sort,
  gather, grouped GEMM, activation, grouped GEMM, weighted scatter-add in fp32.
* ``sglang``: SGLang's Triton fused MoE (``invoke_fused_moe_kernel``, ``act_and_mul_triton``,
  ``moe_sum_reduce_triton`` and its config lookup with its tuned H200 JSON files), loaded from the
  installed ``sglang`` package or a directory holding its sources (``--sglang-path``; e.g. the
  shared harness's ``vendor/``), with small stand-ins for the few SGLang modules those files
  import (platform queries, env flags, FP8 activation quantization -- ours, same contract). Its
  ``moe_align_block_size`` is a CUDA op in SGLang; ours (``align_slots``, same contract) stands
  in, so its times include our align. Nothing of SGLang is copied into this package.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from ..config import Activation, Format, TopK
from ..weights import ExpertWeights
from .presets import BenchCase

__all__ = [
    "Peer",
    "Runner",
    "PEER_NAMES",
    "make_peer",
    "rel_errors",
    "check_bound",
    "peer_bound",
    "TritonPeer",
    "ReferencePeer",
    "GroupedMMPeer",
    "SGLangPeer",
    "find_sglang",
]

#: Peer names ``--peers`` accepts, in table order.
PEER_NAMES = ("triton", "triton-heuristic", "reference", "torch-grouped-mm", "sglang")


def rel_errors(out: torch.Tensor, ref: torch.Tensor) -> Tuple[float, float]:
    """(max |out - ref| / max |ref|, RMS(out - ref) / RMS(ref)), in float64; NaN -> inf."""
    o, r = out.detach().double(), ref.detach().double()
    if not bool(torch.isfinite(o).all()):
        return float("inf"), float("inf")
    d = o - r
    den_max = float(r.abs().max()) if r.numel() else 0.0
    den_rms = float(r.pow(2).mean().sqrt()) if r.numel() else 0.0
    mx = float(d.abs().max()) / den_max if den_max > 0 else float(d.abs().max()) if d.numel() else 0.0
    rms = float(d.pow(2).mean().sqrt()) / den_rms if den_rms > 0 else 0.0
    return mx, rms


def check_bound(act_format: Format, dtype: torch.dtype) -> Tuple[float, float]:
    """(max, rms) relative-error bounds of a backend against ``fm.reference_moe`` on the same
    quantized weights. 16-bit hidden states: one rounding of the intermediate / per-slot output
    may differ (2e-2 / 4e-3); quantized activations: such a difference can flip an FP8 / FP4
    rounding of the re-quantized intermediate (6e-2 / 1.2e-2); fp32 hidden states: 1e-4 / 1e-5."""
    if act_format.is_quantized:
        return 6e-2, 1.2e-2
    if dtype == torch.float32:
        return 1e-4, 1e-5
    return 2e-2, 4e-3


def peer_bound(act_format: Format, dtype: torch.dtype) -> Tuple[float, float]:
    """Bounds for peers that round differently from the spec (a 16-bit GEMM1 output before the
    activation, 16-bit partial sums): 5e-2 / 1e-2 for 16-bit activations, 1e-1 / 3e-2 quantized."""
    if act_format.is_quantized:
        return 1e-1, 3e-2
    return 5e-2, 1e-2


class Runner:
    """``runner(x, topk) -> out [T, H]``; ``info(tokens)`` describes what runs at that size."""

    def __init__(self, fn: Callable[[torch.Tensor, TopK], torch.Tensor],
                 info: Optional[Callable[[int], Dict[str, Any]]] = None):
        self._fn = fn
        self._info = info

    def __call__(self, x: torch.Tensor, topk: TopK) -> torch.Tensor:
        return self._fn(x, topk)

    def info(self, tokens: int) -> Dict[str, Any]:
        return dict(self._info(tokens)) if self._info else {}


class Peer:
    """Base class: a named thing to measure."""

    name = "peer"
    eager = False  # True: the call synchronizes the host (timed with events, not graphs)
    is_ours = False

    def supports(self, case: BenchCase, device: torch.device) -> Optional[str]:
        return None

    def build(self, case: BenchCase, weights: ExpertWeights) -> Runner:  # pragma: no cover - abstract
        raise NotImplementedError


def _interpreter() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def device_name(device: torch.device) -> str:
    """What the tuned table keys on: ``torch.cuda.get_device_name`` or "cpu"."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


# ---- ours ---------------------------------------------------------------------------------------


class TritonPeer(Peer):
    """Our Triton backend with an explicit config choice.

    ``table``: None = what users get (the shipped tuned table, else the heuristic); a
    ``TunedTable`` = that table, else the heuristic; ``heuristic=True`` = the heuristic only.
    """

    is_ours = True

    def __init__(self, name: str = "triton", *, table=None, heuristic: bool = False):
        self.name = name
        self.table = table
        self.heuristic = heuristic

    def supports(self, case: BenchCase, device: torch.device) -> Optional[str]:
        from ..backends import get
        from ..backends.base import MoERequest

        req = MoERequest(case.weight_format, case.act_format, case.preset.activation,
                         weight_on_input=case.weight_on_input, has_bias=case.preset.expert_bias)
        why = get("triton").supports(req, torch.device(device))
        if why:
            return why
        if torch.device(device).type != "cuda" and case.dtype == torch.bfloat16:
            return "Triton's interpreter computes bf16 dots wrongly: use --dtype fp16 on a CPU"
        return None

    def _table(self):
        from ..backends.kernel_configs import DEFAULT_TABLE_PATH, TunedTable, load_tuned_configs

        if self.heuristic:
            return TunedTable(), "heuristic"
        if self.table is not None:
            return self.table, "tuned"
        if os.path.exists(DEFAULT_TABLE_PATH):
            return load_tuned_configs(DEFAULT_TABLE_PATH), "tuned"
        return TunedTable(), "heuristic"

    def config_for(self, case: BenchCase, weights: ExpertWeights, tokens: int, device: torch.device):
        """(MoEKernelConfig, source) for ``tokens`` tokens: source "tuned" when the table has an entry for this
        shape within reach of ``tokens`` ("tuned(<device>)" when it is the entry of this GPU's tuned sibling,
        ``kernel_configs.table_devices``), else "heuristic"."""
        from ..backends.kernel_configs import choose_moe_config, table_nearest
        from ..backends.kernel_configs import WS_FP4_DEC_BLOCK_M, WS_FP4_FORMATS
        from ..backends.triton_moe import auto_ws

        table, kind = self._table()
        dev = torch.device(device)
        name = device_name(dev)
        sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else None
        I_pad = weights.padded_intermediate_size
        H, E, K = weights.hidden_size, weights.num_experts, case.routing.top_k
        act, fmt = weights.activation, weights.format
        cfg = choose_moe_config(tokens, H, I_pad, E, K, fmt, act, name, table=table, num_sms=sms)
        n1 = I_pad * (2 if act.is_gated else 1)
        hit = table_nearest(table, name, sms, weight_format=fmt, activation=act, gemm="gemm1", N=n1, K=H, E=E,
                            tokens=tokens) if kind == "tuned" else None
        src = "heuristic" if hit is None else "tuned" if hit[0] == name else f"tuned({hit[0]})"
        # what a call without a config runs: MXFP4 x BF16 prefill tiles in the FP4 warp-specialized kernel, and the
        # decode kernels (FP4: set_ws_fp4_decode, one-token calls by default; 16-bit / FP8: set_ws_decode, opt-in)
        ws = auto_ws(cfg, weights.w13, weights.w2, case.act_format, case.dtype, dev, tokens, K, act)
        tag = "+ws_fp4" if fmt in WS_FP4_FORMATS else "+ws"
        return ws, (src if ws is cfg else src + tag + ("_dec" if ws.block_m == WS_FP4_DEC_BLOCK_M else ""))

    def build(self, case: BenchCase, weights: ExpertWeights) -> Runner:
        from ..backends.triton import run_weights

        dev = weights.device
        # what fm.FusedMoE runs: MXFP4 weights with MXFP8 activations on their own FP4 layout
        weights = weights.for_activation_format(case.act_format)
        cache: Dict[int, Any] = {}

        def cfg(T: int):
            if T not in cache:
                cache[T] = self.config_for(case, weights, T, dev)
            return cache[T]

        def run(x: torch.Tensor, topk: TopK) -> torch.Tensor:
            c, _ = cfg(x.shape[0])
            return run_weights(x, weights, topk, activation_format=case.act_format,
                               weight_on_input=case.weight_on_input, config=c)

        def info(T: int) -> Dict[str, Any]:
            c, src = cfg(T)
            return {"config": {"gemm1": c.gemm1.to_dict(), "gemm2": c.gemm2.to_dict(),
                               "atomic_combine": c.atomic_combine}, "config_source": src}

        return Runner(run, info)


class ReferencePeer(Peer):
    """``fm.reference_moe``: the spec, a Python loop over the experts hit (host syncs)."""

    name = "reference"
    eager = True
    is_ours = True

    def build(self, case: BenchCase, weights: ExpertWeights) -> Runner:
        from ..backends.reference import reference_moe

        def run(x, topk):
            return reference_moe(x, weights, topk, activation=weights.activation, activation_format=case.act_format,
                                 weight_on_input=case.weight_on_input)

        return Runner(run)


# ---- torch._grouped_mm -----------------------------------------------------------------------


class GroupedMMPeer(Peer):
    """``torch._grouped_mm`` over expert-sorted slots (BF16 weights and activations only)."""

    name = "torch-grouped-mm"

    def supports(self, case: BenchCase, device: torch.device) -> Optional[str]:
        if not hasattr(torch, "_grouped_mm"):
            return f"torch {torch.__version__} has no torch._grouped_mm"
        if case.weight_format is not Format.BF16 or case.act_format is not Format.BF16:
            return "torch._grouped_mm takes 16-bit operands only (BF16 weights and activations)"
        if case.dtype != torch.bfloat16:
            return "torch._grouped_mm needs bfloat16 operands"
        dev = torch.device(device)
        if dev.type == "cuda" and torch.cuda.get_device_capability(dev) < (9, 0):
            return "torch._grouped_mm needs sm_90 or newer in this torch build"
        return None

    def build(self, case: BenchCase, weights: ExpertWeights) -> Runner:
        from ..activations import apply_activation

        E = weights.num_experts
        w13t = weights.w13.data.transpose(-2, -1)  # [E, H, M]
        w2t = weights.w2.data.transpose(-2, -1)  # [E, I_pad, H]
        b13, b2 = weights.w13_bias, weights.w2_bias
        act, params = weights.activation, weights.act_params
        on_input = case.weight_on_input

        def run(x: torch.Tensor, topk: TopK) -> torch.Tensor:
            T, K = topk.ids.shape
            ids = topk.ids.reshape(-1).long()
            order = torch.argsort(ids, stable=True)
            counts = torch.zeros(E, dtype=torch.int32, device=x.device).scatter_add_(
                0, ids, torch.ones_like(ids, dtype=torch.int32))
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            tok = order // K
            e_sorted = ids[order]
            w_sorted = topk.weights.reshape(-1)[order].float()
            h = torch._grouped_mm(x[tok], w13t, offs=offs).float()
            if on_input:
                h = h * w_sorted[:, None]
            if b13 is not None:
                h = h + b13[e_sorted]
            a = apply_activation(h, act, params).to(x.dtype)
            y = torch._grouped_mm(a, w2t, offs=offs).float()
            if b2 is not None:
                y = y + b2[e_sorted]
            if not on_input:
                y = y * w_sorted[:, None]
            out = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
            out.index_add_(0, tok, y)
            return out.to(x.dtype)

        return Runner(run)


# ---- SGLang ----------------------------------------------------------------------------------

# where the two files live inside an sglang source tree, newest layout first
_SGL_KERNELS = ("sglang/kernels/ops/moe/fused_moe_triton_kernels.py",
                "sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_kernels.py")
_SGL_CONFIG = ("sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py",
               "sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py")
_SGL_CONFIG_PKG = ("sglang.srt.layers.moe.moe_runner.triton_utils", "sglang.srt.layers.moe.fused_moe_triton")


def find_sglang(path: Optional[str] = None) -> Tuple[Optional[Path], str]:
    """(root holding ``sglang/``, how it was found) or (None, why not). ``path``: a directory
    containing ``sglang/`` (or the ``sglang`` package directory itself); default: the installed
    package, located without importing it."""
    if path:
        p = Path(path).expanduser().resolve()
        if (p / "sglang").is_dir():
            root = p
        elif p.name == "sglang" and p.is_dir():
            root = p.parent
        else:
            return None, f"--sglang-path {path}: no sglang/ directory there"
        how = f"sources at {root}"
    else:
        try:
            spec = importlib.util.find_spec("sglang")
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return None, "the sglang package is not installed (pip install sglang, or --sglang-path DIR)"
        root = Path(list(spec.submodule_search_locations)[0]).resolve().parent
        how = f"installed package at {root / 'sglang'}"
    if not any((root / k).exists() for k in _SGL_KERNELS):
        return None, f"{root}: no fused_moe_triton_kernels.py in this sglang (looked for {', '.join(_SGL_KERNELS)})"
    return root, how


class _SGLangModules:
    """The two SGLang modules, executed from their files with stand-ins for their imports."""

    def __init__(self, root: Path):
        self.root = root
        kpath = next(root / k for k in _SGL_KERNELS if (root / k).exists())
        cpath = next((root / c for c in _SGL_CONFIG if (root / c).exists()), None)
        with self.shims():
            self.kernels = self._exec("fusedmoe_peer_sglang_kernels", kpath)
            self.config = self._exec("fusedmoe_peer_sglang_config", cpath) if cpath else None
        if self.config is not None:
            import logging

            logging.getLogger(self.config.__name__).setLevel(logging.ERROR)

    @staticmethod
    def _exec(name: str, path: Path) -> types.ModuleType:
        spec = importlib.util.spec_from_file_location(name, str(path))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    @staticmethod
    def _stand_ins() -> Dict[str, Dict[str, Any]]:
        from ..formats import quantize_act

        def cuda() -> bool:
            return torch.cuda.is_available() and not _interpreter()

        def sm90() -> bool:
            return cuda() and torch.cuda.get_device_capability() >= (9, 0)

        def pdl() -> bool:
            # SGLang turns programmatic dependent launch on for sm_90+; FUSEDMOE_SGLANG_PDL=0 turns it off
            return sm90() and os.environ.get("FUSEDMOE_SGLANG_PDL", "1") not in ("0", "false")

        def scaled_fp8_quant(x, scale=None, num_token_padding=None, use_per_token_if_dynamic=False):
            if num_token_padding:
                raise NotImplementedError("num_token_padding is not part of this benchmark")
            if scale is not None:
                q = quantize_act(x, Format.FP8_TENSOR, static_scale=scale)
                return q.data, scale
            if use_per_token_if_dynamic:
                q = quantize_act(x, Format.FP8_TOKEN)
                return q.data, q.scale.reshape(-1, 1)
            q = quantize_act(x, Format.FP8_TENSOR)
            return q.data, q.scale.reshape(1)

        def group_quant(x, group_size, eps=1e-10, *args, **kwargs):
            if group_size != 128 or args or any(kwargs.values()):
                raise NotImplementedError("only 1x128 FP8 groups with row-major scales are shimmed")
            q = quantize_act(x, Format.FP8_BLOCK)
            return q.data, q.scale

        def no_int8(*_a, **_k):
            raise NotImplementedError("int8 quantization is not part of this benchmark")

        class _Flag:
            def get(self):
                return False

        class _Envs:
            def __getattr__(self, name):
                return _Flag()

        class _Exec:
            class deterministic:
                enable_deterministic_inference = False

            class moe:
                enable_fused_moe_sum_all_reduce = False

        dev_name = lambda device_id=0: torch.cuda.get_device_name(device_id) if cuda() else "cpu"  # noqa: E731
        utils = dict(cpu_has_amx_support=lambda: False, is_cpu=lambda: not cuda(), is_cuda=cuda,
                     is_hip=lambda: False, is_sm90_supported=sm90, get_device_name=dev_name)
        mods = {
            "sglang.kernels.jit.utils": dict(is_arch_support_pdl=pdl),
            "sglang.kernels.ops.quantization.fp8_kernel": dict(
                scaled_fp8_quant=scaled_fp8_quant, per_token_group_quant_fp8=group_quant,
                sglang_per_token_group_quant_fp8=group_quant),
            "sglang.kernels.ops.quantization.int8_kernel": dict(
                per_token_group_quant_int8=no_int8, per_token_quant_int8=no_int8,
                sglang_per_token_group_quant_int8=no_int8),
            "sglang.srt.batch_invariant_ops": dict(is_batch_invariant_mode_enabled=lambda: False),
            "sglang.srt.environ": dict(envs=_Envs()),
            "sglang.srt.layers.moe.utils": dict(get_moe_padding_size=lambda *a, **k: 0),
            "sglang.srt.runtime_context": dict(get_exec=lambda: _Exec),
            "sglang.srt.utils": utils,
        }
        for pkg in _SGL_CONFIG_PKG:
            mods[pkg] = dict(get_config=lambda: None)
        return mods

    @contextmanager
    def shims(self):
        """Install the stand-in modules in ``sys.modules`` (and their parent packages), restore
        whatever was there afterwards."""
        stand_ins = self._stand_ins()
        names = set(stand_ins)
        for n in list(stand_ins):
            parts = n.split(".")
            names.update(".".join(parts[:i]) for i in range(1, len(parts)))
        saved = {n: sys.modules.get(n) for n in names}
        try:
            for n in sorted(names):
                m = types.ModuleType(n)
                m.__path__ = []
                m.__dict__.update(stand_ins.get(n, {}))
                sys.modules[n] = m
            yield
        finally:
            for n, m in saved.items():
                if m is None:
                    sys.modules.pop(n, None)
                else:
                    sys.modules[n] = m


_SGL_LOADED: Dict[str, _SGLangModules] = {}


class SGLangPeer(Peer):
    """SGLang's Triton fused MoE, driven like its ``fused_experts`` (non-inplace, no bias)."""

    name = "sglang"

    def __init__(self, path: Optional[str] = None):
        self.path = path
        self._mods: Optional[_SGLangModules] = None
        self._why: Optional[str] = None
        self.source = ""

    def _load(self) -> Optional[str]:
        if self._mods is not None or self._why is not None:
            return self._why
        root, how = find_sglang(self.path)
        if root is None:
            self._why = how
            return how
        try:
            key = str(root)
            if key not in _SGL_LOADED:
                _SGL_LOADED[key] = _SGLangModules(root)
            self._mods = _SGL_LOADED[key]
            self.source = how
        except Exception as exc:  # a different sglang version needs other stand-ins: report, do not crash
            self._why = f"could not load SGLang's fused MoE from {how}: {type(exc).__name__}: {exc}"
        return self._why

    def supports(self, case: BenchCase, device: torch.device) -> Optional[str]:
        why = self._load()
        if why:
            return why
        dev = torch.device(device)
        if dev.type != "cuda" and not _interpreter():
            return "SGLang's Triton kernels need a CUDA device (or TRITON_INTERPRET=1)"
        if dev.type != "cuda" and case.dtype == torch.bfloat16:
            return "Triton's interpreter computes bf16 dots wrongly: use --dtype fp16 on a CPU"
        if case.weight_format not in (Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK):
            return f"SGLang's Triton fused MoE has no {case.weight_format.name} weights"
        if case.act_format is not case.weight_format.natural_activation_format():
            return f"only {case.weight_format.natural_activation_format().name} activations with {case.weight_format.name} weights"
        if case.preset.activation not in (Activation.SWIGLU, Activation.GEGLU, Activation.RELU2):
            return f"{case.preset.activation.name} is not an activation of SGLang's Triton path (silu/gelu gated, relu2)"
        if case.preset.expert_bias:
            return "expert biases are not driven in this peer"
        if case.weight_on_input:
            return "routing weight on the input (Llama4) is not driven in this peer"
        return None

    def build(self, case: BenchCase, weights: ExpertWeights) -> Runner:
        import triton.language as tl

        from ..backends.triton_moe import align_slots

        why = self._load()
        if why:
            raise NotImplementedError(why)
        mods = self._mods
        k = mods.kernels
        fmt = case.weight_format
        fp8 = fmt is not Format.BF16
        per_channel = fmt is Format.FP8_CHANNEL
        block_shape = [128, 128] if fmt is Format.FP8_BLOCK else None
        E, H = weights.num_experts, weights.hidden_size
        I = weights.padded_intermediate_size
        gated = weights.activation.is_gated
        n1 = 2 * I if gated else I
        w1, w2 = weights.w13.data, weights.w2.data
        w1s, w2s = weights.w13.scale, weights.w2.scale
        a1s, a2s = weights.input_scale, weights.intermediate_scale
        qk = dict(use_fp8_w8a8=fp8, use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
                  per_channel_quant=per_channel, block_shape=block_shape)
        dtype_str = "fp8_w8a8" if fp8 else None
        act_name = {Activation.SWIGLU: "silu", Activation.GEGLU: "gelu"}.get(weights.activation)
        cache: Dict[int, Tuple[dict, Optional[dict], str]] = {}

        def configs(M: int):
            if M in cache:
                return cache[M]
            with mods.shims():
                res = mods.config.try_get_optimal_moe_config((E, n1, H), (E, H, I), case.routing.top_k, dtype_str, M,
                                                             block_shape=block_shape, per_channel_quant=per_channel,
                                                             return_down_config=True)
                name = mods.config.get_config_file_name(E, I, dtype_str, block_shape, per_channel)
            up, (down, _) = res
            up = dict(up)
            down = dict(down) if down is not None else None
            up.pop("USE_TMA", None)
            if down is not None:
                down.pop("USE_TMA", None)
            cfg_dir = Path(mods.config.__file__).parent / "configs"
            src = "default"
            if cfg_dir.is_dir():
                import triton

                want = "triton_" + triton.__version__.replace(".", "_")
                hits = sorted((d.name for d in cfg_dir.iterdir() if (d / name).exists()),
                              key=lambda v: tuple(int(x) for x in v.split("_")[1:] if x.isdigit()))
                if want in hits:
                    src = "tuned:" + want
                elif hits:
                    src = f"tuned:{hits[-1]}(fallback)"
            cache[M] = (up, down, src)
            return cache[M]

        def run(x: torch.Tensor, topk: TopK) -> torch.Tensor:
            M = x.shape[0]
            K = topk.ids.shape[1]
            ids, tw = topk.ids, topk.weights
            up, down, _ = configs(M)
            al = align_slots(ids, E, up["BLOCK_SIZE_M"])
            ct = tl.bfloat16 if x.dtype == torch.bfloat16 else tl.float16
            c1 = torch.empty((M * K, n1), device=x.device, dtype=x.dtype)
            k.invoke_fused_moe_kernel(x, w1, None, c1, a1s, w1s, None, tw, ids, al.sorted_ids, al.block_expert,
                                      al.num_post_padded, False, K, up, compute_type=ct, **qk)
            if gated:
                c2 = torch.empty((M * K, I), device=x.device, dtype=x.dtype)
                k.act_and_mul_triton(c1, c2, up, ids, None, False, act_name)
            else:
                c2 = torch.square(torch.relu(c1))
            c3 = torch.empty((M, K, H), device=x.device, dtype=x.dtype)
            k.invoke_fused_moe_kernel(c2, w2, None, c3, a2s, w2s, None, tw, ids, al.sorted_ids, al.block_expert,
                                      al.num_post_padded, True, 1, down or up, compute_type=ct, **qk)
            out = torch.empty_like(x)
            if K == 1:
                out.copy_(c3[:, 0])
            elif K == 2:
                torch.add(c3[:, 0], c3[:, 1], out=out)
            else:
                k.moe_sum_reduce_triton(c3, out, 1.0)
            return out

        def info(M: int) -> Dict[str, Any]:
            up, down, src = configs(M)
            return {"config": {"up": up, "down": down}, "config_source": src, "sglang": self.source}

        return Runner(run, info)


def make_peer(name: str, *, table=None, sglang_path: Optional[str] = None) -> Peer:
    """The peer called ``name`` (one of :data:`PEER_NAMES`)."""
    if name == "triton":
        return TritonPeer("triton", table=table)
    if name == "triton-heuristic":
        return TritonPeer("triton-heuristic", heuristic=True)
    if name == "reference":
        return ReferencePeer()
    if name == "torch-grouped-mm":
        return GroupedMMPeer()
    if name == "sglang":
        return SGLangPeer(sglang_path)
    raise ValueError(f"unknown peer {name!r}; expected one of {', '.join(PEER_NAMES)}")
