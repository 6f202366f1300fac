"""In-process A/B of launch-level settings of the triton backend at decode (H200): one CUDA graph per setting,
rounds interleaved, the same weights and inputs for every setting.

    PYTHONPATH=src python3 benchmarks/decode_ab.py --preset gpt-oss-120b,qwen3-30b-a3b \
        --weight-format mxfp4,bf16 --tokens 1,8,64 --settings default,noalzero [--rounds 3]

Settings: ``default`` (the code's defaults, the reference of the ratios) and the names of ``SETTINGS``, each the
defaults with one switch of ``fusedmoe.backends.triton_moe`` changed (``noalzero``: ``set_align_zero_fill(False)``,
...). Each point prints the median µs per call of every setting (``fusedmoe.bench.timing.time_calls``: a graph of
rotating input sets whose routings hit different experts), the best of the rounds, its ratio to ``default`` and the
TB/s of the touched expert bytes. Not a benchmark of record (that is ``fusedmoe bench`` / the shared harness): a
same-process A/B with less noise between settings.
"""
import argparse
import contextlib
import statistics

import torch

from fusedmoe.backends import triton_moe
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.presets import (BenchCase, calibrate_static_scales, get_preset, make_inputs, make_weights,
                                    weights_nbytes, with_activation)
from fusedmoe.bench.timing import time_calls
from fusedmoe.config import Format


def _ws4_stages(n: int) -> tuple:
    """``set_ws_fp4_decode``'s arguments as the switch stands (its environment variables included), ``n`` ring
    stages."""
    cur = triton_moe.ws_fp4_decode_settings()
    return cur[:2] + (n,) + cur[3:]


