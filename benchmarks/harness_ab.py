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
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="peers.jsonl of each run")
    print(table(ap.parse_args(argv).runs))


if __name__ == "__main__":
    main()
