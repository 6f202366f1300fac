"""``fusedmoe check``: correctness sweep of every backend on this device.

Three sweeps, each on fresh random data (weights ``randn/sqrt(fan_in)``, biases where the
activation is gpt-oss's, routing from random logits):

* **activations x formats** (one routing method): every activation with every weight format
  (each with its natural activation format);
* **routing methods** (SwiGLU, BF16): every routing method, with its own rules (grouped
  DeepSeek-V3 with a scale, Llama4 top-1 with the weight on the input, MiniMax2 with a bias);
  where the Triton routing kernel can run, its ids and weights are compared with the torch
  routing reference too (ids equal, weights within 1e-5);
* with ``full=True``: the whole product activations x formats x routing methods.

Per combination and backend the output is compared with

* ``fm.reference_moe`` (the spec: same quantized weights, same activation quantization):
  ``max |out - ref| / max |ref|`` and ``RMS(out - ref) / RMS(ref)`` within
  :func:`fusedmoe.bench.peers.check_bound`;
* for the reference itself: an independent float64 computation written here from the spec
  (dequantized weights, activations quantized with ``fm.quantize``, the intermediate rounded to
  the hidden dtype and re-quantized, float64 GEMMs, fp32 combine), same bounds.

Where a backend cannot run a combination the cell says why (``n/a``). On a CPU the triton
backend runs only under ``TRITON_INTERPRET=1`` (tiny shapes, fp16 hidden states: the
interpreter's bf16 dot is wrong).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..config import Activation, ActivationParams, Format, RoutingConfig, RoutingMethod, TopK
from ..weights import ExpertWeights

__all__ = ["CheckShape", "routing_for", "moe_float64", "run_check", "print_check", "CPU_SHAPE", "GPU_SHAPE"]


@dataclass(frozen=True)
class CheckShape:
    hidden: int
    intermediate: int
    experts: int
    top_k: int
    tokens: Tuple[int, ...]


#: Tiny shape for CPUs (interpreter): I=96 pads to 128 non-gated / FP8 block; 8 experts, 9 tokens
#: (18 slots: most experts get more than one row).
CPU_SHAPE = CheckShape(128, 96, 8, 2, (9,))
#: GPU shape: non-aligned I (360 as in gpt-oss TP8), 32 experts, decode and a prefill size at
#: which every expert gets tokens.
GPU_SHAPE = CheckShape(1024, 360, 32, 4, (1, 7, 300))

WEIGHT_FORMATS = tuple(f for f in Format if f.is_weight_format)


def routing_for(method: RoutingMethod, experts: int, top_k: int) -> Tuple[RoutingConfig, bool]:
    """(config, weight_on_input) of a routing method at this size, with its own rules."""
    if method is RoutingMethod.LLAMA4:
        return RoutingConfig(method, 1), True
    if method is RoutingMethod.DEEPSEEK_V3:
        ng = 4 if experts % 4 == 0 and experts // 4 >= 2 else 1
        tg = 2 if ng > 1 else 1
        k = min(top_k, tg * (experts // ng) - 1)
        return RoutingConfig(method, k, n_group=ng, topk_group=tg, routed_scaling_factor=2.5), False
    if method is RoutingMethod.MINIMAX2:
        return RoutingConfig(method, top_k, routed_scaling_factor=1.0), False
    return RoutingConfig(method, top_k), False


def _act64(h: torch.Tensor, act: Activation, p: Optional[ActivationParams]) -> torch.Tensor:
    """The activations, written again from semantics.md (float64), not fusedmoe.activations."""
    if act.is_gated:
        half = h.shape[-1] // 2
        g, u = h[..., :half], h[..., half:]
        if act is Activation.SWIGLU:
            return g / (1 + torch.exp(-g)) * u
        if act is Activation.GEGLU:
            return 0.5 * g * (1 + torch.erf(g / math.sqrt(2))) * u
        p = p or ActivationParams()
        g = torch.clamp(g, max=p.limit)
        u = torch.clamp(u, -p.limit, p.limit)
        return g / (1 + torch.exp(-p.alpha * g)) * (u + p.beta)
    if act is Activation.RELU2:
        return torch.clamp(h, min=0) ** 2
    if act is Activation.GELU:
        return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    if act is Activation.SILU:
        return h / (1 + torch.exp(-h))
    if act is Activation.RELU:
        return torch.clamp(h, min=0)
    return h


def _qdq(x: torch.Tensor, fmt: Format, static: Optional[torch.Tensor]) -> torch.Tensor:
    from ..backends.reference import quantize_dequantize_activation

    if fmt is Format.BF16:
        return x.double()  # keep float64 inputs float64
    return quantize_dequantize_activation(x, fmt, static).double()


@torch.no_grad()
def moe_float64(x: torch.Tensor, weights: ExpertWeights, topk: TopK, act_format: Format, *,
                weight_on_input: bool = False) -> torch.Tensor:
    """The MoE experts from the spec in float64 (see the module docstring); returns x's dtype."""
    from ..formats import dequantize

    T, H = x.shape
    ids = topk.ids.long()
    w = topk.weights.double()
    a = _qdq(x, act_format, weights.input_scale)
    w13 = dequantize(weights.w13, torch.float32).double()
    w2 = dequantize(weights.w2, torch.float32).double()
    K = ids.shape[1]
    tok = torch.arange(T, device=x.device).repeat_interleave(K)
    e = ids.reshape(-1)
    sw = w.reshape(-1)
    h = torch.einsum("sh,snh->sn", a[tok], w13[e])
    if weight_on_input:
        h = h * sw[:, None]
    if weights.w13_bias is not None:
        h = h + weights.w13_bias.double()[e]
    z = _act64(h, weights.activation, weights.act_params).to(x.dtype)  # rounded like the kernels
    z = _qdq(z, act_format, weights.intermediate_scale)
    y = torch.einsum("si,shi->sh", z, w2[e])
    if weights.w2_bias is not None:
        y = y + weights.w2_bias.double()[e]
    if not weight_on_input:
        y = y * sw[:, None]
    out = y.reshape(T, K, H).sum(dim=1)  # slots are in token-major order: t*K + k
    return out.float().to(x.dtype)


