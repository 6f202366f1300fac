#!/usr/bin/env python3
"""Per-point time ratios of the shared harness's peers against one of them.

    python3 benchmarks/peer_ratio.py OUT/peers.jsonl fusedmoe

Prints one row per (dtype, model, activation, tokens): the base peer's time in µs, then each peer's
time and base time / peer time (> 1: that peer is faster), then the geometric mean of each ratio
by region (1-8, 32-128, 512, 2048-8192 tokens) and the points where a peer is > 5 % slower.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict

REGIONS = (("1-8", 1, 8), ("32-128", 32, 128), ("512", 512, 512), ("2048-8192", 2048, 8192))


def region(tokens: int) -> str:
    for name, lo, hi in REGIONS:
        if lo <= tokens <= hi:
            return name
    return "other"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl")
    ap.add_argument("base", help="the peer the others are compared with (e.g. fusedmoe)")
    args = ap.parse_args(argv)
    times: dict[tuple, dict[str, float]] = defaultdict(dict)
    peers: list[str] = []
    with open(args.jsonl) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("kind") != "moe" or rec.get("status") != "ok" or rec.get("check", "ok") != "ok":
                continue
            key = (rec["dtype"], rec["model"], rec["act"], int(rec["M"]))
            times[key][rec["peer"]] = 1000.0 * float(rec["t_ms"])
            if rec["peer"] not in peers:
                peers.append(rec["peer"])
    if args.base not in peers:
        print(f"no point of peer {args.base!r} in {args.jsonl} (peers: {', '.join(peers) or 'none'})", file=sys.stderr)
        return 1
    others = [p for p in peers if p != args.base]
    print(f"{'point':<44} {args.base:>10} " + " ".join(f"{p[-16:]:>22}" for p in others))
    logs: dict[tuple[str, str], list[float]] = defaultdict(list)
    slow = []
    for key in sorted(times, key=lambda k: (k[0], k[1], k[2], k[3])):
        row = times[key]
        if args.base not in row:
            continue
        base = row[args.base]
        cells = []
        for p in others:
            if p not in row:
                cells.append(f"{'-':>22}")
                continue
            r = base / row[p]
            logs[(p, region(key[3]))].append(math.log(r))
            logs[(p, "all")].append(math.log(r))
            if r < 1 / 1.05:
                slow.append((r, p, key))
            cells.append(f"{row[p]:>14.1f} {r:>7.3f}")
        name = " ".join(str(k) for k in key)
        print(f"{name:<44} {base:>10.1f} " + " ".join(cells))
    print("\ngeomean of base time / peer time (> 1: the peer is faster)")
    for p in others:
        parts = []
        for reg in [r[0] for r in REGIONS] + ["all"]:
            v = logs.get((p, reg))
            if v:
                parts.append(f"{reg} {math.exp(sum(v) / len(v)):.3f} (n={len(v)})")
        print(f"  {p}: " + ", ".join(parts))
    print(f"\npoints where a peer is > 5 % slower than {args.base}: {len(slow)}")
    for r, p, key in sorted(slow)[:20]:
        print(f"  {p} {' '.join(map(str, key))}: {r:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
