"""The harness run was cut off after 112 of 175 points (its 250 s timeout): geomean % of roofline by region over the
points both this run and the forty-fourth session's (call2/h.tgz) measured, and every FP8 prefill point.
Usage: python3 same_points.py <s45 peers.jsonl> <s44 peers.jsonl>"""
import json
import math
import sys


def load(p):
    r = {}
    for line in open(p):
        x = json.loads(line)
        if x.get("kind") == "moe" and x.get("status") == "ok":
            r[(x["model"], x["act"], x["dtype"], x["M"], x["peer"])] = x
    return r


a, b = load(sys.argv[1]), load(sys.argv[2])
reg = lambda M: "1-8" if M <= 8 else "32-128" if M <= 128 else "512" if M == 512 else "2048-8192"  # noqa: E731
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")  # noqa: E731
pts = [k[:4] for k in a if k[4] == "fusedmoe" and k[:4] + ("sglang",) in a]
for region in ["1-8", "32-128", "512", "2048-8192", "all"]:
    sel = [p for p in pts if region == "all" or reg(p[3]) == region]
    s44 = [b[p + ("fusedmoe",)]["roofline_pct"] for p in sel if p + ("fusedmoe",) in b]
    print(f"{region:10s} n={len(sel):3d} fusedmoe {gm([a[p + ('fusedmoe',)]['roofline_pct'] for p in sel]):5.1f} "
          f"sglang {gm([a[p + ('sglang',)]['roofline_pct'] for p in sel]):5.1f}  s44 fusedmoe {gm(s44):5.1f} "
          f"(n={len(s44)})  speedup over sglang "
          f"{gm([a[p + ('sglang',)]['t_ms'] / a[p + ('fusedmoe',)]['t_ms'] for p in sel]):.3f}")
for p in pts:
    if p[3] >= 2048 and p[2] != "bf16":
        o = b.get(p + ("fusedmoe",))
        print(p, "%% rf %.1f (s44 %.1f)  x SGLang %.3f (s44 %.3f)" % (
            a[p + ("fusedmoe",)]["roofline_pct"], o["roofline_pct"] if o else float("nan"),
            a[p + ("sglang",)]["t_ms"] / a[p + ("fusedmoe",)]["t_ms"],
            b[p + ("sglang",)]["t_ms"] / o["t_ms"] if o else float("nan")))
