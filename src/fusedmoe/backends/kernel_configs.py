"""Block sizes of the Triton MoE GEMMs: a frozen config type, a shape heuristic and a tuned table.

``choose_config`` is a pure function of the problem shape, the weight format and the device; it
consults a tuned table first (the H200 table shipped in ``configs/``, or the one set with
``use_tuned_configs``) and falls back to the heuristic below. Nothing here reads environment
variables or touches a GPU.

Tuned-table JSON (``format_version`` 1)::

    {"format_version": 1,
     "entries": [
       {"device": "NVIDIA H200", "weight_format": "fp8_tensor", "activation": "relu2",
        "gemm": "gemm1", "N": 3840, "K": 4096, "E": 128, "tokens": 64,
        "config": {"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 1,
                   "num_warps": 4, "num_stages": 5, "swap_ab": true}}]}

Key: (device name as ``torch.cuda.get_device_name()`` reports it, weight format value, activation
value (``"*"`` matches any), gemm, N, K, E_loc) plus the token bucket (a power of two >= the token
count); the entry with the nearest bucket (log scale, ties to the smaller) wins if it is at most
``MAX_BUCKET_OCTAVES`` powers of two away -- a shape tuned only at decode sizes does not lend its
decode tiles to a prefill call (the heuristic decides there) -- and, from another bucket than the
call's, only if its ``block_m`` still holds a typical expert's rows (``heuristic_block_m``) or is
64+ (``choose_config``: a too-small token tile re-reads every expert's weights). A GPU with no such
entry of its own uses that of its tuned sibling of the same chip and SM count (``table_devices``: an
H100 SXM the H200's; with both, the nearer bucket, its own on a tie: ``table_nearest``). ``N``/``K`` are the GEMM's own sizes: gemm1 N = rows of w13 (2*I_pad gated,
I_pad otherwise), K = H; gemm2 N = H, K = I_pad.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ..config import Activation, Format
from ..formats.tensor import TILE_WIDTHS, default_tile_k

__all__ = [
    "KernelConfig",
    "MoEKernelConfig",
    "TunedTable",
    "choose_config",
    "choose_moe_config",
    "compile_problem",
    "fp8_fast_accum_variant",
    "load_tuned_configs",
    "save_tuned_configs",
    "set_table_siblings",
    "table_devices",
    "table_source",
    "table_nearest",
    "token_bucket",
    "triton_tile",
    "warp_specialized_config",
    "warp_specialized_problem",
    "ws_block_scale_problem",
    "ws_fp4_config",
    "ws_pipelined",
    "warp_specialized_variant",
    "with_block_m",
    "use_tuned_configs",
    "DEFAULT_TABLE_PATH",
]

DEFAULT_TABLE_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "triton_moe_tuned.json")

_GEMMS = ("gemm1", "gemm2")


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def stage_bytes(block_m: int, block_n: int, block_k: int, a_bytes: float, w_bytes: float, w_tiles: int) -> int:
    """Bytes of one software-pipeline stage of a grouped GEMM (see ``KernelConfig.stage_bytes``)."""
    return int(block_k * (block_m * a_bytes + w_tiles * block_n * w_bytes))


@dataclass(frozen=True)
class KernelConfig:
    """Launch configuration of one grouped GEMM.

    block_m: rows (slots) per tile; also the per-expert padding unit of the sorted slot list, so
    GEMM1 and GEMM2 of one forward share it. swap_ab: run the tile as W @ A^T (weight rows on the
    MMA's M side; helps Hopper's wgmma when block_m < 64). fp8_fast_accum (FP8 per-tensor /
    per-channel only; other formats ignore it): accumulate the FP8 products in the tensor cores
    for the whole K loop instead of adding each BLOCK_K partial sum to an fp32 accumulator --
    faster and fewer registers (128 x 256 FP8 tiles fit), less accurate (Hopper's FP8
    accumulation keeps ~14 mantissa bits: 2.3-2.8x the RMS error of the default at K = 2048 on
    the H200), as SGLang's and vLLM's Triton MoE kernels run. Opt-in; never chosen by the tuner
    unless asked (``fusedmoe tune --fp8-fast-accum``).
    split_k: the K loop of every tile is split over this many programs, which store fp32 partial
    sums; the last to finish adds them in split order (deterministic) and runs the epilogue. For
    decode, where (active experts x column tiles) is far below the SM count.
    persistent (GEMM2 only; GEMM1 ignores it): launch this many programs per SM, each walking the
    tiles in one flattened (tile, K-block) loop, so that the next tile's loads overlap this one's
    epilogue (same bits as one program per tile). 0: one program per tile; None (the default, and
    what tuned entries without the key mean): :func:`auto_persistent` decides. Needs split_k 1.
    With the warp-specialized decode tiles (block_m 16, both GEMMs; split-K allowed): the decode
    kernel's programs an SM, 1-4 (None: the switch's setting, ``set_ws_decode`` / ``set_ws_fp4_decode``);
    the ring's stages must then fit an SM's shared memory shared by that many programs.
    n_tiles (GEMM2 only; GEMM1 ignores it): column tiles per program. Above 1 a program loads its
    activation tile once -- the whole K in one block, so block_k >= K (``intermediate_size_padded``)
    -- and computes n_tiles column tiles with it: on short K (TP shards) only the weight tiles are
    re-read. 16-bit and FP8 per tensor / per channel weights; FP8 128 x 128 blocks hold up to two
    128-wide K-blocks instead (block_k 128, K <= 256); needs split_k 1 and no persistent launch
    (``persistent`` None or 0).
    warp_specialized: the Gluon kernel of ``kernels/_ws_gemm.py`` -- a TMA loader warp and two MMA
    warpgroups of 64 rows, persistent -- instead of the Triton one, for either GEMM; same precision
    (the promoted FP8 accumulation). FP8 per tensor / per channel / 128 x 128 block weights (each K
    block's partial product scaled as the Triton kernel does) and 16-bit weights on sm_90; block_m
    128, 128-byte K blocks (block_k 128 FP8, 64 16-bit), block_n 64 (FP8 gated GEMM1) or 64 / 128
    (FP8), 64 / 128 gated or 128 / 256 (16-bit), num_warps 4, num_stages 2-6 within 220 KB, no split-K,
    swap-AB, fast accumulation, n_tiles or persistent setting (:func:`warp_specialized_problem`).
    With MXFP4 or NVFP4 weights (BF16 activations, sm_90): the Gluon kernel of ``kernels/_ws_fp4.py`` for
    both GEMMs -- consumer warpgroups that dequantize 64 weight rows each into shared memory with one wgmma
    in flight; block_m 128 / 256 token rows, block_k 64, block_n 64 (gated GEMM1: 2 x 32 columns) or
    128 (:func:`ws_fp4_config`; ``triton_moe.auto_ws_fp4`` picks it for MXFP4 and NVFP4 prefill tiles,
    the latter under ``set_ws_fp4_nvfp4``).
    pipelined_promotion (warp_specialized FP8 prefill tiles, block_m 128; FP8 blocks since the thirty-eighth
    session, compiled only): two partial-sum sets take turns, so the next wgmmas run while a finished partial sum
    is added -- K block by K block in the tiles
    with a partial set per accumulator (block_n 64 gated, 64 / 128 otherwise: ``kernels/_ws_gemm._ws_pipe_k_loop``),
    64-column sub-tile by sub-tile in the wide one-set tiles (2 x 128 gated, 256:
    ``_ws_wide_pipe_k_loop``); the same bits. A tuner candidate (the two-set tiles, thirty-seventh session, H100:
    0.96-1.07x by shape; the wide tiles compiled for sm_90 only so far); ``triton_moe.set_ws_pipelined_promotion(True)``
    turns it on for every such tile.
    """

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 1
    num_warps: int = 4
    num_stages: int = 3
    swap_ab: bool = False
    fp8_fast_accum: bool = False
    split_k: int = 1
    persistent: Optional[int] = None
    n_tiles: int = 1
    warp_specialized: bool = False
    pipelined_promotion: bool = False

    def __post_init__(self):
        for f in ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "split_k", "n_tiles"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"KernelConfig.{f} must be an int, got {v!r}")
        for f in ("swap_ab", "fp8_fast_accum", "warp_specialized", "pipelined_promotion"):
            if not isinstance(getattr(self, f), bool):
                raise TypeError(f"KernelConfig.{f} must be a bool, got {getattr(self, f)!r}")
        for f in ("block_m", "block_n", "block_k"):
            v = getattr(self, f)
            if not _is_pow2(v) or v < 16:
                raise ValueError(f"KernelConfig.{f} must be a power of two >= 16 (tl.dot minimum), got {v}")
        if self.group_m < 1:
            raise ValueError(f"KernelConfig.group_m must be >= 1, got {self.group_m}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"KernelConfig.num_warps must be one of 1, 2, 4, 8, 16, got {self.num_warps}")
        if not 1 <= self.num_stages <= 8:
            raise ValueError(f"KernelConfig.num_stages must be in [1, 8], got {self.num_stages}")
        if not 1 <= self.split_k <= 16:
            raise ValueError(f"KernelConfig.split_k must be in [1, 16], got {self.split_k}")
        if self.persistent is not None:
            if not isinstance(self.persistent, int) or isinstance(self.persistent, bool):
                raise TypeError(f"KernelConfig.persistent must be None or an int, got {self.persistent!r}")
            if not 0 <= self.persistent <= 8:
                raise ValueError(f"KernelConfig.persistent must be in [0, 8] programs per SM, got {self.persistent}")
            if self.persistent and self.split_k > 1 and not (self.warp_specialized
                                                             and self.block_m == WS_FP4_DEC_BLOCK_M):
                raise ValueError(f"KernelConfig.persistent ({self.persistent}) needs split_k 1, got {self.split_k}")
        if self.pipelined_promotion and not self.warp_specialized:
            raise ValueError("KernelConfig.pipelined_promotion is a mode of the warp-specialized FP8 kernel: it needs "
                             "warp_specialized")
        if not 1 <= self.n_tiles <= 256:
            raise ValueError(f"KernelConfig.n_tiles must be in [1, 256], got {self.n_tiles}")
        if self.n_tiles > 1 and (self.split_k > 1 or self.persistent):
            raise ValueError(f"KernelConfig.n_tiles ({self.n_tiles}) needs split_k 1 and persistent None or 0, "
                             f"got split_k {self.split_k}, persistent {self.persistent}")

    def stage_bytes(self, a_bytes: float, w_bytes: float, w_tiles: int) -> int:
        """Shared memory of one pipeline stage: a block_m x block_k activation tile plus
        ``w_tiles`` block_n x block_k weight tiles (gate and up: 2), at the given element sizes."""
        return stage_bytes(self.block_m, self.block_n, self.block_k, a_bytes, w_bytes, w_tiles)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KernelConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"KernelConfig: unknown keys {sorted(unknown)}; expected a subset of {sorted(known)}")
        return cls(**dict(d))


@dataclass(frozen=True)
class MoEKernelConfig:
    """Everything one ``triton_experts`` call launches with.

    atomic_combine: GEMM2 adds its weighted rows into a zeroed output with atomics instead of the
    deterministic combine kernel (opt-in: results depend on the order of the atomic adds, and every
    partial sum is rounded to the output dtype).
    """

    gemm1: KernelConfig
    gemm2: KernelConfig
    atomic_combine: bool = False

    def __post_init__(self):
        if not isinstance(self.gemm1, KernelConfig) or not isinstance(self.gemm2, KernelConfig):
            raise TypeError("MoEKernelConfig.gemm1 and .gemm2 must be KernelConfig instances")
        if self.gemm1.block_m != self.gemm2.block_m:
            raise ValueError(
                "MoEKernelConfig: gemm1.block_m and gemm2.block_m must be equal (both GEMMs walk the "
                f"same block-padded slot list); got {self.gemm1.block_m} and {self.gemm2.block_m}"
            )
        if not isinstance(self.atomic_combine, bool):
            raise TypeError(f"MoEKernelConfig.atomic_combine must be a bool, got {self.atomic_combine!r}")

    @property
    def block_m(self) -> int:
        return self.gemm1.block_m


# ---- tuned table -------------------------------------------------------------------------------


def token_bucket(m: int) -> int:
    """Smallest power of two >= m (1 for m <= 1)."""
    return 1 if m <= 1 else 1 << (int(m) - 1).bit_length()


_Key = Tuple[str, str, str, str, int, int, int]

# A tuned entry serves token counts up to this many powers of two from its bucket: the shipped grid
# (1, 8, 64, 512, 4096) then covers 1 .. 16384 tokens, while a shape tuned at 8 and 64 tokens only
# does not hand its 16-row tiles to a 4096-token call.
MAX_BUCKET_OCTAVES = 2


class TunedTable:
    """Tuned configs keyed by (device, weight_format, activation, gemm, N, K, E) -> {bucket: cfg}."""

    def __init__(self, entries: Optional[Dict[_Key, Dict[int, KernelConfig]]] = None):
        self._entries: Dict[_Key, Dict[int, KernelConfig]] = dict(entries or {})
        self._version = 0  # bumped by add(): results cached from this table are stale then

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def add(self, *, device: str, weight_format: Union[Format, str], activation: Union[Activation, str, None],
            gemm: str, N: int, K: int, E: int, tokens: int, config: KernelConfig) -> None:
        key = _make_key(device, weight_format, activation, gemm, N, K, E)
        self._entries.setdefault(key, {})[token_bucket(tokens)] = config
        self._version += 1

    def lookup(self, *, device: str, weight_format: Union[Format, str], activation: Union[Activation, str, None],
               gemm: str, N: int, K: int, E: int, tokens: int) -> Optional[KernelConfig]:
        hit = self.nearest(device=device, weight_format=weight_format, activation=activation, gemm=gemm,
                           N=N, K=K, E=E, tokens=tokens)
        return None if hit is None else hit[1]

    def nearest(self, *, device: str, weight_format: Union[Format, str], activation: Union[Activation, str, None],
                gemm: str, N: int, K: int, E: int, tokens: int) -> Optional[Tuple[int, KernelConfig]]:
        """``(bucket, config)`` of the entry nearest to ``tokens`` (at most ``MAX_BUCKET_OCTAVES``
        powers of two away), or None."""
        for act in (activation, "*"):
            by_bucket = self._entries.get(_make_key(device, weight_format, act, gemm, N, K, E))
            if by_bucket:
                b = math.log2(token_bucket(tokens))
                best = min(by_bucket, key=lambda x: (abs(math.log2(x) - b), x))
                if abs(math.log2(best) - b) <= MAX_BUCKET_OCTAVES:
                    return best, by_bucket[best]
        return None

    def device_entries(self, device: str) -> int:
        """How many entries (token buckets included) the table holds under ``device``."""
        return sum(len(v) for k, v in self._entries.items() if k[0] == device)

    def to_json_dict(self) -> Dict[str, Any]:
        out = []
        for (dev, fmt, act, gemm, N, K, E), by_bucket in sorted(self._entries.items()):
            for bucket, cfg in sorted(by_bucket.items()):
                c = cfg.to_dict()
                if c["persistent"] is None:  # the default (auto): entries stay as before the field existed
                    del c["persistent"]
                if c["n_tiles"] == 1:  # the default, likewise
                    del c["n_tiles"]
                for flag in ("warp_specialized", "pipelined_promotion"):  # likewise
                    if not c[flag]:
                        del c[flag]
                out.append({"device": dev, "weight_format": fmt, "activation": act, "gemm": gemm,
                            "N": N, "K": K, "E": E, "tokens": bucket, "config": c})
        return {"format_version": 1, "entries": out}


def _make_key(device, weight_format, activation, gemm, N, K, E) -> _Key:
    fmt = weight_format.value if isinstance(weight_format, Format) else Format(str(weight_format)).value
    if activation is None or activation == "*":
        act = "*"
    else:
        act = activation.value if isinstance(activation, Activation) else Activation(str(activation)).value
    if gemm not in _GEMMS:
        raise ValueError(f"gemm must be one of {_GEMMS}, got {gemm!r}")
    return (str(device), fmt, act, gemm, int(N), int(K), int(E))


def load_tuned_configs(path: Union[str, os.PathLike]) -> TunedTable:
    """Read a tuned-config JSON file (format above). Raises ValueError on a malformed file."""
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format_version") != 1 or not isinstance(doc.get("entries"), list):
        raise ValueError(f"{path}: expected {{'format_version': 1, 'entries': [...]}}")
    table = TunedTable()
    for i, ent in enumerate(doc["entries"]):
        try:
            table.add(device=ent["device"], weight_format=ent["weight_format"], activation=ent.get("activation", "*"),
                      gemm=ent["gemm"], N=ent["N"], K=ent["K"], E=ent["E"], tokens=ent["tokens"],
                      config=KernelConfig.from_dict(ent["config"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: entry {i} is malformed: {exc}") from exc
    return table


def save_tuned_configs(table: TunedTable, path: Union[str, os.PathLike]) -> None:
    with open(path, "w") as f:
        json.dump(table.to_json_dict(), f, indent=1)
        f.write("\n")


@functools.lru_cache(maxsize=None)
def _shipped_table() -> TunedTable:
    """The table shipped with the package (an empty table if the file is absent)."""
    if os.path.exists(DEFAULT_TABLE_PATH):
        return load_tuned_configs(DEFAULT_TABLE_PATH)
    return TunedTable()


_ACTIVE: Dict[str, Optional[TunedTable]] = {"table": None}


def use_tuned_configs(source: Union[str, os.PathLike, TunedTable, None]) -> None:
    """Make every later triton-backend call look up ``source`` -- a tuned-config JSON file (e.g.
    written by ``fusedmoe tune --out FILE`` on your GPU) or a ``TunedTable`` -- instead of the table
    shipped with the package; ``None`` restores the shipped one. Shapes the table does not cover
    fall back to the heuristic as usual. Raises ValueError on a malformed file."""
    _MOE_CONFIG_CACHE.clear()
    if source is None or isinstance(source, TunedTable):
        _ACTIVE["table"] = source
    elif isinstance(source, (str, os.PathLike)):
        _ACTIVE["table"] = load_tuned_configs(source)
    else:
        raise TypeError(f"source must be a path, a TunedTable or None, got {type(source).__name__}")


def _default_table() -> TunedTable:
    """The table calls consult: the one set by ``use_tuned_configs``, else the shipped one."""
    active = _ACTIVE["table"]
    return active if active is not None else _shipped_table()


# A GPU with no entry of its own for a shape takes the entries of a tuned GPU of the same chip and SM count. The tiles,
# split-K and programs an SM the tuner picks depend mostly on the SMs (count, shared memory, registers), which these
# GPUs share; what differs is the HBM bandwidth (H100 SXM 3.35 TB/s, H200 4.8 TB/s), so an entry can lose where a
# point is memory-bound on one and not the other. Measured on an H100 SXM against the heuristic (thirty-sixth
# session, BENCHMARKS.md section 0): 1.008x over 89 shared-harness points (1.24x best, 0.865x worst: DeepSeek-V3 BF16
# at 2048 tokens), faster on 14 of 18 FP4 decode points. (tuned device, name parts, SM count): the H100 SXM / NVL,
# H800 SXM, GH200 and H200 NVL -- GH100 with 132 SMs -- use the H200's. Not the 114-SM PCIe cards.
TABLE_SIBLINGS: Tuple[Tuple[str, Tuple[str, ...], int], ...] = (("NVIDIA H200", ("H100", "H200", "H800"), 132),)
_SIBLINGS = {"enabled": True}


def set_table_siblings(enabled: bool) -> bool:
    """``True`` (the default; ``FUSEDMOE_TABLE_SIBLINGS=0`` starts with ``False``): a GPU without a tuned entry of its
    own for a shape uses the entry of its sibling in ``TABLE_SIBLINGS`` (:func:`table_devices`); ``False``: the
    heuristic there. Returns the previous setting."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_table_siblings: enabled must be a bool, got {enabled!r}")
    prev, _SIBLINGS["enabled"] = _SIBLINGS["enabled"], enabled
    _MOE_CONFIG_CACHE.clear()
    return prev


