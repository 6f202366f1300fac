"""Plot a shared-harness run (peers.jsonl): percent of roofline against tokens, one panel per case.

    python3 benchmarks/plot_harness.py benchmarks/results/h200-2026-11-29/peers.jsonl [-o out.png]

One line per peer (SGLang's Triton fused MoE, fusedmoe, and any other peer in the file); the
panel title gives the geometric-mean speedup of fusedmoe over SGLang on that case. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections import defaultdict


def load(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("kind") == "moe" and r.get("status") == "ok" and r.get("t_ms")]


def plot(rows, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = []
    for r in rows:
        name = f"{r['model']}/{r['act']}/{r['dtype']}"
        if name not in cases:
            cases.append(name)
    by = defaultdict(dict)
    for r in rows:
        by[f"{r['model']}/{r['act']}/{r['dtype']}"].setdefault(r["peer"], []).append((r["M"], r["roofline_pct"], r["t_ms"]))
    cols = 5
    nrows = math.ceil(len(cases) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.4 * cols, 2.6 * nrows), squeeze=False)
    style = {"sglang": ("C3", "D"), "fusedmoe": ("C0", "o")}
    for i, case in enumerate(cases):
        ax = axes[i // cols][i % cols]
        for peer, pts in sorted(by[case].items()):
            pts.sort()
            c, m = style.get(peer, (None, "."))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=m, color=c, ms=3, lw=1, label=peer)
        sg = {M: t for M, _, t in by[case].get("sglang", [])}
        fm = {M: t for M, _, t in by[case].get("fusedmoe", [])}
        both = [M for M in fm if M in sg]
        sp = math.exp(sum(math.log(sg[M] / fm[M]) for M in both) / len(both)) if both else float("nan")
        ax.set_title(f"{case}\nfusedmoe {sp:.2f}x sglang", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 110)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
        if i % cols == 0:
            ax.set_ylabel("% of roofline", fontsize=8)
        if i == 0:
            ax.legend(fontsize=7)
    for j in range(len(cases), nrows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl")
    ap.add_argument("-o", "--out", default=None, help="PNG path (default: next to the input, peers.png)")
    args = ap.parse_args(argv)
    rows = load(args.jsonl)
    if not rows:
        raise SystemExit(f"{args.jsonl}: no measured MoE points")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.jsonl)), "peers.png")
    print(plot(rows, out, "shared harness on the H200: % of roofline vs tokens (x: tokens, log2)"))


if __name__ == "__main__":
    main()
