"""benchmarks/ncu_summary.py stalls: the warp-stall summary of an Nsight Compute source-page export."""

import csv
import gzip
import io
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import ncu_summary  # noqa: E402

_HDR = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
        "L2 Theoretical Sectors Global Excessive", "L2 Theoretical Sectors Global", "stall_barrier", "stall_long_sb",
        "stall_wait", "stall_barrier (Not Issued)"]


def _export(path, kernels):
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    for name, rows in kernels:
        w.writerow(["Kernel Name", name])
        w.writerow(_HDR)
        for src, samples, executed, excessive, bar, lsb, wait in rows:
            w.writerow(["0x1", "      " + src, samples, executed, excessive, 8, bar, lsb, wait, 99])
    with gzip.open(path, "wt") as f:
        f.write(buf.getvalue())


def test_stalls_hot_instructions_and_the_loop_view(tmp_path, capsys):
    p = str(tmp_path / "s.sass.csv.gz")
    # one-off barrier (idle warps at the end: 50 of 100 samples), a loop's spin branch (30), a loop shift (20); a
    # second kernel that the prefix leaves out
    _export(p, [("_ws_fp4_kernel", [("NOP", 50, 132, 0, 50, 0, 0), ("@!P0  BRA 0x10", 30, 259200, 0, 0, 30, 0),
                                    ("LDG.E.U8 R1, desc[UR4][R2.64]", 0, 510300, 7, 0, 0, 0),
                                    ("SHF.L.U32 R1, R2, 0x1, RZ", 20, 510300, 0, 0, 5, 15)]),
                ("_combine_kernel", [("NOP", 1000, 1, 0, 1000, 0, 0)])])
    ncu_summary.stalls(p, "_ws_fp4", 2, 100000)
    out = capsys.readouterr().out
    assert "_combine_kernel" not in out
    assert "_ws_fp4_kernel: 100 samples, 4 instructions" in out
    # all samples: barrier 50 %, long_sb 35 %, wait 15 % ("Not Issued" columns are not reasons of their own)
    assert "stalls: barrier 50.0%, long_sb 35.0%, wait 15.0%" in out
    assert "excessive sectors 7 of 8: LDG.E.U8" in out
    hot = out.split("dominant reasons):")[1].split("instructions executed")[0].strip().splitlines()
    assert len(hot) == 2 and "NOP" in hot[0] and "50.0%" in hot[0] and "BRA" in hot[1]
    # the loop (executed >= 100000 times): 50 of 100 samples -- long_sb 70 %, wait 30 %; BRA 60 %, SHF 40 %
    assert "instructions executed >= 100000 times: 3, 50.0% of the samples" in out
    assert "their stalls: long_sb 70.0%, wait 30.0%" in out
    assert "their opcodes (instructions, share): BRA 1 60.0%, SHF 1 40.0%\n" in out  # (top 2)


def test_stalls_without_the_loop_view(tmp_path, capsys):
    p = str(tmp_path / "t.sass.csv.gz")
    _export(p, [("_k", [("NOP", 3, 200000, 0, 3, 0, 0)])])
    ncu_summary.stalls(p, "_k", 5)
    out = capsys.readouterr().out
    assert "_k: 3 samples, 1 instructions" in out and "instructions executed >=" not in out
    assert ncu_summary._opcode("@!P2  SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR12], RZ") == "SYNCS"