def table_devices(device_name: str, num_sms: Optional[int] = None) -> Tuple[str, ...]:
    """The device names a tuned-table lookup tries, in order: ``device_name``, then the tuned sibling of the same
    chip and SM count (``TABLE_SIBLINGS``; with :func:`set_table_siblings` on). ``num_sms`` None (a device known
    by name only): the name decides, and the PCIe cards (114 SMs) have no sibling."""
    return _table_devices(str(device_name), num_sms, _SIBLINGS["enabled"])


@functools.lru_cache(maxsize=64)
def _table_devices(device_name: str, num_sms: Optional[int], enabled: bool) -> Tuple[str, ...]:
    out = [device_name]
    name = device_name.upper()
    for tuned, parts, sms in TABLE_SIBLINGS if enabled else ():
        same_sms = num_sms == sms if num_sms is not None else "PCIE" not in name
        if tuned != device_name and same_sms and any(p in name for p in parts):
            out.append(tuned)
    return tuple(out)


def table_source(device_name: str, num_sms: Optional[int] = None, table: Optional[TunedTable] = None) -> str:
    """One line on where a call on ``device_name`` gets its kernel configs from: the active table's entries under
    its name, or its sibling's (:func:`table_devices`), else the heuristic (``fusedmoe info`` prints it)."""
    tbl = _default_table() if table is None else table
    devs = table_devices(device_name, num_sms)
    own, sib = tbl.device_entries(devs[0]), [(d, tbl.device_entries(d)) for d in devs[1:]]
    sib = [(d, n) for d, n in sib if n]
    if own and sib:
        return (f"kernel configs: {own} tuned entries for this GPU, then {sib[0][1]} of its sibling {sib[0][0]}, "
                "else the heuristic")
    if own:
        return f"kernel configs: {own} tuned entries for this GPU, else the heuristic"
    if sib:
        return (f"kernel configs: the {sib[0][1]} tuned entries of its sibling {sib[0][0]} (same chip and SM count; "
                "`fusedmoe tune` adds this GPU's own), else the heuristic")
    return "kernel configs: no tuned entries for this GPU -- the heuristic (`fusedmoe tune` adds entries)"


def table_nearest(table: TunedTable, device_name: str, num_sms: Optional[int] = None, **key: Any
                  ) -> Optional[Tuple[str, int, KernelConfig]]:
    """``(device, bucket, config)`` of the entry a call on ``device_name`` uses for ``key`` (``TunedTable.nearest``'s
    keywords but ``device``): of the device's own nearest entry and its sibling's (:func:`table_devices`), the one
    whose bucket is nearer the call's tokens, the device's own on a tie -- an H100 tuned at 8192 tokens only keeps
    the H200's 2048-token entry for 2048-token calls; None where neither has one."""
    best = None
    for dev in table_devices(device_name, num_sms):
        hit = table.nearest(device=dev, **key)
        if hit is not None:
            dist = abs(math.log2(hit[0]) - math.log2(token_bucket(key["tokens"])))
            if best is None or dist < best[0]:
                best = (dist, (dev,) + hit)
    return None if best is None else best[1]