# name -> (setter of fusedmoe.backends.triton_moe, value): each setting is the defaults with that one change (a
# tuple: the setter's arguments; a callable: called for them when the setting is applied)
SETTINGS = {"noalzero": ("set_align_zero_fill", False), "nopdl": ("set_programmatic_dependent_launch", False),
            # the decode align lets the next grid launch only as it exits (the default since s40: right at its wait)
            "noaltrig": ("set_align_early_trigger", False),
            # no tuned entries of a sibling GPU (an H100 SXM: the heuristic, not the H200's entries)
            "nosib": ("set_table_siblings", False),
            "fusecomb": ("set_fused_combine", 1 << 30), "notrim": ("set_trim_stages", False),
            "noscalerun": ("set_scale_runs", False),
            # the 16-bit / FP8 warp-specialized prefill GEMMs' A rows by cp.async, no gather launch (s43)
            "wsxg": ("set_ws_x_gather", True),  # ... forced on for every such GEMM (the default: "auto", the rule)
            "nowsxg": ("set_ws_x_gather", False),  # ... off: every such GEMM's rows by a gather launch
            # ... their tiles by a global counter (s44; the default, "auto", since s45: FP8 with >= 64 experts, and
            # since s46 the FP4 prefill GEMMs' MXFP4 / NVFP4 with >= 64 experts too)
            # 16-bit weights' warp-specialized GEMMs skip a block's all-padding half as FP8 does (s50)
            "ws16skip": ("set_ws_skip_padding_half_16bit", True),
            "wsdyn": ("set_ws_dynamic_tiles", True), "nowsdyn": ("set_ws_dynamic_tiles", False),
            # the FP4 warp-specialized prefill GEMMs (MXFP4 x BF16, block_m >= 128): off, or 128- / 256-token tiles
            "nows4": ("set_ws_fp4", False), "ws4bt128": ("set_ws_fp4", (True, 128)),
            "ws4bt256": ("set_ws_fp4", (True, 256)),
            # (thirty-second session: chunks by format -- MXFP4 2, NVFP4 1 --, the padded hand-off and NVFP4 from 64
            # rows an expert are the defaults)
            "ws4skip": ("set_ws_fp4_skip_half", True),  # 256-token tiles skip an all-padding half (MXFP4's default)
            "ws4whole": ("set_ws_fp4_chunks", 1),  # whole 256-token tiles
            "ws4pad": ("set_ws_fp4_padded", True),  # the prefill GEMMs' padded hand-off (the default)
            "nows4pad": ("set_ws_fp4_padded", False),  # ... off: GEMM2's rows by a gather
            "ws4ahead": ("set_ws_fp4_scales_ahead", True),  # the FP4 prefill block scales a K step ahead (default)
            "nows4ahead": ("set_ws_fp4_scales_ahead", False),  # ... off: each step's scales loaded after its wait
            "ws4ch4": ("set_ws_fp4_chunks", 4),  # 256-token tiles in 64-row chunks, only those with real rows
            # ... the real chunks joined into wgmmas as wide as they are, 256-token tiles from 64 rows an expert (the
            # default since s42); off: chunks by format, 256-token tiles from 128 rows an expert
            "ws4join": ("set_ws_fp4_join", True), "nows4join": ("set_ws_fp4_join", False),
            # the FP4 prefill kernel's block scales through its ring (fifty-eighth session, opt-in); and off
            "ws4ss": ("set_ws_fp4_scales_smem", True), "nows4ss": ("set_ws_fp4_scales_smem", False),
            # a gated prefill tile's halves stored by one store (fifty-eighth session, opt-in); and off
            "ws4one": ("set_ws_fp4_one_store", True), "nows4one": ("set_ws_fp4_one_store", False),
            # two 64-wide K steps a ring slot of the prefill kernel's 128-token tiles (sixtieth session, the default
            # since; with ws4bt128 where the rule picks 256-token tiles); and one step a slot everywhere
            "ws4bk128": ("set_ws_fp4_block_k", 128), "ws4bk64": ("set_ws_fp4_block_k", 64),
            # ... and 128-token tiles in two joined 64-row chunks (the default since the sixtieth session); and off
            "ws4j128": ("set_ws_fp4_join128", True), "nows4j128": ("set_ws_fp4_join128", False),
            # the FP4 prefill GEMMs' K in the pair order: no byte permutes after the converter (s61; "auto", the
            # default: non-gated layers); every layer, none
            "ws4pairs": ("set_ws_fp4_pair_order", True), "nows4pairs": ("set_ws_fp4_pair_order", False),
            "ws4nv": ("set_ws_fp4_nvfp4", True),  # NVFP4 weights in the same kernel at prefill tiles (the default)
            "ws4nvall": ("set_ws_fp4_nvfp4", (True, 0)),  # ... at any rows an expert (the default since s62)
            "ws4nv64": ("set_ws_fp4_nvfp4", (True, 64)),  # ... from 64 rows an expert (the rule of s32-s61)
            "nows4nv": ("set_ws_fp4_nvfp4", False),  # NVFP4 weights in the Triton GEMMs
            # the FP4 prefill kernel also from this many rows per local expert where the config has smaller Triton
            # tiles (s62, opt-in: set_ws_fp4_min_rows)
            **{f"ws4from{n}": ("set_ws_fp4_min_rows", n) for n in (8, 16, 24, 32)},
            # the FP4 decode kernel at every token count (by default one-token calls only, with the scales through
            # the ring and per-thread release since the thirty-fifth session): the thirty-first session's kernel, 3
            # programs an SM, 8 stages, bk 128, global scale loads, warpgroup release
            "ws4dec": ("set_ws_fp4_decode", (True, 3, 8, 128, True, False, False)),
            "ws4dec2": ("set_ws_fp4_decode", (True, 2, 8, 128, True, False, False)),  # the same, 2 programs an SM
            # ... GEMM1's token rows by a gather launch and TMA boxes (the default: cp.async from the align launch's
            # dot-order copy of hidden, thirty-third session)
            "ws4dectma": ("set_ws_fp4_decode", (True, 3, 8, 128, False, False, False)),
            "ws4dec4": ("set_ws_fp4_decode", (True, 4, 8, 128, True, False, False)),  # 4 programs an SM (64 registers)
            # ... the block scales through the ring
            "ws4decs": ("set_ws_fp4_decode", (True, 3, 8, 128, True, True, False)),
            "ws4dec4s": ("set_ws_fp4_decode", (True, 4, 8, 128, True, True, False)),  # ... both
            # ... and every consumer thread freeing the ring slots (no warpgroup barriers around the release)
            "ws4decsr": ("set_ws_fp4_decode", (True, 3, 8, 128, True, True, True)),
            "ws4dec4sr": ("set_ws_fp4_decode", (True, 4, 8, 128, True, True, True)),
            # the Triton decode GEMMs at every token count (the default runs one-token FP4 calls in the decode kernel)
            "nows4dec": ("set_ws_fp4_decode", False),
            # the FP4 decode kernel's GEMM2 waits for GEMM1 before its first weights (the default since s52: they go
            # out before the wait; "ws4earlyw" forces that on)
            "nows4earlyw": ("set_ws_fp4_decode_early_weights", False),
            "ws4earlyw": ("set_ws_fp4_decode_early_weights", True),
            # the FP4 decode kernel's units over the align's block bound, not its num_post_padded (fifty-third
            # session; the default since: "nows4mstatic" turns it off)
            "ws4mstatic": ("set_ws_fp4_decode_static_blocks", True),
            "nows4mstatic": ("set_ws_fp4_decode_static_blocks", False),
            # the FP4 decode kernel's default range (one token) at n ring stages (fifty-third session: 4, the default
            # since, against the 8 before)
            **{f"ws4st{n}": ("set_ws_fp4_decode", lambda n=n: _ws4_stages(n)) for n in (2, 3, 4, 5, 6, 8)},
            # the 16-bit / FP8 decode kernel (opt-in): 2 programs an SM, stages that fit; 1 / 3 programs; 2 blocks a step
            "wsdec": ("set_ws_decode", True), "wsdec1": ("set_ws_decode", (True, 1)),
            "wsdec3": ("set_ws_decode", (True, 3)), "wsdec2b": ("set_ws_decode", (True, 2, 0, 2)),
            "wsdec4": ("set_ws_decode", (True, 4)),  # 4 programs an SM (64 registers; thirty-third session)
            # every consumer thread frees the ring slots (thirty-third session); with the tuned table's entries too
            "wsdecr": ("set_ws_decode", (True, 2, 0, 1, True, False, True)),
            "tabler": ("set_ws_decode", (False, 2, 0, 1, True, False, True)),  # only the table's decode entries
            "wsdectma": ("set_ws_decode", (True, 2, 0, 1, False)),  # its token rows by a gather launch and TMA
            "wsdecfused": ("set_ws_decode", (True, 2, 0, 1, True, True)),  # both GEMMs in one launch
            # activations in the dot order at decode tiles too (measured only; prefill-only opt-in in the library)
            "dot2dec": ("set_act_dot_order", (False, True, ("mxfp4", "nvfp4"), 16)),
            "dotdec": ("set_act_dot_order", (True, True, ("mxfp4", "nvfp4"), 16))}


