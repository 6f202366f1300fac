"""Timing of one measured call: CUDA-graph replay, CUDA events, or the wall clock on a CPU.

``calls`` is a list of zero-argument callables, one per input set (and weight copy); consecutive
calls rotate through them so that they touch different experts and weights do not stay in L2.

* ``graph`` (CUDA default): R calls (R ~ 2 ms / the call's time, 1..32, rotating) are captured in
  one CUDA graph; each replay is timed with CUDA events; time = median over replays / R. This
  removes the Python and launch overhead between calls, as a serving engine's graphs do.
* ``events`` (CUDA; peers that synchronize the host, and the fallback when capture fails): each
  call timed with CUDA events after the L2 cache is flushed by writing a buffer twice its size.
* ``wall`` (CPU): ``time.perf_counter`` around each call; a plumbing check, not a measurement.

Every mode warms up first (compilation, autotuning and allocator growth stay out of the numbers)
and reports the median and the minimum.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import torch

__all__ = ["TimingResult", "time_calls", "l2_cache_bytes"]


@dataclass
class TimingResult:
    """Seconds per call (median and min over repetitions) and how they were obtained."""

    median_s: float
    min_s: float
    reps: int
    method: str  # graph | events | wall
    calls_per_graph: int = 1
    note: str = ""


def l2_cache_bytes(device) -> int:
    """L2 size of a CUDA device (50 MiB assumed where torch does not report it); 0 on a CPU."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return 0
    props = torch.cuda.get_device_properties(dev)
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def _time_wall(calls: Sequence[Callable[[], object]], *, warmup: int, reps: int, budget_s: float) -> TimingResult:
    for i in range(warmup):
        calls[i % len(calls)]()
    ts: List[float] = []
    t_end = time.perf_counter() + budget_s
    for i in range(reps):
        t0 = time.perf_counter()
        calls[i % len(calls)]()
        ts.append(time.perf_counter() - t0)
        if time.perf_counter() > t_end and len(ts) >= 3:
            break
    return TimingResult(_median(ts), min(ts), len(ts), "wall")


def _time_events(calls, device, *, warmup: int, reps: int, budget_s: float, note: str = "") -> TimingResult:
    flush = torch.empty(max(2 * l2_cache_bytes(device), 1 << 20), dtype=torch.int8, device=device)
    for i in range(warmup):
        calls[i % len(calls)]()
    torch.cuda.synchronize(device)
    ts: List[float] = []
    t_end = time.perf_counter() + budget_s
    for i in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        calls[i % len(calls)]()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
        if time.perf_counter() > t_end and len(ts) >= 5:
            break
    return TimingResult(_median(ts), min(ts), len(ts), "events", note=note)


def _time_graph(calls, device, *, warmup: int, reps: int, budget_s: float, target_graph_s: float) -> TimingResult:
    for i in range(max(warmup, len(calls))):
        calls[i % len(calls)]()
    torch.cuda.synchronize(device)
    # rough time of one call, to size the graph
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for c in calls:
        c()
    e.record()
    e.synchronize()
    est = max(s.elapsed_time(e) / 1e3 / len(calls), 1e-6)
    R = int(min(32, max(1, round(target_graph_s / est))))
    R = max(R, min(len(calls), 32))
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):  # warm the side stream (allocator, cuBLAS handles)
        for i in range(min(R, len(calls))):
            calls[i]()
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(R):
            calls[i % len(calls)]()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize(device)
    ts: List[float] = []
    t_end = time.perf_counter() + budget_s
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3 / R)
        if time.perf_counter() > t_end and len(ts) >= 10:
            break
    del graph
    return TimingResult(_median(ts), min(ts), len(ts), "graph", calls_per_graph=R)


def time_calls(calls: Sequence[Callable[[], object]], device, *, method: Optional[str] = None, warmup: int = 3,
               reps: Optional[int] = None, budget_s: float = 1.0, target_graph_s: float = 2e-3) -> TimingResult:
    """Time ``calls`` (rotating) on ``device``. ``method``: None = graph on CUDA, wall on a CPU;
    "events" for calls that synchronize the host. A failed graph capture falls back to events
    (``note`` says so). ``reps`` defaults to 100 (graph), 50 (events), 5 (wall); ``budget_s``
    stops repeating early once that much wall time is spent."""
    if not calls:
        raise ValueError("time_calls needs at least one call")
    dev = torch.device(device)
    if dev.type != "cuda":
        if method not in (None, "wall"):
            raise ValueError(f"timing method {method!r} needs a CUDA device; a CPU is timed with the wall clock")
        return _time_wall(calls, warmup=min(warmup, 1), reps=reps or 5, budget_s=budget_s)
    if method in (None, "graph"):
        try:
            return _time_graph(calls, dev, warmup=warmup, reps=reps or 100, budget_s=budget_s,
                               target_graph_s=target_graph_s)
        except Exception as exc:  # capture unsupported by the peer: time it eagerly instead
            torch.cuda.synchronize(dev)
            note = f"graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:100]}); timed with events"
            return _time_events(calls, dev, warmup=1, reps=reps or 50, budget_s=budget_s, note=note)
    if method == "events":
        return _time_events(calls, dev, warmup=warmup, reps=reps or 50, budget_s=budget_s)
    raise ValueError(f"unknown timing method {method!r}; expected graph, events or wall")