# ---- heuristic ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _DeviceTraits:
    num_sms: int
    smem_budget: int  # bytes of pipelined operand buffers we allow per program
    hopper: bool


def _device_traits(device_name: str) -> _DeviceTraits:
    name = (device_name or "").upper()
    if any(t in name for t in ("H100", "H200", "H800", "H20", "GH200")):
        # 228 KB shared memory per SM, 227 KB per block; leave room for the epilogue's layout
        # conversions (transposed accumulators, the fp8 group reshape)
        sms = 78 if ("H20" in name and "H200" not in name) else 132
        return _DeviceTraits(num_sms=sms, smem_budget=192 * 1024, hopper=True)
    if "A100" in name or "A800" in name:
        return _DeviceTraits(num_sms=108, smem_budget=144 * 1024, hopper=False)
    if "B200" in name or "B100" in name or "GB200" in name:
        return _DeviceTraits(num_sms=148, smem_budget=192 * 1024, hopper=False)
    return _DeviceTraits(num_sms=80, smem_budget=88 * 1024, hopper=False)


def _weight_bytes(fmt: Format) -> float:
    """Bytes per weight element streamed by the kernels, block scales included."""
    if fmt is Format.BF16:
        return 2
    if fmt is Format.NVFP4:
        return 0.5 + 1 / 16
    if fmt is Format.MXFP4:
        return 0.5 + 1 / 32
    if fmt is Format.MXFP8:
        return 1 + 1 / 32
    return 1


_BLOCK_SCALED = (Format.NVFP4, Format.MXFP4, Format.MXFP8)
_FP4 = (Format.NVFP4, Format.MXFP4)
_FP8_PROMOTED = (Format.FP8_TENSOR, Format.FP8_CHANNEL)  # FP8 with per-tensor / per-channel scales


def join_gate_up(fmt: Format, swap_ab: bool) -> bool:
    """Whether a gated block-scaled GEMM1 multiplies its gate and up rows as one joined
    [2 block_n, block_k] weight tile (``_moe_gemm`` JOIN) instead of two tiles in turn. Joined:
    decode tiles (swap_ab: the weight tile is wgmma's register operand; one MMA chain and one wait
    per K step) and NVFP4 prefill. Measured on the H200 (session 8, gpt-oss-120b, same process;
    BENCHMARKS.md section 0): joined 1.05-1.06x faster at 64 tokens (MXFP4 and NVFP4), equal at
    one token, 1.25x faster for NVFP4 at 4096 tokens but 1.23x slower for MXFP4 there."""
    return bool(swap_ab) or fmt is Format.NVFP4


def _block_scaled_bk(K: int, fmt: Format) -> int:
    """K tile of the block-scaled (dequantize-in-registers) family: whole scale blocks (a multiple
    of 32, which also covers MXFP8 activations next to NVFP4 / MXFP4 weights), at most 128 (a
    dequantized 16-bit tile lives in registers: 2 x 64 x 128 for a gated decode program is 64
    registers per thread at 4 warps), and preferably a divisor of K so that no K tile needs a
    mask (gpt-oss H = 2880 = 45 * 64 -> 64). FP4 rows of a 128-wide tile are 64 contiguous bytes:
    16-byte vectors, whole 32-byte sectors. (Measured and rejected, session 8: raising block_k until
    a tile's block scales reach 4 bytes per thread, so that Triton's pipeline prefetches them;
    gpt-oss-120b MXFP4 decode with block_k 128 ran 1.12-1.30x slower than the tuned block_k 64 --
    registers and a K mask cost more than the scale stall they remove.)"""
    if K % TILE_WIDTHS[0] == 0:
        return default_tile_k(K)  # also the tile width of ExpertWeights' tiled FP4 values
    return 128 if K >= 128 else 32