# name -> the GPU whose tuned-table entries the backend looks up instead of this one's (the name the table's
# ``device`` field holds; a point without such an entry falls back as on that GPU: the sibling's entry, else the
# heuristic). An H200 session can so measure the H100 table's entries -- tuned fifteen sessions later -- at the
# layer in one process (the other traits the name implies are the same Hopper ones; the SM count stays this GPU's).
TABLE_DEVICES = {"tabh100": "NVIDIA H100 80GB HBM3", "tabh200": "NVIDIA H200"}


@contextlib.contextmanager
def _table_device(name: str):
    prev = triton_moe._device_info

    def info(device):
        dev_name, sms = prev(device)
        return (name if device.type == "cuda" else dev_name), sms

    triton_moe._device_info = info
    try:
        yield
    finally:
        triton_moe._device_info = prev


@contextlib.contextmanager
def _setting(name: str):
    if name == "default":
        yield
        return
    if name in TABLE_DEVICES:
        with _table_device(TABLE_DEVICES[name]):
            yield
        return
    if "+" in name:  # several settings at once: "ws4rega+ws4ch4"
        with contextlib.ExitStack() as stack:
            for part in name.split("+"):
                stack.enter_context(_setting(part))
            yield
        return
    setter, value = SETTINGS[name]
    fn = getattr(triton_moe, setter)
    if callable(value):
        value = value()
    prev = fn(*value) if isinstance(value, tuple) else fn(value)  # a tuple: the setter's arguments
    try:
        yield
    finally:
        fn(*prev) if isinstance(prev, tuple) else fn(prev)