def _weights(shape: CheckShape, act: Activation, fmt: Format, device, dtype, g: torch.Generator) -> ExpertWeights:
    H, I, E = shape.hidden, shape.intermediate, shape.experts
    n1 = 2 * I if act.is_gated else I
    w13 = torch.randn(E, n1, H, generator=g, device=device) * H ** -0.5
    w2 = torch.randn(E, H, I, generator=g, device=device) * I ** -0.5
    bias = act is Activation.SWIGLU_OAI
    b13 = torch.randn(E, n1, generator=g, device=device) * 0.1 if bias else None
    b2 = torch.randn(E, H, generator=g, device=device) * 0.1 if bias else None
    kw = {"dtype": dtype} if fmt is Format.BF16 else {}
    return ExpertWeights.from_float(w13, w2, activation=act, format=fmt, w13_bias=b13, w2_bias=b2, **kw)


def _backend_why_not(name: str, fmt: Format, af: Format, act: Activation, on_input: bool, has_bias: bool,
                     device: torch.device, dtype: torch.dtype) -> Optional[str]:
    from .. import backends
    from ..backends.base import MoERequest

    why = backends.get(name).supports(MoERequest(fmt, af, act, weight_on_input=on_input, has_bias=has_bias), device)
    if why:
        return why
    if name == "triton" and device.type != "cuda" and dtype == torch.bfloat16:
        return "interpreter: bf16 dots are wrong, use --dtype fp16"
    return None