def compile_problem(cfg: KernelConfig, weight_format: Format) -> Optional[str]:
    """None, or why Triton 3.6 cannot compile ``cfg`` for ``weight_format`` -- a known compiler
    failure that aborts the process (LLVM ERROR, not a Python exception), so it must never be launched.

    FP4 weights (NVFP4 / MXFP4) with 32-wide K tiles (K = 96: the GEMM2 of a Qwen3-30B TP8 shard),
    token tiles of 64+ rows (wgmma) and >= 128 weight rows per warpgroup (``block_n * 4 /
    num_warps``): ``TritonGPUOptimizeDotOperands`` stops with "Illegal shared layout; expected
    collapsed shapePerCTA to be at least [8, 64]". H200 tuner, session 6: (64, 128, 4 warps),
    (128, 128, 4 warps) and (128, 256, 8 warps) fail; (64, 64, 4), (64 / 128, 128, 8), (32, 128, 4)
    compile.

    Also a known miscompile (wrong results, no error): weights dequantized in registers with 512-row tiles that are
    not swap_ab."""
    if (weight_format in _FP4 and cfg.block_k == 32 and cfg.block_m >= 64
            and not cfg.swap_ab and cfg.block_n * 4 // cfg.num_warps >= 128):
        return (f"FP4 weights with block_k 32, block_m >= 64 and block_n * 4 / num_warps >= 128 "
                f"(block_n {cfg.block_n}, {cfg.num_warps} warps) do not compile with Triton 3.6 (the "
                f"process aborts in TritonGPUOptimizeDotOperands): use 8 warps or a smaller block_n")
    if weight_format in _BLOCK_SCALED and not cfg.swap_ab and cfg.block_n >= 512:
        return (f"block_n {cfg.block_n} with weights dequantized in registers (not swap_ab) gives wrong results on "
                f"the H200 with Triton 3.6 (the dequantized [block_n, block_k] tile's shared-memory buffer; tuner, "
                f"sessions 23-24: rms error ~1.0 against the reference at block_n 512): use block_n <= 256")
    return None


def _refuse_uncompilable(name: str, cfg: KernelConfig, weight_format: Format) -> KernelConfig:
    """``cfg`` (a user's override), or ValueError naming :func:`compile_problem`'s reason."""
    why = compile_problem(cfg, weight_format)
    if why is not None:
        raise ValueError(f"config {name}: {why}")
    return cfg


def _compile_safe(cfg: KernelConfig, weight_format: Format) -> KernelConfig:
    """``cfg`` moved off :func:`compile_problem`'s failure: 8 warps (two warpgroups split the weight
    rows), or half the weight rows when 8 warps are not enough."""
    while compile_problem(cfg, weight_format) is not None:
        if cfg.num_warps < 8:
            cfg = dataclasses.replace(cfg, num_warps=8)
        else:
            cfg = dataclasses.replace(cfg, block_n=cfg.block_n // 2)
    return cfg


def choose_config(
    M_tokens: int,
    N: int,
    K: int,
    E_loc: int,
    top_k: int,
    weight_format: Union[Format, str],
    gemm: str,
    device_name: str,
    *,
    activation: Union[Activation, str, None] = None,
    override: Union[KernelConfig, Mapping[str, Any], None] = None,
    table: Optional[TunedTable] = None,
    num_sms: Optional[int] = None,
) -> KernelConfig:
    """Kernel config for one GEMM of a MoE forward with ``M_tokens`` tokens.

    Order: ``override`` (returned as given, validated) > the tuned table (``table``, default: the
    shipped one) > the heuristic. ``N``/``K`` as in the module docstring; ``activation`` decides
    gatedness for gemm1 (a gated program holds a gate tile and an up tile of ``block_n`` rows each).
    """
    if override is not None:
        return override if isinstance(override, KernelConfig) else KernelConfig.from_dict(override)
    fmt = weight_format if isinstance(weight_format, Format) else Format(str(weight_format))
    if gemm not in _GEMMS:
        raise ValueError(f"gemm must be one of {_GEMMS}, got {gemm!r}")
    act = None if activation is None else (activation if isinstance(activation, Activation) else Activation(str(activation)))
    tbl = _default_table() if table is None else table
    hit = table_nearest(tbl, device_name, num_sms, weight_format=fmt, activation=act, gemm=gemm, N=N, K=K, E=E_loc,
                        tokens=M_tokens)
    if hit is not None:
        _, bucket, cfg = hit
        # an entry tuned at another token count keeps its token tile only if that tile still
        # holds a typical expert's rows (or is 64+ rows, where compute, not weight re-reads,
        # decides): Mixtral BF16 at 128 tokens (32 rows per expert) with the 32-row tile tuned at
        # 64 tokens ran 960 us instead of 700 (H200 harness, session 5)
        if bucket == token_bucket(M_tokens) or cfg.block_m >= min(
                64, heuristic_block_m(M_tokens, E_loc, top_k, fmt)):
            return cfg
    return _heuristic(M_tokens, N, K, E_loc, top_k, fmt, gemm, act, device_name, num_sms)


def heuristic_block_m(M_tokens: int, E_loc: int, top_k: int, weight_format: Format) -> int:
    """Rows per tile = the per-expert padding unit; sized to the expected rows per expert.

    With uniform routing an expert receives r = T*K/E rows on average. Every M-block of an expert
    re-reads that expert's weights, so the tile should hold a typical expert's rows in one block:
    block_m >= ~1.5 r leaves room for the spread around the mean (H200 measurement, Qwen3-30B
    shapes at T = 512: r = 32 ran at 3.1 TB/s with block_m 32 because most experts needed two
    blocks). Decode (r <= 10) uses the tl.dot minimum of 16; the wasted rows cost tensor-core time
    only, which is idle while the weights stream in.
    """
    r = M_tokens * top_k / max(E_loc, 1)
    if r <= 10:
        return 16
    if r <= 21:
        return 32
    if r <= 42 or weight_format is Format.FP8_BLOCK:
        # FP8 block: a 128x128-block-scaled gated GEMM1 holds two BM x 128 fp32 accumulators;
        # BM = 64 keeps them in registers (SGLang / vLLM tuned block-FP8 tables agree)
        return 64
    if weight_format in _FP8_PROMOTED and r < 256:
        # FP8 per tensor / per channel with the promoted accumulation (``_mma``): every K block
        # waits for its MMAs before the fp32 add, and two 64-row programs per SM fill each other's
        # waits. H200 tuner at 4096 tokens (session 5), 64 vs 128 rows: r = 128-192 (Nemotron-Nano,
        # DeepSeek-V3 and its TP8 shard, MiniMax-M2) 1.00-1.25x on all 8 points; r = 256 (Qwen3-30B
        # 1.02x, Qwen3-235B 0.93-0.95x) and r = 1024 (Mixtral, 0.87x) stay at 128
        return 64
    return 128


def _heuristic(M_tokens, N, K, E_loc, top_k, fmt: Format, gemm, act, device_name, num_sms) -> KernelConfig:
    dev = _device_traits(device_name)
    sms = num_sms or dev.num_sms
    gated = gemm == "gemm1" and act is not None and act.is_gated
    n_cols = N // 2 if gated else N  # columns of the program's output tile grid
    w_tiles = 2 if gated else 1
    wb = _weight_bytes(fmt)
    ab = 1 if fmt is not Format.BF16 else 2

    bm = heuristic_block_m(M_tokens, E_loc, top_k, fmt)
    decode = bm <= 32
    # FP8 per tensor / channel prefill in 64-row tiles (heuristic_block_m): 128 weight rows per
    # program and 8 warps, gated or not (the H200 tuner's choice at 4096 tokens on 8 of 8 points)
    fp8_rows64 = (fmt in _FP8_PROMOTED and bm == 64
                  and M_tokens * top_k / max(E_loc, 1) > 42)

    # K tile: FP8 block scales come per 128 along K (and 128 B rows are the natural fp8 load);
    # 16-bit decode also uses 128 (fewer, larger loads in flight), 16-bit prefill 64 (smem).
    # FP8 at one or two tokens: 256 (H200, Qwen3-30B FP8 T = 1: 25.4 us vs 28.6 us with 128;
    # at T = 8, 256 was slower).
    if fmt in _BLOCK_SCALED:
        bk = _block_scaled_bk(K, fmt)
        if fmt is Format.NVFP4 and decode and K % 128 == 64 and K >= 1024:
            # K = n x 128 + 64 (gpt-oss's 2880): 128-wide steps over the 64-wide tiles and one 64-wide tail step
            # (the launcher's K_TAIL). H200 tuner, session 24, gpt-oss-120b / 20b NVFP4 at 8 and 64 tokens: both
            # GEMMs at 128 won all four points (layer 1.07-1.23x); at one token even. MXFP4 lost there (GEMM1
            # 49.4 vs 43.7 us at one token of gpt-oss-120b) and keeps 64; short K (TP shards' I = 192) unmeasured.
            bk = 128
    elif fmt in _FP8_PROMOTED and M_tokens * top_k <= 16:
        bk = 256
    elif fmt is not Format.BF16 or decode:
        bk = 128
    else:
        bk = 64

    fp4_swap_prefill = dev.hopper and fmt in _FP4 and bm >= 128
    if fmt is Format.FP8_BLOCK and gemm == "gemm1" and not (bm == 16 and M_tokens >= 8):
        # the intermediate is quantized in 1x128 groups in GEMM1's epilogue: a tile must hold
        # whole groups. From 8 tokens on, with 16-row token tiles, 64-wide tiles with the
        # intermediate quantized by a separate pass (same bits) are faster: the H200 tuner's
        # one-step moves from 128 to 64 at 8 and 64 tokens won on all 14 points (6 presets,
        # 1.02-1.08x, geomean 1.04x); at one token they did not (geomean 1.00x), nor at 512-4096
        # tokens (32-128-row tiles, geomean 0.97x).
        bn = 128
    elif bm == 16 and fmt in _BLOCK_SCALED:
        # weights dequantized in registers: 64 rows per program whatever the gating, for twice the
        # programs of 128 (H200 tuner, 16-row token tiles at 1-64 tokens, one-step moves 128 -> 64:
        # GEMM1 NVFP4 / MXFP4 / MXFP8 1.05-1.16x on all 10 points, GEMM2 geomean 1.01-1.03x;
        # 64 -> 128 lost 0.80-0.93x); 64 is also wgmma's minimum M with swap_ab
        bn = 64
    elif fp8_rows64:
        bn = 128
    elif decode:
        # memory-bound: the widest weight tile (<= 128 rows per program, gate + up counted) that
        # still launches enough programs (active experts ~ min(E, T*K)): >= SMs / 2 for a gated
        # GEMM1, >= SMs otherwise. H200, Qwen3-30B at T = 1: BF16 GEMM1 2x64 rows 31 us vs 2x32
        # rows 35 us; FP8 GEMM2 64 rows (256 programs) 25.4 us vs 128 rows 28.7 us.
        active = max(1, min(E_loc, M_tokens * top_k))
        bn = 32
        for cand in ((64,) if gated else (128, 64)):
            if active * math.ceil(n_cols / cand) >= (sms // 2 if gated else sms):
                bn = cand
                break
        if fmt is not Format.BF16 and dev.hopper:
            bn = max(bn, 64)  # swap_ab puts block_n on wgmma's M side, which needs >= 64
    elif gemm == "gemm1" and fp4_swap_prefill:
        # FP4 prefill GEMM1 as W @ A^T: 128 weight rows (gate + up joined) in one warpgroup are wgmma's register
        # operand, dequantized in registers, and the 128 token rows its N side -- no shared-memory round trip of the
        # converted tile. H200 tuner, session 24, 4096 tokens: a swapped GEMM1 won on 11 of 12 points (gpt-oss-120b,
        # Nemotron-3-Super / Nano, Qwen3-30B / 235B, MiniMax-M2 x MXFP4 / NVFP4; Nemotron-3-Nano MXFP4 kept its
        # 256-row tile), this tile or the same at 8 warps / block_k 128 within 0.3 % of the best on gpt-oss-120b
        # (layer 1.04-1.54x faster with the re-tuned table; BENCHMARKS.md section 0); GEMM2 mostly kept the
        # 256-row tile below.
        bn = 64 if gated else 128
        if K % 64 == 0:
            bk = 64
    elif bm >= 128 and dev.hopper and (fmt is Format.BF16 or (gated and fmt in _FP8_PROMOTED)
                                       or (fmt in _FP4 and (not gated or join_gate_up(fmt, False)))):
        # compute-bound prefill on Hopper: 256 weight rows per program (gate + up counted), as the
        # H200 tuner chose at T = 4096 for Qwen3-30B, DeepSeek-V3 TP8 and Nemotron-Nano BF16
        # (1.12-1.19x over 128 rows) and as SGLang's H200 tables use for BF16 and FP8. FP8 is
        # limited to the gated GEMM1: a 128 x 256 FP8 GEMM2 / non-gated tile spills registers at
        # 8 warps (sm_90 compile, ~270 LDL/STL), a 2 x 128 gated tile does not. FP4 where the 256
        # rows are one tile (not gated, or NVFP4's joined gate + up) -- GEMM2 now, GEMM1 runs as W @ A^T
        # above on Hopper: the tuner's choice at 4096 tokens for Nemotron-3-Nano / Super and
        # gpt-oss-120b NVFP4 and Nemotron MXFP4 (session 8: 128-row tiles were 1.25-1.67x slower);
        # gated MX (two tiles in turn) and MXFP8 keep 128.
        bn = 128 if gated else 256
    else:
        # compute-bound: 128-wide tiles; a gated program holds two accumulators, so half width
        bn = 64 if gated else 128

    # SGLang's finding on H100/H200: FP8 with small token tiles runs faster as W @ A^T. For the
    # block-scaled formats it also puts the dequantized weight tile on wgmma's register operand
    # (A of W @ A^T), saving the shared-memory round trip of the converted tile.
    swap_ab = dev.hopper and fmt is not Format.BF16 and bm < 64 and bn >= 64
    if gemm == "gemm1" and fp4_swap_prefill:
        swap_ab = True

    if gemm == "gemm1" and fp4_swap_prefill:
        warps = 4  # one warpgroup: 128 weight rows x 128 token rows (64 accumulators a thread)
    elif bm * bn * w_tiles >= 128 * 128 or fp8_rows64:
        warps = 8
    elif fmt is Format.FP8_BLOCK and gemm == "gemm1" and bm == 16 and M_tokens < 8:
        # 2 x 128 weight rows per program (swap_ab: wgmma's M): two warpgroups. H200 tuner, one
        # token: 4 -> 8 warps won on all 7 points (1.02-1.12x, geomean 1.07x)
        warps = 8
    else:
        warps = 4

    # split-K (either GEMM at decode): when (active experts x column tiles) leaves at least half of the
    # SMs idle, split the K loop (H) over up to 8 programs per tile, keeping >= 4 K-blocks per
    # program. H200 harness, one token, DeepSeek-V3 TP8 (8 experts x 2-8 column tiles, H = 7168):
    # FP8 block 54.5 -> 35.6 us, FP8 per tensor 41.9 -> 38.2 us, BF16 ReLU2 40.8 -> 35.9 us; but
    # Qwen3-30B FP8 (96 tiles, 8 K-blocks) split in two went 25.1 -> 29.4 us: the partial-sum
    # round trip and the serialized epilogue cost more than the extra programs gain there.
    # The block-scaled formats dequantize in registers (latency-bound at one token: a few K-blocks
    # in flight per program): there the target is four programs per SM -- with GEMM2 split too,
    # the H200 tuner chose split 4 on both GEMMs at one token of gpt-oss-120b MXFP4 / NVFP4
    # (180 tiles each; 58.4 / 61.4 us vs 65.7 / 74.0 us with split 2), split 4 for GEMM1 of
    # Nemotron-Nano and Qwen3-30B (96-180 tiles), and DeepSeek-V3 TP8 NVFP4 (32 tiles) went
    # 70.9 -> 33.9 us with split 8.
    split = 1
    active = max(1, min(E_loc, M_tokens * top_k))
    tiles = active * math.ceil(n_cols / bn)
    target = 4 * sms if fmt in _BLOCK_SCALED else sms
    if decode and tiles <= (target if fmt in _BLOCK_SCALED else sms // 2):
        k_blocks = math.ceil(K / bk)
        while split < 8 and tiles * split < target and k_blocks // (2 * split) >= 4:
            split *= 2

    budget = dev.smem_budget
    if fmt in _BLOCK_SCALED:
        ab = 2  # the activation format is not known here: count 16-bit activations (the largest)
        if not swap_ab:  # the dequantized weight tile is wgmma's B: one shared-memory buffer
            budget -= bk * w_tiles * bn * 2
    per_stage = stage_bytes(bm, bn, bk, ab, wb, w_tiles)
    # the software pipeline keeps num_stages - 1 K-blocks in flight: never more than a program's
    # K loop has. Unused buffers cost shared memory, i.e. co-resident programs -- which is what
    # hides latency when the loop is short (GEMM2 of TP8 shards, K = I = 96-256: five 36 KB
    # stages left room for one 4-warp program per SM).
    stages = max(2, min(5 if decode else 4, budget // per_stage, k_loop_stages(K, bk, split)))
    group_m = 1 if decode else 8
    if gemm == "gemm2" and dev.hopper and K <= HELD_A_MAX_K and (
            (fmt in _FP8_PROMOTED + (Format.FP8_BLOCK,) and bm >= 64) or (fmt is Format.BF16 and bm >= 128)):
        return held_a_config(bm, N, K, fmt)
    if (dev.hopper and fmt in _FP8_PROMOTED and K % 16 == 0
            and (bm == 128 or (bm == 64 and M_tokens * top_k >= WS_MIN_ROWS_PER_EXPERT * max(E_loc, 1)))
            and (n_cols if gemm == "gemm1" else K) >= WS_MIN_INTERMEDIATE):
        # FP8 per tensor / channel prefill with >= 64 rows per expert and an intermediate of 512+
        # (both GEMMs qualify alike): both GEMMs warp-specialized (KernelConfig.warp_specialized),
        # 128-row tiles, 5 stages. H200 tuner: session 13, at 8192 tokens (r = 256-2048 rows per
        # expert) on 9 of 11 points -- DeepSeek-V3, Mixtral, Qwen3-235B, MiniMax-M2 both formats,
        # Qwen3-30B per channel; 1.02-1.18x over the Triton tiles; session 16 (the padding half
        # skipped, reciprocal re-quantization) on all 20 points it tried at 2048 / 8192 tokens
        # including r = 64-128, where the Triton tiles have 64 rows (DeepSeek-V3, MiniMax-M2,
        # Nemotron-Nano, Qwen3-30B at 2048: 1.09-1.14x over them), and the harness at 512 tokens
        # of Mixtral (r = 128: 573 vs 660 us). On TP shards (I = 256) it lost to the
        # held-activation GEMM2 (0.73-0.75x in the harness).
        # From 256 rows per expert GEMM1 takes the wide tile (2 x 128 gated / 256 columns: one promoted
        # partial set, a quarter less L2 traffic per FLOP; 4 stages of 48 KB): H200 tuner, session 17,
        # 20 FP8 points at 2048 / 8192 tokens -- it chose the wide GEMM1 on 10 of the 12 points with
        # r >= 256 and on 2 of the 8 below; GEMM2 mostly kept the narrow tile.
        if gemm == "gemm1" and M_tokens * top_k >= WS_WIDE_MIN_ROWS_PER_EXPERT * max(E_loc, 1):
            return ws_wide_config(gated, fmt)
        return warp_specialized_config(gated, num_stages=5)
    return _compile_safe(KernelConfig(block_m=bm, block_n=bn, block_k=bk, group_m=group_m, num_warps=warps,
                                      num_stages=stages, swap_ab=swap_ab, split_k=split), fmt)


# GEMM2 with the activation tile held across column tiles (KernelConfig.n_tiles): up to this K,
# for these weight formats
HELD_A_MAX_K = 256
HELD_A_FORMATS = (Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK)


def held_a_problem(cfg: KernelConfig, weight_format: Format, I_pad: int) -> Optional[str]:
    """None, or why GEMM2 config ``cfg`` with ``n_tiles > 1`` cannot run for ``weight_format`` at
    K = ``I_pad``: the held activation tile is the whole K in one block (16-bit, FP8 per tensor /
    channel: block_k >= I_pad) or at most two 128-wide K-blocks (FP8 128 x 128 blocks)."""
    if cfg.n_tiles == 1:
        return None
    if weight_format not in HELD_A_FORMATS:
        return f"GEMM2 n_tiles > 1 supports {[f.name for f in HELD_A_FORMATS]} weights, got {weight_format.name}"
    if weight_format is Format.FP8_BLOCK:
        if I_pad > 2 * cfg.block_k:
            return (f"GEMM2 n_tiles > 1 with FP8_BLOCK holds at most two 128-wide K-blocks: needs "
                    f"intermediate_size_padded <= 256, got {I_pad}")
    elif cfg.block_k < I_pad:
        return (f"GEMM2 n_tiles > 1 holds the whole K in one block: needs block_k >= "
                f"intermediate_size_padded ({I_pad}), got block_k {cfg.block_k}")
    return None


# the warp-specialized Gluon kernels (KernelConfig.warp_specialized): for these formats (the tuner tries
# all of them at prefill); the heuristic uses them for FP8 per tensor / channel from this intermediate
# size up (_heuristic) -- FP8 blocks and 16-bit weights only through the tuned table
WS_FORMATS = (Format.BF16, Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK)
WS_MIN_INTERMEDIATE = 512
WS_MIN_ROWS_PER_EXPERT = 64  # T * top_k / E_loc: below, 64-row tiles (heuristic_block_m) stay on the Triton kernel
WS_WIDE_MIN_ROWS_PER_EXPERT = 256  # FP8 per tensor / channel GEMM1: the wide tile (_heuristic) from here
_WS_SMEM = 220 * 1024  # the operand ring's budget (Hopper: 227 KB a block, barriers and the epilogue's scratch)
# the warp-specialized prefill GEMMs' A rows by cp.async from the unsorted rows (X_GATHER, triton_moe.set_ws_x_gather)
# instead of a gather launch and TMA boxes, where an H100 measured it faster (forty-third session): a GEMM whose
# expert has at most this many weight rows (gated GEMM1: 2 x the intermediate), or at most this many rows an expert;
# and (forty-seventh session) every such GEMM of a gated layer whose tiles come from the global counter (DYN)
WS_X_GATHER_MAX_WEIGHT_ROWS = 2048
WS_X_GATHER_MAX_ROWS_PER_EXPERT = 64
# the tiles from a global counter (DYN, triton_moe.set_ws_dynamic_tiles) for FP8 and FP4 weights from this many local
# experts (ws_dynamic_tiles_auto: FP8 measured between Mixtral's 8, slightly slower, and Qwen3-30B's 128, even)
WS_DYN_MIN_EXPERTS = 64


def ws_x_gather_auto(weight_rows: int, rows_per_expert: float, *, dyn: bool, gated: bool,
                     weight_format: Format) -> bool:
    """Whether a warp-specialized 16-bit / FP8 prefill GEMM reads its A rows by cp.async by default (``set_ws_x_gather``
    "auto"). The gather launch it saves writes and reads P x K elements, the same for every weight row, so its share
    of the GEMM's time falls with the weight rows an expert; the cp.async loader costs the GEMM itself a little where
    its tensor cores are busy (both 64-row halves of most blocks full). ``dyn``: the GEMM takes its tiles from the
    global counter (``ws_dynamic_tiles_auto`` or forced); ``gated``: the layer's activation is gated (GEMM2 too);
    ``weight_format``: the GEMM's weights.
    Measured (H100, ``benchmarks/decode_ab.py --settings default,wsxg``, BENCHMARKS.md): Qwen3-30B-A3B (1536 / 2048
    weight rows) FP8 1.04-1.08x at 2048 and 8192 tokens; DeepSeek-V3 at 2048 tokens (64 rows an expert: most blocks'
    second halves skipped) 1.03-1.04x; with static tiles (forty-third session) DeepSeek-V3 at 8192 tokens (4096 /
    7168 rows, 256 an expert) 0.93-0.99x and Mixtral-8x7B (28672 / 4096 rows) 0.94-1.00x -- those kept the gather.
    With counted tiles (forty-seventh session, two runs at most points) the gated many-expert layers gain at every
    point: DeepSeek-V3 at 8192 tokens FP8 per channel 1.032-1.033x, per tensor 1.022-1.025x, blocks 1.009x,
    MiniMax-M2 1.005-1.023x, Qwen3-235B-A22B at 2048 / 8192 tokens 1.003-1.020x; the one non-gated shape measured,
    Nemotron-3-Nano (ReLU^2, 128 experts), was mixed -- per channel 1.005-1.040x, per tensor 0.955-0.992x; the
    forty-eighth session's harness (H100, ``PEERS=fusedmoe,fusedmoe-xg``, Nemotron FP8 at 2048 / 8192 tokens) the
    same pattern a third time: per channel 1.039 / 1.033x, per tensor 1.000 / 0.969x -- so a non-gated layer copies
    its rows with counted tiles for FP8 per channel weights (per-token activation scales) only, and keeps the rule
    without the counter otherwise. (Why per tensor loses is open: its sm_90 builds have no spills either way.)"""
    return (weight_rows <= WS_X_GATHER_MAX_WEIGHT_ROWS or rows_per_expert <= WS_X_GATHER_MAX_ROWS_PER_EXPERT
            or (dyn and (gated or weight_format is Format.FP8_CHANNEL)))


def ws_dynamic_tiles_auto(weight_format: Format, num_local_experts: int) -> bool:
    """Whether a warp-specialized prefill GEMM takes its tiles from a global counter by default
    (``triton_moe.set_ws_dynamic_tiles`` "auto", ``DYN``): FP8 weights (per tensor, per channel, 128 x 128 blocks)
    and MXFP4 / NVFP4 weights with at least ``WS_DYN_MIN_EXPERTS`` local experts. Measured (H100, forty-fifth
    session, ``FUSEDMOE_WS_DYN=0|1 benchmarks/kernel_breakdown.py``, BENCHMARKS.md): with 256 experts the static
    tiles drift apart and read an expert's weights more than once -- DeepSeek-V3 FP8 1.01-1.11x at 2048 / 8192
    tokens (with the wide 2 x 128 GEMM1 tile at 8192 tokens 1.07-1.11x over the static narrow one), MiniMax-M2
    1.00-1.07x --; Qwen3-30B-A3B (128 experts) and DeepSeek-V3 TP8 (256 experts of 256 columns) within +-1 %;
    Mixtral-8x7B (8 experts) 0.98-1.02x and 16-bit weights 0.97-1.00x (``decode_ab.py --settings default,wsdyn``;
    fifty-first session, the shared harness's 18 BF16 points of the many-expert models at 2048 / 8192 tokens, peer
    ``fusedmoe-dyn``: 0.997x) -- those keep the static tiles. MXFP4 / NVFP4 weights too (the FP4 x BF16 prefill
    kernel's ``DYN``; H100, forty-sixth session, ``decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano
    --weight-format mxfp4,nvfp4 --tokens 2048,4096,8192 --settings default,wsdyn``): 1.003-1.052x at all 18 points
    (128 / 512 experts; a tile's cost varies with its real 64-row chunks, so static tile lists finish unevenly). FP4
    with fewer experts is not measured: static, as FP8 there."""
    return weight_format in WS_DYN_FORMATS and num_local_experts >= WS_DYN_MIN_EXPERTS


SM90_SMEM_PER_SM = 228 * 1024
# a decode-kernel program's shared memory besides the ring: barriers and the epilogue's layout conversions (sm_90
# compile: 4228 B), and the 1 KB the runtime reserves
WS_DEC_FIXED_SMEM = (4 + 1) * 1024 + 256
# the decode kernels' programs an SM (KernelConfig.persistent on decode tiles; set_ws_decode's / set_ws_fp4_decode's
# ctas). 4 (thirty-third session, compiled for sm_90 only so far): 64 registers a thread, both kernels without spills
# and with asynchronous wgmmas -- 16 consumer warps an SM instead of 12 for the latency-bound FP4 conversion
WS_DEC_CTAS = (1, 2, 3, 4)


def ws_dec_max_stages(stage_bytes: int, ctas: int) -> int:
    """The most ring stages of ``stage_bytes`` that let ``ctas`` decode-kernel programs share an SM's shared memory
    (each program's barriers, epilogue scratch and reserved 1 KB besides: ``WS_DEC_FIXED_SMEM``)."""
    return (SM90_SMEM_PER_SM // ctas - WS_DEC_FIXED_SMEM) // stage_bytes


def _ws_tile(weight_format: Format, gemm: str, gated: bool):
    """(block_k, allowed block_n) of the warp-specialized kernel: 128-byte K rows (128 FP8 / 64
    16-bit values: TMA's widest swizzle); per 64-row warpgroup at most 128 fp32 accumulators a
    thread -- FP8 keeps a second set for the promoted partial sums: its gated tiles are 2 x 64 and
    its others 64 / 128 wide with a partial set per accumulator, or (per tensor / per channel) 2 x 128 /
    256 wide with one 128-column partial set that the two halves take in turn (``_ws_gemm``'s ONE_PART:
    the heuristic's GEMM1 from ``WS_WIDE_MIN_ROWS_PER_EXPERT`` for FP8 per tensor / channel; tuner candidates --
    FP8 blocks too since the thirty-eighth session: one weight scale a 128-column half,
    ``triton_moe._ws_block_w_scalar``, compiled for sm_90 without spills, not yet run on a GPU)."""
    g = gated and gemm == "gemm1"
    if weight_format is Format.BF16:
        return 64, ((64, 128) if g else (128, 256))
    return 128, ((64, 128) if g else (64, 128, 256))


def _ws_default_bn(weight_format: Format, gated: bool) -> int:
    """The warp-specialized tile width the tuner and (below ``WS_WIDE_MIN_ROWS_PER_EXPERT``, and for
    GEMM2) the heuristic use: BF16 the widest (128 gated / 256); FP8 64 gated / 128 (a partial set per
    accumulator)."""
    if weight_format is Format.BF16:
        return _ws_tile(weight_format, "gemm1", gated)[1][-1]
    return 64 if gated else 128


def _ws_stage_bytes(weight_format: Format, two_weight_tiles: bool, block_n: int, block_k: int) -> int:
    """Shared memory of one stage of the warp-specialized ring: the 128 A rows and the weight tile(s)
    (gate and up for a gated GEMM1), block_k values each."""
    return (128 + (2 if two_weight_tiles else 1) * block_n) * block_k * (2 if weight_format is Format.BF16 else 1)


# the warp-specialized FP4 (MXFP4 / NVFP4) x BF16 kernel (kernels/_ws_fp4.py): swap-AB tiles of 64 weight rows per consumer
# warpgroup (gated GEMM1: 2 x 32 output columns, gate and up rows in one tile; otherwise 2 x 64) and block_m token
# rows (the wgmma's N), 64-wide K steps
WS_FP4_FORMATS = (Format.MXFP4, Format.NVFP4)
WS_FP4_BLOCK_MS = (128, 256)
_WS_FP4_TILE_BYTES = 2 * 2 * 64 * 64 * 2  # the two warpgroups' double-buffered BF16 weight tiles
# the epilogue's layout-conversion scratch, gated GEMM1 / otherwise (sm_90 compile of 256-token tiles; less at 128)
_WS_FP4_EPI_SCRATCH = {True: 32 * 1024, False: 16 * 1024}


def _ws_fp4_fixed_bytes(gated_gemm1: bool, block_k: int = 64) -> int:
    """The FP4 kernel's shared memory besides its ring: the converted weight tiles (``block_k`` 128: a second set,
    the second K step's of a ring slot) and the epilogue's scratch (sm_90 compile, 256-token tiles at 4 stages:
    213064 bytes gated, 196680 otherwise -- the ring, these and the barriers; ``test_ws_fp4_compiles_for_sm90``
    checks the bound)."""
    return _WS_FP4_TILE_BYTES * (block_k // 64) + _WS_FP4_EPI_SCRATCH[gated_gemm1]


# one ring stage's block scales of the FP4 prefill kernel's 128 weight rows under its S_SMEM option
# (triton_moe.set_ws_fp4_scales_smem): MX a 4-byte word a row, NVFP4 four e4m3 columns
_WS_FP4_SCALE_STAGE_BYTES = 512
WS_FP4_BLOCK_KS = (64, 128)  # the FP4 prefill kernel's K a ring slot: one or two 64-wide K steps


def _ws_fp4_stage_bytes(block_m: int, scales: bool = True, block_k: int = 64) -> int:
    """One ring stage of the FP4 kernel: per 64-wide K step (``block_k`` / 64 of them) the [block_m, 64] BF16 input
    tile, two 64-row boxes of FP4 values and (``scales``; budgeted whether or not the kernel's ``S_SMEM`` option
    runs) the step's block scales."""
    return block_k // 64 * (block_m * 64 * 2 + 2 * 64 * 32 + (_WS_FP4_SCALE_STAGE_BYTES if scales else 0))


def ws_fp4_stages(gated: bool, gemm: str, block_m: int, block_k: int = 64, num_stages: int = 4) -> int:
    """The ring stages of an FP4 warp-specialized tile: ``num_stages`` capped to the shared-memory budget, at least 2
    (0 where not even 2 fit). ``block_k`` 128: 3 stages of 128-token tiles; 256-token ones do not fit."""
    fixed = _ws_fp4_fixed_bytes(gated and gemm == "gemm1", block_k)
    fit = (_WS_SMEM - fixed) // _ws_fp4_stage_bytes(block_m, block_k=block_k)
    return max(2, min(num_stages, fit)) if fit >= 2 else 0


def ws_fp4_config(gated: bool, gemm: str, block_m: int = 128, num_stages: int = 4, block_k: int = 64) -> KernelConfig:
    """The FP4 warp-specialized tile of ``gemm`` (block_n: 64 output columns for a gated GEMM1, else 128),
    ``num_stages`` capped to the shared-memory budget (epilogue scratch included: 256-token tiles fit 4);
    ``block_k`` 128: two 64-wide K steps a ring slot (``triton_moe.set_ws_fp4_block_k``; 128-token tiles at 3
    stages; 256-token ones do not fit)."""
    if block_m not in WS_FP4_BLOCK_MS:
        raise ValueError(f"ws_fp4_config: block_m must be one of {WS_FP4_BLOCK_MS}, got {block_m}")
    if block_k not in WS_FP4_BLOCK_KS:
        raise ValueError(f"ws_fp4_config: block_k must be one of {WS_FP4_BLOCK_KS}, got {block_k}")
    st = ws_fp4_stages(gated, gemm, block_m, block_k, num_stages)
    if st == 0:
        raise ValueError(f"ws_fp4_config: block_k {block_k} with block_m {block_m} does not fit the shared memory "
                         "at 2 stages")
    return KernelConfig(block_m, 64 if gated and gemm == "gemm1" else 128, block_k, group_m=8, num_warps=4,
                        num_stages=st, warp_specialized=True)


# the FP4 decode kernel (kernels/_ws_fp4_dec.py; OPT-IN: correct on the H200, slower than the Triton GEMMs): 16 token
# rows a block, 64 weight rows a unit (gated GEMM1: 32 gate + 32 up, so 32 output columns), block_k 64 / 128 (one or
# two 64-wide blocks a ring step)
WS_FP4_DEC_BLOCK_M = 16


def ws_fp4_dec_stage_bytes(block_k: int) -> int:
    """One ring stage of the FP4 decode kernel: per 64-wide K block the [16, 64] BF16 token rows, 64 weight rows and
    (its ``S_SMEM`` option; budgeted either way) 256 bytes of block scales."""
    return block_k // 64 * (WS_FP4_DEC_BLOCK_M * 64 * 2 + 64 * 32 + 256)


def ws_fp4_dec_config(gated: bool, gemm: str, split_k: int = 1, num_stages: int = 8, block_k: int = 128,
                      ctas: Optional[int] = None) -> KernelConfig:
    """The FP4 decode kernel's tile of ``gemm``: 16 token rows, 32 output columns for a gated GEMM1 (gate and up
    rows: 64 weight rows), 64 otherwise; ``block_k`` 64 / 128 a ring step, ``split_k`` shares of K, ``ctas``
    programs an SM (``persistent``; None: ``set_ws_fp4_decode``'s)."""
    if ctas is not None and ctas not in WS_DEC_CTAS:
        raise ValueError(f"ws_fp4_dec_config: ctas must be None or one of {WS_DEC_CTAS}, got {ctas!r}")
    return KernelConfig(WS_FP4_DEC_BLOCK_M, 32 if gated and gemm == "gemm1" else 64, block_k, group_m=1,
                        num_warps=4, num_stages=num_stages, split_k=split_k, persistent=ctas,
                        warp_specialized=True)


def _ws_fp4_dec_problem(cfg: KernelConfig, gemm: str, gated: bool, K: int) -> Optional[str]:
    bn = 32 if gated and gemm == "gemm1" else 64
    if cfg.block_k not in (64, 128) or cfg.block_n != bn:
        why = (f"with decode tiles (block_m {WS_FP4_DEC_BLOCK_M}) and FP4 weights needs block_k 64 / 128 and block_n "
               f"{bn}, got {cfg.block_k} / {cfg.block_n}")
    else:
        why = _ws_launch_problem(cfg, gemm, K, 64, "", ws_fp4_dec_stage_bytes(cfg.block_k), 0,
                                 "take swap_ab (its tiles are swapped already)", max_stages=8, split_ok=True)
    return None if why is None else f"{gemm.upper()} warp_specialized {why}"


def _ws_fp4_problem(cfg: KernelConfig, gemm: str, gated: bool, K: int) -> Optional[str]:
    if cfg.block_m == WS_FP4_DEC_BLOCK_M:
        return _ws_fp4_dec_problem(cfg, gemm, gated, K)
    bn = 64 if gated and gemm == "gemm1" else 128
    if cfg.block_m not in WS_FP4_BLOCK_MS or cfg.block_k not in WS_FP4_BLOCK_KS or cfg.block_n != bn:
        why = (f"needs block_m in {WS_FP4_BLOCK_MS} (or {WS_FP4_DEC_BLOCK_M}: decode tiles), block_k in "
               f"{WS_FP4_BLOCK_KS} and block_n {bn} with FP4 weights, got "
               f"{cfg.block_m} / {cfg.block_k} / {cfg.block_n}")
    else:
        stage = _ws_fp4_stage_bytes(cfg.block_m, block_k=cfg.block_k)
        why = _ws_launch_problem(cfg, gemm, K, 64, "", stage, _ws_fp4_fixed_bytes(gated and gemm == "gemm1",
                                                                                  cfg.block_k),
                                 "take swap_ab (its tiles are swapped already)")
    return None if why is None else f"{gemm.upper()} warp_specialized {why}"


# the 16-bit / FP8 decode kernel (kernels/_ws_dec.py; chosen by the tuned table where it measured faster, else the
# opt-in set_ws_decode): the FP4 decode kernel's tile -- 16 token rows a block, 64 weight rows a unit (gated GEMM1:
# 32 gate + 32 up), 128 bytes of K a block (64 16-bit / 128 FP8 values), one or two blocks a ring step
WS_DEC_BLOCK_M = WS_FP4_DEC_BLOCK_M


def ws_dec_block_k(weight_format: Format) -> int:
    """K values in one 128-byte block of the 16-bit / FP8 decode kernel: 64 (BF16 / FP16 weights) or 128 (FP8)."""
    return 64 if weight_format is Format.BF16 else 128


def ws_dec_max_blocks(weight_format: Format) -> int:
    """128-byte K blocks a ring step the 16-bit / FP8 decode kernel takes: 2, FP8 128 x 128 blocks 1 (the layer's
    FP8-block rule: one scale block a K step)."""
    return 1 if weight_format is Format.FP8_BLOCK else 2


def ws_dec_stage_bytes(block_k: int, weight_format: Format) -> int:
    """One ring stage of the 16-bit / FP8 decode kernel: per 128-byte K block the [16, .] token rows and the 64
    weight rows."""
    return block_k // ws_dec_block_k(weight_format) * (WS_DEC_BLOCK_M + 64) * 128


def ws_dec_config(gated: bool, gemm: str, weight_format: Format, split_k: int = 1, num_stages: int = 6,
                  blocks: int = 1, ctas: Optional[int] = None) -> KernelConfig:
    """The 16-bit / FP8 decode kernel's tile of ``gemm``: 16 token rows, 32 output columns for a gated GEMM1 (gate and
    up rows: 64 weight rows), 64 otherwise; ``blocks`` (1 / 2) 128-byte K blocks a ring step, ``split_k`` shares of
    K, ``ctas`` programs an SM (``persistent``; None: ``set_ws_decode``'s)."""
    if weight_format not in WS_FORMATS:
        raise ValueError(f"ws_dec_config: the decode kernel takes {[f.name for f in WS_FORMATS]} weights, got "
                         f"{weight_format.name}")
    if blocks not in (1, 2):
        raise ValueError(f"ws_dec_config: blocks must be 1 or 2, got {blocks!r}")
    if ctas is not None and ctas not in WS_DEC_CTAS:
        raise ValueError(f"ws_dec_config: ctas must be None or one of {WS_DEC_CTAS}, got {ctas!r}")
    return KernelConfig(WS_DEC_BLOCK_M, 32 if gated and gemm == "gemm1" else 64, blocks * ws_dec_block_k(weight_format),
                        group_m=1, num_warps=4, num_stages=num_stages, split_k=split_k, persistent=ctas,
                        warp_specialized=True)


def _ws_dec_problem(cfg: KernelConfig, weight_format: Format, gemm: str, gated: bool, K: int) -> Optional[str]:
    bn = 32 if gated and gemm == "gemm1" else 64
    bks = [b * ws_dec_block_k(weight_format) for b in range(1, ws_dec_max_blocks(weight_format) + 1)]
    if cfg.block_k not in bks or cfg.block_n != bn:
        why = (f"with decode tiles (block_m {WS_DEC_BLOCK_M}) and {weight_format.name} weights needs block_k "
               f"{' / '.join(map(str, bks))} and block_n {bn}, got {cfg.block_k} / {cfg.block_n}")
    else:
        why = _ws_launch_problem(cfg, gemm, K, 16, " (TMA row strides)", ws_dec_stage_bytes(cfg.block_k, weight_format),
                                 0, "take swap_ab (its tiles are swapped already)", max_stages=8, split_ok=True)
    return None if why is None else f"{gemm.upper()} warp_specialized {why}"


def _ws_launch_problem(cfg: KernelConfig, gemm: str, K: int, k_multiple: int, k_why: str, stage: int, fixed: int,
                       swap_why: str, max_stages: int = 6, split_ok: bool = False) -> Optional[str]:
    """The launch rules the warp-specialized kernels share: 4 warps (the first warpgroup; the kernel adds the
    others), 2-``max_stages`` ``stage``-byte stages within the shared-memory budget (plus ``fixed`` bytes), no
    split-K (unless ``split_ok``: the decode kernels, at most one share a K step) / swap-AB / fast accumulation /
    held tiles / persistent setting, K a multiple of ``k_multiple``."""
    if cfg.num_warps != 4 or not 2 <= cfg.num_stages <= max_stages:
        return (f"needs num_warps 4 (one warpgroup; the kernel adds the others) and num_stages 2-{max_stages}, got "
                f"{cfg.num_warps} / {cfg.num_stages}")
    if cfg.num_stages * stage + fixed > _WS_SMEM:
        return (f"with {cfg.num_stages} stages of {stage // 1024} KB exceeds the {_WS_SMEM // 1024} KB of shared "
                f"memory it plans for: use at most {(_WS_SMEM - fixed) // stage} stages")
    if ((cfg.split_k != 1 and not split_ok) or cfg.swap_ab or cfg.fp8_fast_accum or cfg.n_tiles != 1
            or (cfg.persistent and not split_ok)):
        return (f"does not {'' if split_ok else 'split K, '}{swap_why}, accumulate FP8 in the tensor cores, hold "
                f"tiles or take a persistent setting{' other than its programs an SM' if split_ok else ''}")
    if split_ok and cfg.persistent is not None:  # the decode kernels: programs an SM sharing its shared memory
        if cfg.persistent not in WS_DEC_CTAS:
            return f"runs {' / '.join(map(str, WS_DEC_CTAS))} programs an SM (persistent), got {cfg.persistent}"
        if cfg.num_stages > ws_dec_max_stages(stage, cfg.persistent):
            return (f"with {cfg.persistent} programs an SM fits at most {ws_dec_max_stages(stage, cfg.persistent)} "
                    f"stages of {stage} B in a program's share of the shared memory, got {cfg.num_stages}")
    if K % k_multiple:
        return (f"needs K ({'H' if gemm == 'gemm1' else 'intermediate_size_padded'}) a multiple of {k_multiple}"
                f"{k_why}, got {K}")
    if split_ok and cfg.split_k > -(-K // cfg.block_k):  # every share has a K step (its ring slots and counters)
        return f"splits K in at most its {-(-K // cfg.block_k)} steps of block_k {cfg.block_k}, got split_k {cfg.split_k}"
    return None


def warp_specialized_problem(cfg: KernelConfig, weight_format: Format, gemm: str, gated: bool, K: int) -> Optional[str]:
    """None, or why config ``cfg`` of ``gemm`` (contracting over ``K``: H for GEMM1, I_pad for
    GEMM2) with ``warp_specialized`` cannot run (the device -- sm_90, not the interpreter -- and the
    operand dtypes are the launcher's checks)."""
    if not cfg.warp_specialized:
        return None
    if cfg.pipelined_promotion and (why := _ws_pipe_problem(cfg, weight_format)):
        return f"{gemm.upper()} pipelined_promotion {why}"
    if weight_format in WS_FP4_FORMATS:
        return _ws_fp4_problem(cfg, gemm, gated, K)
    if weight_format not in WS_FORMATS:
        return f"{gemm.upper()} warp_specialized supports {[f.name for f in WS_FORMATS]} weights, got {weight_format.name}"
    if cfg.block_m == WS_DEC_BLOCK_M:
        return _ws_dec_problem(cfg, weight_format, gemm, gated, K)
    bk, bns = _ws_tile(weight_format, gemm, gated)
    stage = _ws_stage_bytes(weight_format, gated and gemm == "gemm1", cfg.block_n, cfg.block_k)
    if cfg.block_m != 128 or cfg.block_k != bk or cfg.block_n not in bns:
        why = (f"needs block_m 128 (or {WS_DEC_BLOCK_M}: decode tiles), block_k {bk} and block_n in {bns} with "
               f"{weight_format.name} weights, got "
               f"{cfg.block_m} / {cfg.block_k} / {cfg.block_n}")
    else:
        why = _ws_launch_problem(cfg, gemm, K, 16, " (TMA row strides)", stage, 0, "swap A and B")
    return None if why is None else f"{gemm.upper()} warp_specialized {why}"


def ws_block_scale_problem(cfg: KernelConfig, weight_format: Format, gated: bool, N: int) -> Optional[str]:
    """None, or why warp-specialized FP8 128 x 128 block tile ``cfg`` of a GEMM with ``N`` output columns (a gated
    GEMM1: ``gated``, N its intermediate, the up half starting at row N of w13) cannot read one weight scale a K block
    for each column group (``triton_moe._ws_block_w_scalar``): a gated tile's groups lie in one 128-row scale block
    only where block_n divides N. A layer's FP8 block intermediate is whole 128-row blocks; the tuner's callers may
    pass other sizes (and the table's nearest entry may be a wide tile)."""
    if (weight_format is Format.FP8_BLOCK and cfg.warp_specialized and cfg.block_m != WS_DEC_BLOCK_M and gated
            and N % cfg.block_n):
        return (f"the warp-specialized FP8 block tile of {cfg.block_n} columns needs N a multiple of {cfg.block_n} "
                f"(whole 128-row scale blocks a column group), got N={N}")
    return None


# the FP8 formats whose warp-specialized prefill tiles promote partial sums to fp32 each K block: the ones that can
# take pipelined_promotion and the wide one-set tiles (2 x 128 gated / 256)
WS_PROMOTED_FORMATS = (Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK)
# the formats whose warp-specialized prefill GEMMs take their tiles from a global counter by default
# (ws_dynamic_tiles_auto): the FP8 kernel's and the FP4 kernel's
WS_DYN_FORMATS = WS_PROMOTED_FORMATS + WS_FP4_FORMATS


def _ws_pipe_problem(cfg: KernelConfig, weight_format: Format) -> Optional[str]:
    """None, or why ``cfg`` cannot take ``pipelined_promotion``: FP8 prefill tiles (block_m 128; the tile widths are
    :func:`warp_specialized_problem`'s rule; FP8 blocks since the thirty-eighth session, with one weight scale a
    column group: ``triton_moe._ws_block_w_scalar``) -- 16-bit weights (no promotion) and the decode tiles run
    their own loops."""
    if weight_format not in WS_PROMOTED_FORMATS:
        return f"needs FP8 per tensor / per channel / block weights, got {weight_format.name}"
    if cfg.block_m != 128:
        return f"needs the 128-row prefill tiles, got block_m {cfg.block_m}"
    return None


def ws_pipelined(cfg: KernelConfig, weight_format: Format) -> Optional[KernelConfig]:
    """``cfg`` with ``pipelined_promotion`` on, or None where it cannot take it (not warp-specialized, or
    :func:`_ws_pipe_problem`): the tuner's pipelined candidates."""
    if not cfg.warp_specialized or _ws_pipe_problem(cfg, weight_format):
        return None
    return dataclasses.replace(cfg, pipelined_promotion=True)


def warp_specialized_config(gated: bool, *, num_stages: int = 4, group_m: int = 8,
                            weight_format: Format = Format.FP8_TENSOR, block_n: Optional[int] = None) -> KernelConfig:
    """The warp-specialized tile (``KernelConfig.warp_specialized``): 128 rows in two 64-row
    warpgroups and 128-byte K blocks; FP8: 64 columns for a gated GEMM1 (gate and up tiles) or 128
    (a non-gated GEMM1, GEMM2), 32 KB a stage; BF16: 128 gated / 256 columns, 48 KB a stage (at
    most 4 stages). ``block_n``: another allowed width (``_ws_tile``; FP8 2 x 128 / 256: one
    promoted partial set, 48 KB stages); stages are capped to fit."""
    bk, bns = _ws_tile(weight_format, "gemm1", gated)
    bn = _ws_default_bn(weight_format, gated) if block_n is None else block_n
    if bn not in bns:
        raise ValueError(f"warp_specialized_config: block_n {bn} is not one of {bns} for "
                         f"{'gated' if gated else 'non-gated'} {weight_format.name} tiles")
    num_stages = min(num_stages, _WS_SMEM // _ws_stage_bytes(weight_format, gated, bn, bk))  # 48 KB stages: 4
    return KernelConfig(block_m=128, block_n=bn, block_k=bk, group_m=group_m, num_warps=4,
                        num_stages=num_stages, warp_specialized=True)


def ws_wide_config(gated: bool, weight_format: Format, *, num_stages: int = 4) -> KernelConfig:
    """The widest warp-specialized tile of ``weight_format`` (FP8 per tensor / channel: 2 x 128 gated
    or 256 columns with one promoted partial set, 48 KB stages): the heuristic's GEMM1 from
    ``WS_WIDE_MIN_ROWS_PER_EXPERT`` and the tuner's wide candidates."""
    return warp_specialized_config(gated, num_stages=num_stages, weight_format=weight_format,
                                   block_n=_ws_tile(weight_format, "gemm1", gated)[1][-1])


def triton_tile(cfg: KernelConfig) -> KernelConfig:
    """``cfg``, or for a warp-specialized config the Triton tile the heuristic ran before it (128
    rows, 8 warps, 4 stages; FP8: 128 weight rows, BF16 -- 64-wide K blocks -- the ws tile's width,
    128 gated / 256)."""
    if not cfg.warp_specialized:
        return cfg
    if cfg.block_k == 64:
        return KernelConfig(block_m=128, block_n=max(128, cfg.block_n), block_k=64, group_m=cfg.group_m,
                            num_warps=8, num_stages=4)
    return KernelConfig(block_m=128, block_n=128, block_k=128, group_m=cfg.group_m, num_warps=8, num_stages=4)


def with_block_m(cfg: KernelConfig, block_m: int) -> KernelConfig:
    """``cfg`` at ``block_m`` rows (to match the other GEMM's): a warp-specialized config (128 rows
    only) becomes its :func:`triton_tile`, and a persistent setting is dropped where the new tile's
    accumulators would not fit next to the tile loop's state (more than 64 per thread, as
    :func:`auto_persistent` rules)."""
    if cfg.block_m == block_m:
        return cfg
    cfg = dataclasses.replace(triton_tile(cfg), block_m=block_m)
    if cfg.persistent and cfg.block_m * cfg.block_n > 64 * 32 * cfg.num_warps:
        cfg = dataclasses.replace(cfg, persistent=0)
    return cfg


def warp_specialized_variant(cfg: MoEKernelConfig, gated: bool, *, gemm2: bool = True,
                             weight_format: Format = Format.FP8_TENSOR, **kw) -> MoEKernelConfig:
    """``cfg`` with the warp-specialized GEMM1 and -- ``gemm2`` -- GEMM2 (non-gated tile), or
    GEMM2's own tile at 128 rows (:func:`with_block_m`); the candidates the tuner tries and the
    harness peers ``fusedmoe-ws`` / ``fusedmoe-ws1`` measure. ``kw``: :func:`warp_specialized_config`'s."""
    kw["weight_format"] = weight_format
    g2 = warp_specialized_config(False, **kw) if gemm2 else with_block_m(cfg.gemm2, 128)
    return MoEKernelConfig(warp_specialized_config(gated, **kw), g2, atomic_combine=cfg.atomic_combine)


_HELD_A_COLUMNS = 1792  # output columns per program


def held_a_config(block_m: int, N: int, K: int, weight_format: Format) -> KernelConfig:
    """The prefill GEMM2 of short K (K = I_pad <= ``HELD_A_MAX_K``: TP shards) with its activation
    tile held (``KernelConfig.n_tiles``): 64-column weight tiles, the whole K in one block, 4 warps,
    3 stages, ~1792 output columns per program in equal groups. H200, DeepSeek-V3 TP8 GEMM2
    (N = 7168, K = 256) against the per-tile configs of the tuned table, same call
    (BENCHMARKS.md, twelfth session): FP8 per tensor / per channel at 8192 tokens 714 -> 556 /
    826 -> 599 us (64-row tiles), at 2048 256 -> 199 / 297 -> 210 us; BF16 (128-row tiles) 1009 ->
    924 and 420 -> 377 us. Three programs fit an SM with FP8 64-row tiles (16 KB activation tile
    + three 16 KB weight stages), which hide each other's epilogues; BF16 at 64 rows
    (64 x 128 tiles: one program per SM) was 1.2-1.3x slower than per tile at 8192 tokens.
    FP8 128 x 128 blocks hold up to two 128-wide K-blocks (block_k 128, one scale per block), at 64+
    rows too: the H200 tuner (thirteenth session) chose exactly this config on all six TP8 points it
    tried (DeepSeek-V3, Qwen3-235B, MiniMax-M2 at 2048 / 8192 tokens), 1.09-1.15x over one program
    per tile."""
    tiles = math.ceil(N / 64)
    groups = max(1, round(N / _HELD_A_COLUMNS))
    bk = 128 if weight_format is Format.FP8_BLOCK else max(64, 1 << (K - 1).bit_length())
    return KernelConfig(block_m=block_m, block_n=64, block_k=bk, group_m=1, num_warps=4, num_stages=3,
                        n_tiles=math.ceil(tiles / groups))


def k_loop_stages(K: int, block_k: int, split_k: int = 1) -> int:
    """The most pipeline stages a program's K loop can use: its K blocks, ``cdiv(cdiv(K, block_k),
    split_k)``, + 1 (the pipeline keeps num_stages - 1 blocks in flight). The heuristic sizes its
    stages within it; the launcher trims other configs to it (``triton_moe.trim_stages``)."""
    k_blocks = -(-K // block_k)
    return -(-k_blocks // split_k) + 1


def auto_persistent(cfg: KernelConfig, weight_format: Format, a_bytes: float) -> int:
    """GEMM2 programs per SM (0: one program per tile) for ``cfg``: its ``persistent`` if set, else
    the rule below. ``a_bytes``: bytes per element of GEMM2's input (the intermediate).

    Prefill tiles (block_m >= 64) of the dense formats -- 16-bit at any warp count, FP8 (per
    tensor / channel / block) at 4 warps -- run persistent with as many programs per SM (at most 2)
    as their pipeline buffers fit the 228 KB of an SM. H200 (BENCHMARKS.md, eleventh session):
    GEMM2 alone at 8192 tokens, FP8 per channel 64 x 128 x 128, 4 warps, 3 stages, 2 programs per
    SM against the tuned 8-warp tile run one program per tile: DeepSeek-V3 TP8 (K = 256) 828 vs
    994 us, Qwen3-30B (K = 768) 373 vs 446 us -- each tile's few K-blocks otherwise leave its load
    latency and epilogue exposed; in the harness (128-8192 tokens, same process) the BF16 cases ran
    1.03-1.14x faster persistent and FP8 block DeepSeek-V3 TP8 (4 warps) 1.08x, while the 8-warp
    FP8 per tensor / channel tiles ran 0.83-0.96x. Decode tiles, split-K, FP8 at 8 warps, tiles of
    more than 64 accumulator registers per thread and the block-scaled formats (registers go to
    dequantization) keep one program per tile; the tuner tries 4-warp persistent GEMM2s."""
    if cfg.persistent is not None:
        return cfg.persistent
    if cfg.n_tiles > 1 or cfg.split_k > 1 or cfg.block_m < 64 or weight_format in _BLOCK_SCALED:
        return 0
    if (weight_format is not Format.BF16 and cfg.num_warps != 4) or cfg.block_m * cfg.block_n > 64 * 32 * cfg.num_warps:
        # FP8 at 8 warps ran slower persistent (H200, GEMM2 at 8192 tokens, the tuned 64 x 128 x
        # 128 FP8 tile: DeepSeek-V3 TP8 994 -> 1194 us with 2 programs per SM, 1142 with 1; the
        # harness's FP8 per tensor / channel cases at 512-8192 tokens 0.83-0.96x); > 64
        # accumulator registers per thread: the tile loop's state does not fit next to them (sm_90
        # compile of the BF16 128 x 256 GEMM2: 44 spill instructions)
        return 0
    smem = cfg.num_stages * stage_bytes(cfg.block_m, cfg.block_n, cfg.block_k, a_bytes, _weight_bytes(weight_format), 1)
    return 2 if 2 * smem <= 200 * 1024 else 1


def fp8_fast_accum_variant(cfg: MoEKernelConfig, gated: bool) -> MoEKernelConfig:
    """``cfg`` with FP8 accumulation in the tensor cores on both GEMMs and, for compute-bound
    tiles (block_m >= 128), the weight tiles it frees the registers for: 256 rows for GEMM2 and a
    non-gated GEMM1 (a gated GEMM1 already holds 2 x block_n rows); a warp-specialized GEMM (which
    always promotes) as its :func:`triton_tile`. The candidate the tuner tries with
    ``--fp8-fast-accum`` and the harness peer ``fusedmoe-fastacc`` measures."""
    wide = cfg.block_m >= 128
    cfg = MoEKernelConfig(triton_tile(cfg.gemm1), triton_tile(cfg.gemm2), atomic_combine=cfg.atomic_combine)
    g1 = dataclasses.replace(cfg.gemm1, fp8_fast_accum=True,
                             block_n=cfg.gemm1.block_n * (2 if wide and not gated else 1))
    g2 = dataclasses.replace(cfg.gemm2, fp8_fast_accum=True, block_n=cfg.gemm2.block_n * (2 if wide else 1))
    return MoEKernelConfig(g1, g2, atomic_combine=cfg.atomic_combine)


_MOE_CONFIG_CACHE: Dict[Any, "MoEKernelConfig"] = {}
_MOE_CONFIG_CACHE_SIZE = 4096


def _table_intermediate(tbl: TunedTable, M_tokens: int, H: int, I_pad: int, E_loc: int, fmt: Format,
                        act: Activation, device_name: str, num_sms: Optional[int] = None) -> int:
    """The intermediate size to look the tuned table up with: ``I_pad``, or -- when the table has
    no entry at ``I_pad`` but one at ``I_pad`` rounded up to 128 -- that one. Weights built
    without the non-gated 128-alignment padding (``ExpertWeights`` from unpadded tensors, as the
    shared harness does for Nemotron's I = 1856) then get the configs tuned for the padded shape
    (I_pad = 1920: the same tiles, one masked tail), not the heuristic."""
    up = -(-I_pad // 128) * 128
    if up == I_pad:
        return I_pad

    def has(i: int) -> bool:
        return table_nearest(tbl, device_name, num_sms, weight_format=fmt, activation=act, gemm="gemm2", N=H, K=i,
                             E=E_loc, tokens=M_tokens) is not None

    return up if not has(I_pad) and has(up) else I_pad


def choose_moe_config(
    M_tokens: int,
    hidden_size: int,
    intermediate_size_padded: int,
    E_loc: int,
    top_k: int,
    weight_format: Union[Format, str],
    activation: Union[Activation, str],
    device_name: str,
    *,
    override: Union[MoEKernelConfig, Mapping[str, Any], None] = None,
    table: Optional[TunedTable] = None,
    num_sms: Optional[int] = None,
) -> MoEKernelConfig:
    """Both GEMM configs of one forward (sharing block_m).

    ``override``: a MoEKernelConfig, or a dict with optional keys ``gemm1``/``gemm2`` (KernelConfig
    or dict) and ``atomic_combine``; missing GEMM configs come from the table/heuristic with the
    given one's block_m.
    """
    if isinstance(override, MoEKernelConfig):
        fmt = weight_format if isinstance(weight_format, Format) else Format(str(weight_format))
        for name, g in (("gemm1", override.gemm1), ("gemm2", override.gemm2)):
            _refuse_uncompilable(name, g, fmt)
        return override
    if override is None and table is None:
        # the per-call path (eager forwards): the same shape and token count give the same answer
        # until the active table changes, so it is computed once (~25 us of Python per call saved)
        tbl = _default_table()
        key = (M_tokens, hidden_size, intermediate_size_padded, E_loc, top_k, weight_format, activation,
               device_name, num_sms, id(tbl), tbl._version)
        hit = _MOE_CONFIG_CACHE.get(key)
        if hit is None:
            if len(_MOE_CONFIG_CACHE) >= _MOE_CONFIG_CACHE_SIZE:
                _MOE_CONFIG_CACHE.clear()
            hit = _MOE_CONFIG_CACHE[key] = choose_moe_config(
                M_tokens, hidden_size, intermediate_size_padded, E_loc, top_k, weight_format, activation,
                device_name, table=tbl, num_sms=num_sms)
        return hit
    ov = dict(override or {})
    unknown = set(ov) - {"gemm1", "gemm2", "atomic_combine"}
    if unknown:
        raise ValueError(f"config: unknown keys {sorted(unknown)}; expected gemm1, gemm2, atomic_combine")
    act = activation if isinstance(activation, Activation) else Activation(str(activation))
    fmt = weight_format if isinstance(weight_format, Format) else Format(str(weight_format))
    i_key = _table_intermediate(table if table is not None else _default_table(), M_tokens, hidden_size,
                                intermediate_size_padded, E_loc, fmt, act, device_name, num_sms)
    m1 = i_key * (2 if act.is_gated else 1)
    common = dict(table=table, num_sms=num_sms)
    g1 = choose_config(M_tokens, m1, hidden_size, E_loc, top_k, fmt, "gemm1", device_name, activation=act,
                       override=ov.get("gemm1"), **common)
    g2 = choose_config(M_tokens, hidden_size, i_key, E_loc, top_k, fmt, "gemm2", device_name,
                       activation=act, override=ov.get("gemm2"), **common)
    if g1.block_m != g2.block_m:
        # keep the one that was asked for (override) or gemm1's; re-derive the other's block_m
        if ov.get("gemm2") is not None and ov.get("gemm1") is None:
            g1 = with_block_m(g1, g2.block_m)
        else:
            g2 = with_block_m(g2, g1.block_m)
    # what was asked for is refused if it cannot compile; what was chosen (table, heuristic, a
    # block_m taken over from the other GEMM) is moved to a config that does
    g1 = _refuse_uncompilable("gemm1", g1, fmt) if ov.get("gemm1") is not None else _compile_safe(g1, fmt)
    g2 = _refuse_uncompilable("gemm2", g2, fmt) if ov.get("gemm2") is not None else _compile_safe(g2, fmt)
    return MoEKernelConfig(g1, g2, atomic_combine=bool(ov.get("atomic_combine", False)))
