"""Ceilings, bytes and flops of a MoE forward, the time floor and the percent of roofline.

Method (the shared peer harness's, ``shared/bench/peers/README.md``):

* **Ceilings**, measured once per run on the device: device-to-device copy bandwidth (bytes read
  plus written), read bandwidth (``torch.sum`` over a large bf16 tensor, bytes read: MoE weights
  are only read), a BF16 and an FP8 matrix product of 8192^3. The memory ceiling is the larger
  of the two bandwidths, so the floor is never flattering. On a CPU the same measurements run at
  small sizes and are marked not meaningful.
* **Bytes** of one forward: ``touched_experts x bytes_per_expert + T x H x 2 (input read) +
  T x H x 2 (output written)``, with 16-bit hidden states. ``bytes_per_expert`` counts the
  logical (unpadded) weights of w13 and w2 in the storage format, their scales, and the fp32
  expert biases where the model has them. ``touched_experts`` is the number of distinct experts
  in the routed ids (the mean over the input sets of a point).
* **Flops**: ``2 x T x top_k x H x (N1 + I)``, N1 = 2I gated, I otherwise.
* **Floor** ``max(bytes / mem_bw, flops / peak)``, peak = the FP8 rate when the activations
  are FP8, else the BF16 rate; **percent of roofline** ``100 x floor / time``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Tuple

import torch

from ..config import Format
from .timing import time_calls

__all__ = [
    "Ceilings",
    "measure_ceilings",
    "expert_bytes",
    "moe_bytes",
    "moe_flops",
    "touched_experts",
    "expected_touched",
    "floor_seconds",
    "roofline_pct",
    "REGIONS",
    "region_of",
    "geomean",
]

_FP8_ACT = (Format.FP8_TENSOR, Format.FP8_TOKEN, Format.FP8_BLOCK, Format.MXFP8)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _matrix_bytes(rows: int, cols: int, fmt: Format) -> int:
    """Bytes of one expert matrix [rows, cols] (cols = the quantized, contracted dim) in ``fmt``,
    scales included. FP8_BLOCK uses 128x128 tiles; per-tensor scales are one fp32 per matrix."""
    n = rows * cols
    if fmt is Format.BF16:
        return 2 * n
    if fmt is Format.FP8_TENSOR:
        return n + 4
    if fmt in (Format.FP8_CHANNEL, Format.FP8_TOKEN):
        return n + 4 * rows
    if fmt is Format.FP8_BLOCK:
        return n + 4 * _cdiv(rows, 128) * _cdiv(cols, 128)
    if fmt is Format.MXFP8:
        return n + rows * _cdiv(cols, 32)
    if fmt is Format.MXFP4:
        return n // 2 + rows * _cdiv(cols, 32)
    if fmt is Format.NVFP4:
        return n // 2 + rows * _cdiv(cols, 16) + 4
    raise ValueError(f"unknown format {fmt!r}")


def expert_bytes(hidden: int, intermediate: int, gated: bool, weight_format: Format, *, bias: bool = False) -> int:
    """Bytes one expert's weights occupy (and a forward reads when the expert is hit).

    Gated w13 counts its gate and up halves as two [I, H] matrices (as checkpoints store them, so
    FP8 block scales tile each half separately); w2 is [H, I]; biases are fp32 [N1] and [H].
    """
    H, I = int(hidden), int(intermediate)
    w13 = 2 * _matrix_bytes(I, H, weight_format) if gated else _matrix_bytes(I, H, weight_format)
    w2 = _matrix_bytes(H, I, weight_format)
    b = 4 * ((2 * I if gated else I) + H) if bias else 0
    return w13 + w2 + b


def moe_bytes(tokens: int, hidden: int, touched: float, bytes_per_expert: int, act_bytes: int = 2) -> float:
    """Compulsory traffic of one forward: the touched experts' weights, the input read once and
    the output written once (``act_bytes`` per element of hidden states)."""
    return touched * bytes_per_expert + 2 * tokens * hidden * act_bytes


def moe_flops(tokens: int, hidden: int, intermediate: int, top_k: int, gated: bool) -> int:
    """``2 x T x top_k x H x (N1 + I)``: both expert GEMMs of every routed slot."""
    n1 = 2 * intermediate if gated else intermediate
    return 2 * tokens * top_k * hidden * (n1 + intermediate)


def touched_experts(topk_ids: torch.Tensor, num_experts: int) -> int:
    """Distinct expert ids in ``[0, num_experts)`` among ``topk_ids``."""
    ids = topk_ids.reshape(-1).long()
    ids = ids[(ids >= 0) & (ids < num_experts)]
    return int(torch.unique(ids).numel())


def expected_touched(num_experts: int, top_k: int, tokens: int) -> float:
    """``E (1 - (1 - k/E)^T)``: distinct experts expected under uniform routing."""
    E = num_experts
    return E * (1.0 - (1.0 - top_k / E) ** tokens)


@dataclass
class Ceilings:
    """Measured ceilings (GB/s and TFLOP/s); ``meaningful`` is False on a CPU."""

    device: str
    copy_gbps: float
    read_gbps: float
    bf16_tflops: float
    fp8_tflops: Optional[float]
    meaningful: bool
    notes: Tuple[str, ...] = ()

    @property
    def mem_gbps(self) -> float:
        return max(self.copy_gbps, self.read_gbps)

    def peak_tflops(self, act_format: Format) -> float:
        """The matmul rate a format's GEMMs run at: FP8 activations -> the FP8 rate (BF16 rate
        where FP8 could not be measured), everything else -> the BF16 rate."""
        if act_format in _FP8_ACT and self.fp8_tflops:
            return self.fp8_tflops
        return self.bf16_tflops

    def to_dict(self) -> Dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["mem_gbps"] = self.mem_gbps
        return d

    @classmethod
    def from_dict(cls, d: Dict) -> "Ceilings":
        return cls(device=d["device"], copy_gbps=d["copy_gbps"], read_gbps=d["read_gbps"],
                   bf16_tflops=d["bf16_tflops"], fp8_tflops=d.get("fp8_tflops"), meaningful=d["meaningful"],
                   notes=tuple(d.get("notes", ())))


def floor_seconds(nbytes: float, flops: float, ceilings: Ceilings, act_format: Format) -> float:
    """The roofline time floor: the larger of the memory time and the compute time."""
    return max(nbytes / (ceilings.mem_gbps * 1e9), flops / (ceilings.peak_tflops(act_format) * 1e12))


def roofline_pct(seconds: float, floor_s: float) -> float:
    """``100 x floor / time`` (100 = at the roofline)."""
    return 100.0 * floor_s / seconds if seconds > 0 else float("nan")


#: Token regions of the summaries: (label, largest token count in it).
REGIONS: Tuple[Tuple[str, float], ...] = (("1-8", 8), ("9-128", 128), ("129-1024", 1024), (">1024", math.inf))


def region_of(tokens: int) -> str:
    for label, hi in REGIONS:
        if tokens <= hi:
            return label
    return REGIONS[-1][0]  # pragma: no cover


def geomean(values: Iterable[float]) -> Optional[float]:
    """Geometric mean of the positive finite values (None if there are none)."""
    v = [x for x in values if x is not None and math.isfinite(x) and x > 0]
    if not v:
        return None
    return math.exp(sum(math.log(x) for x in v) / len(v))


# ---- measuring the ceilings -------------------------------------------------------------------


def _time_device(fn, device: torch.device, reps: int) -> float:
    """Median seconds of ``fn`` after a warm-up: CUDA events on a GPU, wall clock on a CPU."""
    method = "events" if device.type == "cuda" else "wall"
    return time_calls([fn], device, method=method, warmup=1, reps=reps, budget_s=600.0).median_s


def measure_ceilings(device, *, quick: bool = False) -> Ceilings:
    """Measure copy and read bandwidth and the BF16 / FP8 matmul rates on ``device``.

    CUDA: 2 GiB copy, 2 GiB bf16 read, 8192^3 matmuls (about 3 s on an H200; ``quick`` times 3
    repetitions instead of 10 at the same sizes: smaller buffers and matmuls under-measure -- on an
    H200, 512 MiB read 3.4 TB/s against 4.3 TB/s at 2-4 GiB, and 4096^3 BF16 630 TF/s against
    686, which would overstate every percent of roofline). CPU: 64 MiB and 512^3 -- plumbing only.
    """
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    notes: List[str] = []
    if cuda:
        nbytes, n_mm = 1 << 31, 8192
        reps = 3 if quick else 10
    else:
        nbytes, n_mm, reps = 1 << 26, 512, 3
        notes.append("CPU: wall-clock plumbing numbers, not device ceilings")
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).uniform_(-1, 1)
    dst = torch.empty_like(src)
    t = _time_device(lambda d=dst, s=src: d.copy_(s), dev, reps)
    copy_gbps = 2 * nbytes / t / 1e9
    del dst
    del src
    rd = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    t = _time_device(lambda r=rd: torch.sum(r, dtype=torch.float32), dev, reps)
    read_gbps = rd.numel() * 2 / t / 1e9
    del rd
    a = torch.randn(n_mm, n_mm, device=dev).to(torch.bfloat16)
    b = torch.randn(n_mm, n_mm, device=dev).to(torch.bfloat16)
    t = _time_device(lambda: torch.mm(a, b), dev, reps)
    bf16_tflops = 2 * n_mm ** 3 / t / 1e12
    fp8_tflops = None
    if cuda and hasattr(torch, "_scaled_mm"):
        try:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.to(torch.float8_e4m3fn).t()  # column-major second operand
            one = torch.ones((), dtype=torch.float32, device=dev)
            rates = []
            for fast in (False, True):
                t = _time_device(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                          use_fast_accum=fast), dev, reps)
                rates.append(2 * n_mm ** 3 / t / 1e12)
            fp8_tflops = max(rates)
        except (RuntimeError, TypeError) as exc:  # older GPUs / torch builds without FP8 GEMMs
            notes.append(f"FP8 matmul not measured ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
    elif not cuda:
        notes.append("FP8 matmul not measured on a CPU (FP8 floors use the BF16 rate)")
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    return Ceilings(device=name, copy_gbps=copy_gbps, read_gbps=read_gbps, bf16_tflops=bf16_tflops,
                    fp8_tflops=fp8_tflops, meaningful=cuda, notes=tuple(notes))
