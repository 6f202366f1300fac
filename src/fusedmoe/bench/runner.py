"""The ``fusedmoe bench`` loop: ceilings once, then every case x token count x peer.

Per case (preset x weight format): weights are generated once on the device (plus copies where
all weights would fit in a few L2 caches); per token count T: several input sets (more for small
T, so that the experts touched by consecutive calls exceed 4x the L2 size), the reference output
of the first set, then for each peer: build (once per case), a correctness check of its output on
the first set against ``fm.reference_moe`` (a failed check is recorded and the point is not
timed), the timing (graph replay / events / wall clock), bytes, flops, floor and percent of
roofline. Errors and unsupported combinations are recorded and the run goes on.

Results are one JSON document (``format: fusedmoe-bench``, ``version: 1``; see
:func:`result_schema`), a rich table, and a PNG plot (:mod:`fusedmoe.bench.plot`).
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from ..config import Format, RoutingConfig
from . import roofline as rl
from .peers import PEER_NAMES, Peer, check_bound, make_peer, peer_bound, rel_errors
from .presets import (BenchCase, Preset, calibrate_static_scales, clone_weights, format_problem, make_inputs,
                      make_weights, weights_nbytes)
from .timing import l2_cache_bytes, time_calls

__all__ = ["BenchOptions", "run_bench", "write_results", "load_results", "print_results", "summarize",
           "result_schema", "RESULTS_FORMAT", "RESULTS_VERSION", "DEFAULT_TOKENS", "CPU_TOKENS"]

RESULTS_FORMAT = "fusedmoe-bench"
RESULTS_VERSION = 1
#: Token counts of a GPU run without ``--tokens``: decode, small batches, prefill.
DEFAULT_TOKENS = (1, 8, 64, 512, 4096)
#: Token counts of a CPU run without ``--tokens``.
CPU_TOKENS = (1, 4, 16)


@dataclass
class BenchOptions:
    """Everything ``fusedmoe bench`` was asked for (the CLI builds this; tests too)."""

    presets: Sequence[Preset]
    weight_formats: Sequence[Format]
    tokens: Sequence[int]
    peers: Sequence[str]
    device: str = "cuda"
    dtype: torch.dtype = torch.bfloat16
    act_format: Optional[Format] = None  # None: each weight format's natural pairing
    routing: Optional[RoutingConfig] = None  # None: each preset's own routing
    tuned_table: Any = None  # a TunedTable for the "triton" peer (None: the shipped one)
    sglang_path: Optional[str] = None
    timing: Optional[str] = None  # None: graph on CUDA, wall on a CPU
    seed: int = 0
    budget_s: Optional[float] = None  # stop starting new points after this much wall time
    check: bool = True
    quick_ceilings: bool = False
    max_sets: int = 32

    def cases(self) -> List[BenchCase]:
        out = []
        for p in self.presets:
            for wf in self.weight_formats:
                af = self.act_format or wf.natural_activation_format()
                out.append(BenchCase(p, wf, af, self.routing or p.routing_config(), self.dtype))
        return out


def result_schema() -> Dict[str, str]:
    """Field -> meaning of one record of ``results`` (also written into the JSON as ``schema``)."""
    return {
        "case": "preset/weight_format[/a:act_format]/activation",
        "preset": "preset name", "model": "model of the preset",
        "H": "K of GEMM1 (hidden or latent size)", "I": "intermediate size per expert (unpadded)",
        "I_pad": "padded intermediate size the kernels see", "E": "experts", "top_k": "experts per token",
        "activation": "expert activation", "weight_format": "weight format", "act_format": "activation format",
        "routing": "routing method", "dtype": "hidden-state dtype", "tokens": "T",
        "backend": "peer measured", "status": "ok | check_failed | unsupported | error | skipped",
        "t_us": "median microseconds per call", "t_min_us": "fastest call",
        "timing": "graph | events | wall", "reps": "timed repetitions", "calls_per_graph": "calls per graph replay",
        "nsets": "input sets rotated", "weight_copies": "weight copies rotated",
        "touched_experts": "mean distinct experts hit per call", "touched_expected": "E(1-(1-k/E)^T)",
        "bytes_per_expert": "bytes of one expert's weights incl. scales and biases",
        "bytes": "compulsory bytes per call", "flops": "2 T k H (N1 + I)",
        "tbps": "bytes / time (TB/s)", "tflops": "flops / time (TFLOP/s)",
        "floor_us": "max(bytes / mem_bw, flops / peak)", "roofline_pct": "100 floor / time",
        "max_rel": "max |out - ref| / max |ref| vs fm.reference_moe", "rms_rel": "RMS(out - ref) / RMS(ref)",
        "check": "ok | FAIL | ref (the reference itself) | skipped", "config": "kernel config (triton, sglang)",
        "config_source": "tuned | tuned(<sibling GPU>) | heuristic | tuned:<dir> | default (+ws_fp4: FP4 prefill in the "
                         "warp-specialized FP4 kernel; +ws_fp4_dec: FP4 decode in its decode kernel)",
        "note": "remarks", "error": "message",
    }


def _env(device: torch.device) -> Dict[str, Any]:
    import triton

    import fusedmoe

    env = {"fusedmoe": fusedmoe.__version__, "python": platform.python_version(), "torch": torch.__version__,
           "triton": triton.__version__, "device": str(device), "host": platform.node(),
           "triton_interpret": os.environ.get("TRITON_INTERPRET", "0") == "1",
           "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(gpu=p.name, sm=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                   gpu_mem_gib=round(p.total_memory / 2**30, 1), cuda=torch.version.cuda,
                   l2_mib=round(l2_cache_bytes(device) / 2**20, 1))
    return env


def _sets_for(device: torch.device, touched_bytes: float, max_sets: int) -> int:
    """Input sets to rotate: enough that consecutive calls touch > 4x L2 of distinct weights."""
    if device.type != "cuda":
        return 2
    l2 = l2_cache_bytes(device)
    return int(min(max_sets, max(2, math.ceil(4 * l2 / max(touched_bytes, 1)))))


def _base_record(case: BenchCase, weights_I_pad: int, T: int, backend: str) -> Dict[str, Any]:
    p = case.preset
    return {"case": case.key, "preset": p.name, "model": p.model, "H": p.hidden, "I": p.intermediate,
            "I_pad": weights_I_pad, "E": p.experts, "top_k": case.routing.top_k, "activation": p.activation.value,
            "weight_format": case.weight_format.value, "act_format": case.act_format.value,
            "routing": case.routing.method.name.lower(), "dtype": str(case.dtype).replace("torch.", ""),
            "tokens": T, "backend": backend}


def _short(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0][:300] if msg else ''}"


def run_bench(opts: BenchOptions, *, progress: Optional[Callable[[str, int], None]] = None,
              log: Callable[[str], None] = print) -> Dict[str, Any]:
    """Run the benchmark; returns the results document (see :func:`result_schema`).

    ``progress(description, advance)`` is called once per measured (case, T, peer) point;
    ``log`` receives one line per notable event (unsupported peers, errors, budget stop).
    """
    dev = torch.device(opts.device)
    t_start = time.perf_counter()
    ceil = rl.measure_ceilings(dev, quick=opts.quick_ceilings)
    peers: List[Peer] = [make_peer(n, table=opts.tuned_table, sglang_path=opts.sglang_path) for n in opts.peers]
    records: List[Dict[str, Any]] = []
    skipped_budget = 0
    for case in opts.cases():
        n_points = len(opts.tokens) * len(peers)
        why = format_problem(case.preset, case.weight_format)
        if why:
            for T in opts.tokens:
                for peer in peers:
                    records.append({**_base_record(case, 0, T, peer.name), "status": "unsupported", "error": why})
            if progress:
                progress(case.key, n_points)
            continue
        try:
            weights = make_weights(case.preset, case.weight_format, device=dev, dtype=opts.dtype, seed=opts.seed)
            weights = calibrate_static_scales(weights, case, device=dev)
        except Exception as exc:  # e.g. out of memory: report and go on
            log(f"{case.key}: could not build weights: {_short(exc)}")
            for T in opts.tokens:
                for peer in peers:
                    records.append({**_base_record(case, 0, T, peer.name), "status": "error", "error": _short(exc)})
            if progress:
                progress(case.key, n_points)
            continue
        bpe = rl.expert_bytes(case.preset.hidden, case.preset.intermediate, case.preset.gated, case.weight_format,
                              bias=case.preset.expert_bias)
        total_w = weights_nbytes(weights)
        copies = [weights]
        if dev.type == "cuda":
            n_copies = int(min(8, math.ceil(4 * l2_cache_bytes(dev) / max(total_w, 1))))
            copies += [clone_weights(weights) for _ in range(n_copies - 1)]
        runners: Dict[str, Any] = {}
        unsupported: Dict[str, str] = {}
        for peer in peers:
            why = peer.supports(case, dev)
            if why:
                unsupported[peer.name] = why
                log(f"{case.key}: {peer.name} unsupported: {why}")
                continue
            try:
                runners[peer.name] = [peer.build(case, w) for w in copies]
            except NotImplementedError as exc:
                unsupported[peer.name] = str(exc)
            except Exception as exc:
                unsupported[peer.name] = f"setup error: {_short(exc)}"
                log(f"{case.key}: {peer.name} setup failed: {_short(exc)}")
        for T in opts.tokens:
            if opts.budget_s is not None and time.perf_counter() - t_start > opts.budget_s:
                for peer in peers:
                    records.append({**_base_record(case, weights.padded_intermediate_size, T, peer.name),
                                    "status": "skipped", "error": f"time budget of {opts.budget_s:.0f} s spent"})
                skipped_budget += len(peers)
                if progress:
                    progress(f"{case.key} T={T} (budget)", len(peers))
                continue
            exp_touched = rl.expected_touched(case.preset.experts, case.routing.top_k, T)
            nsets = _sets_for(dev, exp_touched * bpe, opts.max_sets)
            sets = make_inputs(case, T, device=dev, nsets=nsets, seed=opts.seed)
            touched = sum(rl.touched_experts(s.topk.ids, case.preset.experts) for s in sets) / len(sets)
            nbytes = rl.moe_bytes(T, case.preset.hidden, touched, bpe, act_bytes=torch.finfo(opts.dtype).bits // 8)
            flops = rl.moe_flops(T, case.preset.hidden, case.preset.intermediate, case.routing.top_k, case.preset.gated)
            floor_s = rl.floor_seconds(nbytes, flops, ceil, case.act_format)
            ref_out = None
            if opts.check:
                from ..backends.reference import reference_moe

                s0 = sets[0]
                ref_out = reference_moe(s0.x, weights, s0.topk, activation=weights.activation,
                                        activation_format=case.act_format, weight_on_input=case.weight_on_input)
            for peer in peers:
                bound = (check_bound if peer.is_ours else peer_bound)(case.act_format, opts.dtype)
                rec = _base_record(case, weights.padded_intermediate_size, T, peer.name)
                rec.update(touched_experts=touched, touched_expected=exp_touched, bytes_per_expert=bpe,
                           bytes=nbytes, flops=flops, floor_us=floor_s * 1e6, nsets=nsets, weight_copies=len(copies))
                if progress:
                    progress(f"{case.key} T={T} {peer.name}", 0)
                if peer.name in unsupported:
                    rec.update(status="unsupported", error=unsupported[peer.name])
                elif peer.name not in runners:  # pragma: no cover - defensive
                    rec.update(status="error", error="no runner")
                else:
                    _measure(rec, peer, runners[peer.name], sets, ref_out, bound, dev, opts, log)
                    if rec.get("t_us"):
                        rec["tbps"] = nbytes / (rec["t_us"] * 1e-6) / 1e12
                        rec["tflops"] = flops / (rec["t_us"] * 1e-6) / 1e12
                        rec["roofline_pct"] = rl.roofline_pct(rec["t_us"] * 1e-6, floor_s)
                records.append(rec)
                if progress:
                    progress(f"{case.key} T={T} {peer.name}", 1)
            del sets, ref_out
        del runners, copies, weights
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    doc = {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "env": _env(dev), "ceilings": ceil.to_dict(),
           "options": {"presets": [p.name for p in opts.presets], "weight_formats": [f.value for f in opts.weight_formats],
                       "act_format": opts.act_format.value if opts.act_format else None,
                       "routing": repr(opts.routing) if opts.routing else None, "tokens": list(opts.tokens),
                       "peers": list(opts.peers), "dtype": str(opts.dtype).replace("torch.", ""),
                       "timing": opts.timing or ("graph" if dev.type == "cuda" else "wall"), "seed": opts.seed,
                       "budget_s": opts.budget_s},
           "schema": result_schema(), "results": records, "wall_s": time.perf_counter() - t_start}
    doc["summary"] = summarize(records)
    if skipped_budget:
        log(f"time budget spent: {skipped_budget} points skipped")
    return doc


def _measure(rec, peer: Peer, runners, sets, ref_out, bound, dev, opts: BenchOptions, log) -> None:
    """Check one peer's output on the first set, then time it (fills ``rec`` in place)."""
    r0 = runners[0]
    try:
        rec.update(r0.info(sets[0].tokens))
        out = r0(sets[0].x, sets[0].topk)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    except NotImplementedError as exc:
        rec.update(status="unsupported", error=str(exc))
        return
    except Exception as exc:
        rec.update(status="error", error=_short(exc))
        log(f"{rec['case']} T={rec['tokens']} {peer.name}: {_short(exc)}")
        return
    if peer.name == "reference" or ref_out is None:
        rec["check"] = "ref" if peer.name == "reference" else "skipped"
    else:
        mx, rms = rel_errors(out, ref_out)
        ok = mx <= bound[0] and rms <= bound[1]
        rec.update(max_rel=mx, rms_rel=rms, check="ok" if ok else "FAIL")
        if not ok:
            rec.update(status="check_failed", error=f"max_rel {mx:.2e} (bound {bound[0]:.0e}), rms_rel {rms:.2e} (bound {bound[1]:.0e})")
            log(f"{rec['case']} T={rec['tokens']} {peer.name}: CHECK FAILED, {rec['error']}")
            return
    del out
    calls = [(lambda r=runners[i % len(runners)], s=s: r(s.x, s.topk)) for i, s in enumerate(sets)]
    method = "events" if (peer.eager and dev.type == "cuda") else opts.timing
    if dev.type != "cuda":
        method = None
    try:
        tr = time_calls(calls, dev, method=method, budget_s=0.5 if peer.eager else 1.0)
    except Exception as exc:
        rec.update(status="error", error=_short(exc))
        log(f"{rec['case']} T={rec['tokens']} {peer.name}: timing failed: {_short(exc)}")
        return
    rec.update(status="ok", t_us=tr.median_s * 1e6, t_min_us=tr.min_s * 1e6, timing=tr.method, reps=tr.reps,
               calls_per_graph=tr.calls_per_graph)
    if tr.note:
        rec["note"] = tr.note