def run_check(device, *, backends: Optional[Sequence[str]] = None, activations: Optional[Sequence[Activation]] = None,
              formats: Optional[Sequence[Format]] = None, routings: Optional[Sequence[RoutingMethod]] = None,
              full: bool = False, shape: Optional[CheckShape] = None, dtype: Optional[torch.dtype] = None,
              seed: int = 0, progress: Optional[Callable[[str, int], None]] = None) -> Dict[str, Any]:
    """Run the sweep; returns {"rows": [...], "routing_rows": [...], "env": ...}. Every row:
    activation, format, act_format, routing, backend, status (ok | FAIL | n/a | error), max_rel,
    rms_rel, bound, against (reference | float64), error."""
    from .. import backends as be
    from ..backends.reference import reference_moe
    from ..routing import route
    from ..routing.triton_routing import triton_can_run
    from .peers import check_bound, rel_errors

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    shape = shape or (GPU_SHAPE if cuda else CPU_SHAPE)
    dtype = dtype or (torch.bfloat16 if cuda else torch.float16)
    names = list(backends or be.available())
    acts = list(activations or Activation)
    fmts = list(formats or WEIGHT_FORMATS)
    meths = list(routings or RoutingMethod)
    default_routing = RoutingMethod.RENORMALIZE_NAIVE
    combos: List[Tuple[Activation, Format, RoutingMethod]] = []
    if full:
        combos = [(a, f, m) for a in acts for f in fmts for m in meths]
    else:
        r0 = default_routing if default_routing in meths else meths[0]
        combos = [(a, f, r0) for a in acts for f in fmts]
        a0 = Activation.SWIGLU if Activation.SWIGLU in acts else acts[0]
        f0 = Format.BF16 if Format.BF16 in fmts else fmts[0]
        combos += [(a0, f0, m) for m in meths if (a0, f0, m) not in combos]
    g = torch.Generator(device=dev).manual_seed(seed)
    rows: List[Dict[str, Any]] = []
    routing_rows: List[Dict[str, Any]] = []
    routed_checked = set()
    tri_route = triton_can_run(dev)
    for act, fmt, meth in combos:
        af = fmt.natural_activation_format()
        rcfg, on_input = routing_for(meth, shape.experts, shape.top_k)
        problem = None
        if fmt.block_size and shape.hidden % fmt.block_size:
            problem = f"H={shape.hidden} is not a multiple of {fmt.block_size}"
        weights = None if problem else _weights(shape, act, fmt, dev, dtype, g)
        for T in shape.tokens:
            x = torch.randn(T, shape.hidden, generator=g, device=dev).to(dtype)
            logits = torch.randn(T, shape.experts, generator=g, device=dev)
            bias = torch.randn(shape.experts, generator=g, device=dev) * 0.1 if rcfg.uses_bias else None
            topk = route(logits, rcfg, bias, impl="reference")
            if tri_route and (meth, T) not in routed_checked:
                routed_checked.add((meth, T))
                rrow = {"routing": meth.name.lower(), "tokens": T}
                try:
                    tk = route(logits, rcfg, bias, impl="triton")
                    same = bool(torch.equal(tk.ids.long(), topk.ids.long()))
                    werr = float((tk.weights.double() - topk.weights.double()).abs().max()) if T else 0.0
                    rrow.update(ids_equal=same, weights_max_abs=werr, status="ok" if same and werr <= 1e-5 else "FAIL")
                except Exception as exc:
                    rrow.update(status="error", error=f"{type(exc).__name__}: {exc}")
                routing_rows.append(rrow)
            ref = None
            for name in names:
                row = {"activation": act.value, "format": fmt.value, "act_format": af.value, "routing": meth.name.lower(),
                       "tokens": T, "backend": name}
                why = problem or _backend_why_not(name, fmt, af, act, on_input, act is Activation.SWIGLU_OAI, dev, dtype)
                if why:
                    row.update(status="n/a", error=why)
                    rows.append(row)
                    continue
                try:
                    if ref is None:
                        ref = reference_moe(x, weights, topk, activation=act, activation_format=af,
                                            weight_on_input=on_input)
                    if name == "reference":
                        out, against = ref, moe_float64(x, weights, topk, af, weight_on_input=on_input)
                        row["against"] = "float64"
                    else:
                        out = be.get(name).run(x, weights, topk, activation_format=af, local_expert_offset=0,
                                               weight_on_input=on_input)
                        against = ref
                        row["against"] = "reference"
                    mx, rms = rel_errors(out, against)
                    bound = check_bound(af, dtype)
                    ok = mx <= bound[0] and rms <= bound[1]
                    row.update(status="ok" if ok else "FAIL", max_rel=mx, rms_rel=rms, bound=list(bound))
                except Exception as exc:
                    row.update(status="error", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
                rows.append(row)
        if progress:
            progress(f"{act.value}/{fmt.value}/{meth.name.lower()}", 1)
    env = {"device": torch.cuda.get_device_name(dev) if cuda else "cpu", "dtype": str(dtype).replace("torch.", ""),
           "shape": {"H": shape.hidden, "I": shape.intermediate, "E": shape.experts, "top_k": shape.top_k,
                     "tokens": list(shape.tokens)},
           "triton_interpret": os.environ.get("TRITON_INTERPRET", "0") == "1", "backends": names}
    return {"rows": rows, "routing_rows": routing_rows, "env": env, "combos": len(combos)}


def _cell(rows: List[Dict[str, Any]]) -> str:
    """One matrix cell from the rows of all token counts: worst status, worst errors."""
    if not rows:
        return ""
    if all(r["status"] == "n/a" for r in rows):
        return "n/a"
    bad = [r for r in rows if r["status"] in ("FAIL", "error")]
    if any(r["status"] == "error" for r in rows):
        return "ERROR"
    mx = max(r.get("max_rel", 0.0) for r in rows if r["status"] != "n/a")
    rms = max(r.get("rms_rel", 0.0) for r in rows if r["status"] != "n/a")
    return f"{'FAIL' if bad else 'ok'} {mx:.1e}/{rms:.1e}"


def print_check(result: Dict[str, Any], console=None) -> int:
    """Print the pass/fail matrices; returns the number of failed or erroring cells."""
    from .table import print_table

    rows = result["rows"]
    names = result["env"]["backends"]
    groups: Dict[Tuple[str, str, str], List[Dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["activation"], r["format"], r["routing"]), []).append(r)
    table_rows = []
    failed = 0
    for (act, fmt, meth), rs in groups.items():
        cells = []
        for n in names:
            c = _cell([r for r in rs if r["backend"] == n])
            failed += c.startswith("FAIL") or c == "ERROR"
            cells.append(c)
        table_rows.append([act, fmt, meth] + cells)
    env = result["env"]
    print_table(f"fusedmoe check on {env['device']} ({env['dtype']} hidden, H={env['shape']['H']} I={env['shape']['I']} "
                f"E={env['shape']['E']} top_k={env['shape']['top_k']}, T={env['shape']['tokens']})",
                ["activation", "weights", "routing", *names], table_rows, console=console)
    print("cells: status max_rel/rms_rel over the token counts; backends against fm.reference_moe, the reference "
          "against an independent float64 computation of the spec.")
    if result["routing_rows"]:
        rr = [[r["routing"], str(r["tokens"]), str(r.get("ids_equal", "-")), f"{r.get('weights_max_abs', float('nan')):.1e}",
               r["status"]] for r in result["routing_rows"]]
        failed += sum(1 for r in result["routing_rows"] if r["status"] != "ok")
        print_table("routing: Triton kernel vs torch reference", ["routing", "T", "ids equal", "max |dw|", "check"], rr,
                    console=console)
    for r in rows:
        if r["status"] in ("FAIL", "error"):
            print(f"  {r['status']}: {r['backend']} {r['activation']}/{r['format']}/{r['routing']} T={r['tokens']}: "
                  f"{r.get('error') or 'max_rel %.2e rms_rel %.2e (bounds %s)' % (r['max_rel'], r['rms_rel'], r['bound'])}")
    reasons = {}
    for r in rows:
        if r["status"] == "n/a":
            reasons.setdefault((r["backend"], r["error"]), 0)
            reasons[(r["backend"], r["error"])] += 1
    for (b, why), n in sorted(reasons.items()):
        print(f"  n/a ({n}x) {b}: {why}")
    print(f"{'ALL PASSED' if failed == 0 else f'{failed} FAILED'}")
    return failed
