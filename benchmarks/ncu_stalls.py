"""Summarize Nsight Compute's warp-stall sampling of one kernel from its source page as CSV (SASS):

    ncu --import report.ncu-rep --page source --print-source sass --csv > sass.csv   # (gzip is fine too)
    python3 benchmarks/ncu_stalls.py sass.csv [--min-exec 100000] [--top 30]

Prints the stall reasons' shares of all samples, the hottest instructions (share, executions, top reasons), and,
over the instructions executed at least ``--min-exec`` times (a K loop's body: this leaves out one-off code such
as the final barrier where idle warps of a warp-specialized block wait), the reasons and the opcodes' shares.
``report.ncu-rep`` from ``ncu --section SourceCounters`` (``benchmarks/ncu_layer.py`` runs one layer call).
"""
import argparse
import collections
import csv
import gzip
import sys
from typing import Dict, List, Optional

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def _num(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def load(path: str) -> "tuple[List[str], List[Dict[str, str]]]":
    """The stall-reason columns and the instruction rows of an ncu source-page CSV (a "Kernel Name" line, then a
    header with ``Address``, ``Source``, the sample counts and one ``stall_*`` column per reason)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if r[:2] == ["Address", "Source"]), None)
    if head is None:
        raise ValueError(f"{path}: no 'Address,Source' header (not an ncu --page source --csv export?)")
    hdr = rows[head]
    for col in (SAMPLES, EXECUTED):
        if col not in hdr:
            raise ValueError(f"{path}: no {col!r} column (profile with --section SourceCounters)")
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    data = [dict(zip(hdr, r)) for r in rows[head + 1:] if len(r) == len(hdr)]
    return reasons, data


def _opcode(source: str) -> str:
    parts = source.strip().split()
    if not parts:
        return "?"
    op = parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]
    return op.split(".")[0]


def summarize(reasons: List[str], data: List[Dict[str, str]], min_exec: float, top: int) -> str:
    total = sum(_num(r[SAMPLES]) for r in data)
    if total <= 0:
        raise ValueError("no warp-stall samples in the export")
    out = [f"samples: {total:.0f} over {len(data)} instructions"]

    def reason_lines(rows: List[Dict[str, str]], of: float) -> List[str]:
        by = collections.Counter({s: sum(_num(r[s]) for r in rows) for s in reasons})
        return [f"  {s[len('stall_'):]:20s} {100 * v / of:5.1f} %" for s, v in by.most_common() if v > 0]

    out += ["stall reasons (all samples):"] + reason_lines(data, total)
    out.append("hottest instructions (% of all samples, executions, top reasons):")
    for i, r in sorted(enumerate(data), key=lambda t: -_num(t[1][SAMPLES]))[:top]:
        tops = sorted(((_num(r[s]), s) for s in reasons), reverse=True)[:2]
        why = " ".join(f"{s[len('stall_'):]} {100 * v / total:.1f}" for v, s in tops if v > 0)
        out.append(f"  {i:6d} {100 * _num(r[SAMPLES]) / total:5.1f} % {r[EXECUTED]:>10s}  "
                   f"{r['Source'].strip()[:64]:64s} {why}")
    loop = [r for r in data if _num(r[EXECUTED]) >= min_exec]
    in_loop = sum(_num(r[SAMPLES]) for r in loop)
    out.append(f"instructions executed >= {min_exec:.0f} times: {len(loop)}, {100 * in_loop / total:.1f} % of the "
               "samples")
    if in_loop > 0:
        out += ["  their stall reasons:"] + ["  " + x for x in reason_lines(loop, in_loop)]
        count: collections.Counter = collections.Counter()
        samp: collections.Counter = collections.Counter()
        for r in loop:
            op = _opcode(r["Source"])
            count[op] += 1
            samp[op] += _num(r[SAMPLES])
        out.append("  their opcodes (instructions, % of their samples):")
        out += [f"    {op:12s} {count[op]:5d} {100 * v / in_loop:5.1f} %" for op, v in samp.most_common(top)]
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv export (.csv or .csv.gz)")
    ap.add_argument("--min-exec", type=float, default=100000, help="executions that make an instruction 'loop'")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args(argv)
    try:
        print(summarize(*load(a.csv), a.min_exec, a.top))
    except (OSError, ValueError) as exc:
        print(f"ncu_stalls: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