# ---- summaries ------------------------------------------------------------------------------------


def summarize(records: Sequence[Dict[str, Any]], ours: str = "triton") -> Dict[str, Any]:
    """Per backend: geometric mean of percent of roofline by token region and overall; for every
    other backend: geometric mean of ``t_other / t_ours`` (speedup of ``ours``) over the points
    both measured, by region and overall, and the worst point."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("t_us")]
    backends = sorted({r["backend"] for r in ok}, key=lambda b: (PEER_NAMES.index(b) if b in PEER_NAMES else 99, b))
    regions = [lab for lab, _ in rl.REGIONS]
    pct: Dict[str, Dict[str, Any]] = {}
    for b in backends:
        rows = [r for r in ok if r["backend"] == b]
        d = {}
        for lab in regions:
            v = [r["roofline_pct"] for r in rows if rl.region_of(r["tokens"]) == lab and r.get("roofline_pct")]
            d[lab] = {"geomean": rl.geomean(v), "n": len(v)}
        d["all"] = {"geomean": rl.geomean(r.get("roofline_pct") for r in rows), "n": len(rows)}
        pct[b] = d
    speed: Dict[str, Dict[str, Any]] = {}
    mine = {(r["case"], r["tokens"]): r["t_us"] for r in ok if r["backend"] == ours}
    for b in backends:
        if b == ours:
            continue
        pairs = [(r["case"], r["tokens"], r["t_us"] / mine[(r["case"], r["tokens"])])
                 for r in ok if r["backend"] == b and (r["case"], r["tokens"]) in mine]
        if not pairs:
            continue
        d = {}
        for lab in regions:
            v = [s for c, t, s in pairs if rl.region_of(t) == lab]
            d[lab] = {"geomean": rl.geomean(v), "n": len(v)}
        d["all"] = {"geomean": rl.geomean(s for _, _, s in pairs), "n": len(pairs)}
        worst = min(pairs, key=lambda p: p[2])
        d["worst"] = {"case": worst[0], "tokens": worst[1], "speedup": worst[2]}
        speed[b] = d
    return {"ours": ours, "regions": regions, "roofline_pct": pct, "speedup_of_ours": speed,
            "counts": {s: sum(1 for r in records if r.get("status") == s)
                       for s in ("ok", "check_failed", "unsupported", "error", "skipped")}}


# ---- JSON -------------------------------------------------------------------------------------------


def _clean(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None if math.isnan(o) else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def write_results(doc: Dict[str, Any], path: str) -> str:
    """Write the results document as JSON (non-finite floats as null / "inf"); returns the path."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        json.dump(_clean(doc), f, indent=1)
        f.write("\n")
    return path


