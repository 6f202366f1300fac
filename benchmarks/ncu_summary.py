"""Text summaries of the Nsight Compute exports that ``benchmarks/device_run.sh ncu`` writes.

    python3 benchmarks/ncu_summary.py details POINT.details.csv        # per kernel: time, throughput, occupancy, issue
    python3 benchmarks/ncu_summary.py stalls POINT.sass.csv _gemm1 [N [MIN_EXEC]]  # warp stalls, top N instructions

``details``: one block per profiled kernel (duration, DRAM / SM throughput, registers, occupancy,
issue-slot use, eligible warps). ``stalls``: for the kernels whose name starts with the given
prefix, the warp-stall samples by reason, the instructions with excessive global sectors
(uncoalesced loads), and the N instructions with the most samples with their dominant reasons; with
``MIN_EXEC`` also the reasons and opcodes of the instructions executed at least that many times -- a
K loop's body, without one-off code such as the final barrier where a warp-specialized block's idle
warps wait (they collect samples without costing issue slots). A ``.gz`` export is read as well.
"""

import collections
import csv
import gzip
import sys

DETAILS = ("Duration", "DRAM Throughput", "Compute (SM) Throughput", "Registers Per Thread", "Achieved Occupancy",
           "Theoretical Occupancy", "Dynamic Shared Memory Per Block", "Issue Slots Busy", "Active Warps Per Scheduler",
           "Eligible Warps Per Scheduler", "Warp Cycles Per Issued Instruction", "Waves Per SM", "L2 Hit Rate")


def details(path: str) -> None:
    by = collections.OrderedDict()
    units = {}
    for r in csv.DictReader(open(path)):
        k = (r["ID"], r["Kernel Name"][:40], r["Grid Size"], r["Block Size"])
        by.setdefault(k, {})[r["Metric Name"]] = r["Metric Value"]
        units[r["Metric Name"]] = r["Metric Unit"]
    for (kid, name, grid, block), m in by.items():
        print(f"[{kid}] {name} grid {grid} block {block}")
        print("    " + "; ".join(f"{w} {m[w]} {units.get(w, '')}".rstrip() for w in DETAILS if w in m))


def _opcode(source: str) -> str:
    """``@!P0  BRA 0x10`` -> ``BRA``; ``SHF.L.U32 R1, ...`` -> ``SHF``."""
    parts = source.split()
    op = parts[1] if parts and parts[0].startswith("@") and len(parts) > 1 else (parts[0] if parts else "?")
    return op.split(".")[0]


def loop(rows: list, cols: list, min_exec: int, top: int) -> None:
    """The stall reasons and opcodes of the instructions executed at least ``min_exec`` times."""
    sel = [r for r in rows if int(r["Instructions Executed"] or 0) >= min_exec]
    total = sum(int(r["Warp Stall Sampling (All Samples)"]) for r in rows) or 1
    n = sum(int(r["Warp Stall Sampling (All Samples)"]) for r in sel)
    print(f"  instructions executed >= {min_exec} times: {len(sel)}, {100 * n / total:.1f}% of the samples")
    if not n:
        return
    agg, ops, count = collections.Counter(), collections.Counter(), collections.Counter()
    for r in sel:
        for c in cols:
            agg[c] += int(r[c] or 0)
        op = _opcode(r["Source"])
        ops[op] += int(r["Warp Stall Sampling (All Samples)"])
        count[op] += 1
    print("    their stalls: " + ", ".join(f"{k[6:]} {100 * v / n:.1f}%" for k, v in agg.most_common(12) if v))
    print("    their opcodes (instructions, share): " + ", ".join(f"{op} {count[op]} {100 * v / n:.1f}%"
                                                                  for op, v in ops.most_common(top)))


def stalls(path: str, prefix: str, top: int, min_exec: int = 0) -> None:
    blocks, cur = [], None
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        text = f.read()
    for line in text.splitlines():
        if line.startswith('"Kernel Name"'):
            cur = [line.split(",")[1].strip('"'), []]
            blocks.append(cur)
        elif cur is not None:
            cur[1].append(line)
    for name, body in blocks:
        if not name.startswith(prefix):
            continue
        rows = list(csv.DictReader(body))
        total = sum(int(r["Warp Stall Sampling (All Samples)"]) for r in rows) or 1
        cols = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
        agg = collections.Counter()
        for r in rows:
            for c in cols:
                agg[c] += int(r[c] or 0)
        print(f"{name}: {total} samples, {len(rows)} instructions")
        print("  stalls: " + ", ".join(f"{k[6:]} {100 * v / total:.1f}%" for k, v in agg.most_common(12)))
        for r in rows:
            e = int(r["L2 Theoretical Sectors Global Excessive"] or 0)
            if e:
                print(f"  excessive sectors {e} of {r['L2 Theoretical Sectors Global']}: {r['Source'].strip()[:90]}")
        print("  hottest instructions (share of samples, index, executions, SASS, dominant reasons):")
        order = sorted(range(len(rows)), key=lambda i: -int(rows[i]["Warp Stall Sampling (All Samples)"]))
        for i in order[:top]:
            r = rows[i]
            s = int(r["Warp Stall Sampling (All Samples)"])
            why = ", ".join(f"{c[6:]}={r[c]}" for c in cols if int(r[c] or 0) > 0.15 * s)
            print(f"   {100 * s / total:5.1f}% [{i:4d}] {r['Instructions Executed']:>9s} {r['Source'].strip()[:70]:70s} {why}")
        if min_exec:
            loop(rows, cols, min_exec, top)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "details":
        details(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "stalls":
        stalls(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 25,
               int(sys.argv[5]) if len(sys.argv) > 5 else 0)
    else:
        sys.exit(__doc__)