def _touched_bytes(w, topk, E: int) -> int:
    """Bytes of the experts hit by one input set (``weights_nbytes`` per expert: values, scales, biases)."""
    return torch.unique(topk.ids.reshape(-1)).numel() * weights_nbytes(w) // E


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen3-30b-a3b")
    ap.add_argument("--weight-format", default="bf16")
    ap.add_argument("--tokens", default="1,8")
    ap.add_argument("--activation", default=None,
                    help="run every preset's shape with this expert activation instead of its model's "
                         "(e.g. relu2: the shared harness's non-gated cases of the gated models)")
    ap.add_argument("--settings", default="default,noalzero")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nsets", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=0.5, help="timing budget of one setting in one round")
    ap.add_argument("--device", default="cuda", help="cpu: a plumbing check (TRITON_INTERPRET=1, --preset tiny)")
    a = ap.parse_args()
    settings = a.settings.split(",")
    for s in settings:
        if s != "default" and not all(part in SETTINGS or part in TABLE_DEVICES for part in s.split("+")):
            known = sorted(SETTINGS) + sorted(TABLE_DEVICES)
            raise SystemExit(f"unknown setting {s!r}; expected default or some of {known} (joined by +)")
    if "default" not in settings:
        settings.insert(0, "default")
    dev = torch.device(a.device)
    print(f"{'preset':18s} {'w':6s} {'T':>4s} " + " ".join(f"{s:>11s}" for s in settings) + "   ratios default/x"
          "   TB/s(default)", flush=True)
    for pname in a.preset.split(","):
        p = with_activation(get_preset(pname), a.activation)
        pname = p.name  # "<preset>:<activation>" with --activation
        for fname in a.weight_format.split(","):
            fmt = Format(fname)
            af = fmt.natural_activation_format()  # as fusedmoe bench: FP8 per tensor with calibrated static scales
            case = BenchCase(p, fmt, af, p.routing_config())
            try:
                w = make_weights(p, fmt, device=dev)
            except ValueError as exc:  # a format the preset's shapes do not allow
                print(f"{pname:18s} {fname:6s} skipped: {exc}", flush=True)
                continue
            w = calibrate_static_scales(w.for_activation_format(af), case, device=dev)
            for T in (int(t) for t in a.tokens.split(",")):
                sets = make_inputs(case, T, device=dev, nsets=a.nsets)
                calls = [lambda s=s, w=w: run_weights(s.x, w, s.topk, activation_format=af) for s in sets]
                ts = {s: [] for s in settings}
                for _ in range(a.rounds):
                    for s in settings:
                        with _setting(s):
                            ts[s].append(time_calls(calls, dev, budget_s=a.budget_s).median_s * 1e6)
                best = {s: min(v) for s, v in ts.items()}
                med = {s: statistics.median(v) for s, v in ts.items()}
                nbytes = statistics.mean(_touched_bytes(w, s.topk, p.experts) for s in sets)
                print(f"{pname:18s} {fname:6s} {T:4d} " + " ".join(f"{med[s]:11.1f}" for s in settings) + "   "
                      + " ".join(f"{med['default'] / med[s]:5.3f}" for s in settings if s != "default")
                      + f"   {nbytes / med['default'] / 1e6:5.2f}   (best of rounds: "
                      + " ".join(f"{best[s]:.1f}" for s in settings) + ")", flush=True)
            del w
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