def load_results(path: str) -> Dict[str, Any]:
    """Read a results document written by :func:`write_results` (checks format and version)."""
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != RESULTS_FORMAT:
        raise ValueError(f"{path}: not a fusedmoe bench result (format {doc.get('format') if isinstance(doc, dict) else None!r})")
    if doc.get("version") != RESULTS_VERSION:
        raise ValueError(f"{path}: results version {doc.get('version')!r}, this fusedmoe reads {RESULTS_VERSION}")
    if not isinstance(doc.get("results"), list):
        raise ValueError(f"{path}: no 'results' list")
    return doc


# ---- Markdown ---------------------------------------------------------------------------------------


def markdown_report(doc: Dict[str, Any]) -> str:
    """The results as Markdown, for BENCHMARKS-style documents: one row per case, one column per
    token count (our µs, % of roofline and ``t_peer / t_ours`` for every other backend that ran
    the point), then the region geomeans and the worst point per peer. Cases and token counts
    in the order they were measured; a point ours did not measure shows its status."""
    recs = doc["results"]
    summ = doc.get("summary") or summarize(recs)
    ours = summ.get("ours", "triton")
    cases: List[str] = []
    tokens: List[int] = []
    by: Dict[tuple, Dict[str, Dict[str, Any]]] = {}
    for r in recs:
        if r["case"] not in cases:
            cases.append(r["case"])
        if r["tokens"] not in tokens:
            tokens.append(r["tokens"])
        by.setdefault((r["case"], r["tokens"]), {})[r["backend"]] = r
    others = [b for b in summ["speedup_of_ours"]]
    ceil = doc["ceilings"]
    lines = [f"fusedmoe bench on {doc['env'].get('gpu', doc['env'].get('device', '?'))}: memory roofline "
             f"{_fmt(ceil.get('mem_gbps'), '.0f')} GB/s, BF16 {_fmt(ceil.get('bf16_tflops'), '.0f')} TFLOP/s, "
             f"FP8 {_fmt(ceil.get('fp8_tflops'), '.0f')} TFLOP/s"
             + ("" if ceil.get("meaningful") else " (CPU: wall clock, not meaningful)") + ".", "",
             f"Each cell: {ours} µs, % of roofline" + "".join(f", t_{b} / t_{ours}" for b in others) + ".", "",
             "| case | " + " | ".join(f"T={t}" for t in tokens) + " |",
             "|---|" + "---|" * len(tokens)]
    for c in cases:
        cells = []
        for t in tokens:
            pt = by.get((c, t), {})
            mine = pt.get(ours)
            if mine is None:
                cells.append("")
                continue
            if mine.get("status") != "ok" or not mine.get("t_us"):
                cells.append("n/a" if mine.get("status") == "unsupported" else str(mine.get("status")))
                continue
            cell = f"{mine['t_us']:.1f} µs, {_fmt(mine.get('roofline_pct'), '.0f')} %"
            for b in others:
                o = pt.get(b)
                if o is not None and o.get("status") == "ok" and o.get("t_us"):
                    cell += f", {o['t_us'] / mine['t_us']:.2f}x"
            cells.append(cell)
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    regions = summ["regions"]
    lines += ["", "| backend | metric | " + " | ".join(f"T {lab}" for lab in regions) + " | all |",
              "|---|---|" + "---|" * (len(regions) + 1)]
    for b, d in summ["roofline_pct"].items():
        lines.append(f"| {b} | % of roofline | " + " | ".join(
            f"{_fmt(d[lab]['geomean'], '.1f')} ({d[lab]['n']})" for lab in regions + ["all"]) + " |")
    for b, d in summ["speedup_of_ours"].items():
        lines.append(f"| {b} | t_{b} / t_{ours} | " + " | ".join(
            f"{_fmt(d[lab]['geomean'], '.2f')} ({d[lab]['n']})" for lab in regions + ["all"]) + " |")
    for b, d in summ["speedup_of_ours"].items():
        w = d.get("worst")
        if w:
            lines.append(f"\nWorst point against {b}: {w['case']} at {w['tokens']} tokens, {w['speedup']:.2f}x.")
    return "\n".join(lines) + "\n"


