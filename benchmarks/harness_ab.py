"""Side by side: several shared-harness runs (each a variant of fusedmoe run in its own invocation
next to SGLang), per point the plugin peer's time and its speed ratio to that run's SGLang.

    python3 benchmarks/harness_ab.py results/.../hA/peers.jsonl results/.../hB/peers.jsonl [...]

Each run's own SGLang time is the yardstick (the invocations do not share a process, so the ratio
cancels most of the drift between them); the last line is the geometric mean ratio of each run over
the points every run has.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_harness import load  # noqa: E402


def table(paths):
    runs = []
    for p in paths:
        pts = {}
        for r in load(p):
            pts.setdefault((r["model"], r["act"], r["dtype"], r["M"]), {})[r["peer"]] = r["t_ms"] * 1e3
        runs.append(pts)
    keys = sorted(set().union(*runs), key=lambda k: (k[2], k[0], k[1], k[3]))
    names = [os.path.basename(os.path.dirname(os.path.abspath(p))) or p for p in paths]
    lines = [f"{'point':44s}" + "".join(f"{n:>24s}" for n in names)]
    logs = [[] for _ in runs]
    for k in keys:
        row, ratios = f"{'/'.join(map(str, k)):44s}", []
        for pts in runs:
            peers = pts.get(k, {})
            sg = peers.get("sglang")
            ours = [t for n, t in peers.items() if n != "sglang"]
            if sg and ours:
                ratios.append(sg / ours[0])
                row += f"{ours[0]:11.1f} us {sg / ours[0]:6.3f}x  "
            else:
                ratios.append(None)
                row += " " * 24
        if all(r is not None for r in ratios):
            for i, r in enumerate(ratios):
                logs[i].append(math.log(r))
        lines.append(row)
    geo = "".join(f"{math.exp(sum(g) / len(g)):>23.3f}x" if g else " " * 24 for g in logs)
    lines.append(f"{'geomean ratio to SGLang (common points)':44s}" + geo)
    # by token region: each run's ratio to its SGLang, and the first run's speedup over each run
    # (t_run / t_first: the same points, no SGLang in between)
    for lo, hi in ((1, 8), (9, 128), (129, 1024), (1025, 99999)):
        common = [k for k in keys if lo <= k[3] <= hi and all(
            pts.get(k, {}).get("sglang") and any(n != "sglang" for n in pts.get(k, {})) for pts in runs)]
        if not common:
            continue
        def ours(pts, k):
            return next(t for n, t in pts[k].items() if n != "sglang")
        vs_sg = "".join(f"{math.exp(sum(math.log(pts[k]['sglang'] / ours(pts, k)) for k in common) / len(common)):>23.3f}x"
                        for pts in runs)
        vs_first = "".join(f"{math.exp(sum(math.log(ours(pts, k) / ours(runs[0], k)) for k in common) / len(common)):>23.3f}x"
                           for pts in runs)
        lines.append(f"{f'tokens {lo}-{hi}: ratio to SGLang ({len(common)} points)':44s}" + vs_sg)
        lines.append(f"{f'tokens {lo}-{hi}: t_run / t_first':44s}" + vs_first)
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="peers.jsonl of each run")
    print(table(ap.parse_args(argv).runs))


if __name__ == "__main__":
    main()