def write_markdown(doc: Dict[str, Any], path: str) -> str:
    """Write :func:`markdown_report` to ``path``; returns the path."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        f.write(markdown_report(doc))
    return path


# ---- table ------------------------------------------------------------------------------------------


def _fmt(v, spec: str, dash: str = "-") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return dash
    return format(v, spec)


def print_results(doc: Dict[str, Any], console=None) -> None:
    """The results table (one row per case x T x backend), the ceilings and the summary."""
    from .table import print_table

    recs = doc["results"]
    ceil = doc["ceilings"]
    ours = doc.get("summary", {}).get("ours", "triton")
    t_ours = {(r["case"], r["tokens"]): r["t_us"] for r in recs
              if r["backend"] == ours and r.get("status") == "ok" and r.get("t_us")}
    rows = []
    for r in recs:
        st = r.get("status")
        t = r.get("t_us") if st == "ok" else None
        if r["backend"] != ours and t and (r["case"], r["tokens"]) in t_ours:
            ratio = f"{t / t_ours[(r['case'], r['tokens'])]:.2f}x"
        else:
            ratio = ""
        if st == "ok":
            status = r.get("check", "ok")
        elif st == "unsupported":
            status = "n/a"
        else:
            status = st.upper()
        rows.append([r["case"], str(r["tokens"]), _fmt(r.get("touched_experts"), ".1f"), r["backend"],
                     _fmt(t, ",.1f"), _fmt(r.get("tbps"), ".2f"), _fmt(r.get("tflops"), ".1f"),
                     _fmt(r.get("roofline_pct"), ".1f"), ratio,
                     _fmt(r.get("rms_rel"), ".1e", ""), status])
    meaningful = ceil.get("meaningful", False)
    title = (f"fusedmoe bench on {doc['env'].get('gpu', doc['env']['device'])}"
             + ("" if meaningful else "  [CPU: wall clock, ceilings NOT meaningful]"))
    print_table(title, ["case", "T", "experts hit", "backend", "µs", "TB/s", "TFLOP/s", "% roofline",
                        f"t / t_{ours}", "rms err", "check"], rows, console=console)
    fp8 = ceil.get("fp8_tflops")
    print(f"ceilings: copy {ceil['copy_gbps']:.0f} GB/s, read {ceil['read_gbps']:.0f} GB/s (memory roofline "
          f"{ceil['mem_gbps']:.0f} GB/s), BF16 {ceil['bf16_tflops']:.0f} TFLOP/s, FP8 "
          f"{'-' if fp8 is None else f'{fp8:.0f}'} TFLOP/s" + ("" if meaningful else " -- not meaningful on a CPU"))
    for n in ceil.get("notes", []):
        print(f"  note: {n}")
    summ = doc.get("summary") or summarize(recs)
    regions = summ["regions"]
    srows = []
    for b, d in summ["roofline_pct"].items():
        srows.append([b, "% of roofline"] + [_fmt(d[lab]["geomean"], ".1f") + f" ({d[lab]['n']})" for lab in regions]
                     + [_fmt(d["all"]["geomean"], ".1f") + f" ({d['all']['n']})"])
    for b, d in summ["speedup_of_ours"].items():
        srows.append([b, f"speedup of {ours}"] + [_fmt(d[lab]["geomean"], ".2f") + f" ({d[lab]['n']})" for lab in regions]
                     + [_fmt(d["all"]["geomean"], ".2f") + f" ({d['all']['n']})"])
    if srows:
        print_table("geometric means by token region (points)", ["backend", "metric", *[f"T {lab}" for lab in regions], "all"],
                    srows, console=console)
    for b, d in summ["speedup_of_ours"].items():
        w = d.get("worst")
        if w:
            print(f"  worst point vs {b}: {w['case']} T={w['tokens']}: {w['speedup']:.2f}x")
    bad = [r for r in recs if r.get("status") in ("check_failed", "error")]
    for r in bad:
        print(f"  {r['status'].upper()}: {r['case']} T={r['tokens']} {r['backend']}: {r.get('error', '')}")
    uns = {}
    for r in recs:
        if r.get("status") == "unsupported":
            uns.setdefault((r["backend"], r.get("error", "")), set()).add(r["case"])
    for (b, why), cases in sorted(uns.items()):
        print(f"  {b} not measured on {', '.join(sorted(cases))}: {why}")
