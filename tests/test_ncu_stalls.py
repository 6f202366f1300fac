"""benchmarks/ncu_stalls.py: the warp-stall summary of an Nsight Compute source-page CSV."""

import csv
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import ncu_stalls  # noqa: E402

_HDR = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
        "Instructions Executed", "stall_barrier", "stall_long_sb", "stall_wait", "stall_barrier (Not Issued)"]


def _export(path, rows, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "_k"])
        w.writerow(_HDR)
        for src, samples, executed, bar, lsb, wait in rows:
            w.writerow(["0x1", src, samples, samples, f"{executed:,}", bar, lsb, wait, 99])


def test_summary_shares_hot_instructions_and_loop(tmp_path, capsys):
    p = str(tmp_path / "s.csv.gz")
    # one-off barrier (idle warps at the end: 50 of 100 samples), a loop wait (30), a loop shift (20)
    _export(p, [("NOP", 50, 132, 50, 0, 0), ("@!P0  BRA 0x10", 30, 259200, 0, 30, 0),
                ("SHF.L.U32 R1, R2, 0x1, RZ", 20, 510300, 0, 5, 15)], gz=True)
    assert ncu_stalls.main([p, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "samples: 100 over 3 instructions" in out
    lines = out.splitlines()
    # all samples: barrier 50 %, long_sb 35 %, wait 15 % (the "Not Issued" columns are not reasons of their own)
    assert [ln.split() for ln in lines[2:5]] == [["barrier", "50.0", "%"], ["long_sb", "35.0", "%"],
                                                  ["wait", "15.0", "%"]]
    hot = [ln for ln in lines if ln.startswith("      ") and "%" in ln and ("NOP" in ln or "BRA" in ln
                                                                          or "SHF" in ln)]
    assert len(hot) == 2 and "NOP" in hot[0] and "barrier 50.0" in hot[0] and "BRA" in hot[1]
    # the loop (executed >= 100000 times): 50 samples, long_sb 70 %, wait 30 %; opcodes BRA 60 %, SHF 40 %
    assert "instructions executed >= 100000 times: 2, 50.0 % of the samples" in out
    loop = out.split("their stall reasons:")[1]
    assert "long_sb               70.0 %" in loop and "wait                  30.0 %" in loop
    assert "barrier" not in loop.split("their opcodes")[0]
    ops = [ln.split() for ln in loop.split("their opcodes (instructions, % of their samples):")[1].splitlines() if ln]
    assert ops == [["BRA", "1", "60.0", "%"], ["SHF", "1", "40.0", "%"]]


def test_bad_exports_are_refused(tmp_path, capsys):
    p = tmp_path / "x.csv"
    p.write_text("Kernel Name,_k\nfoo,bar\n1,2\n")
    assert ncu_stalls.main([str(p)]) == 2
    assert "no 'Address,Source' header" in capsys.readouterr().err
    p.write_text("Address,Source,Instructions Executed\n0x1,NOP,1\n")
    assert ncu_stalls.main([str(p)]) == 2
    assert "SourceCounters" in capsys.readouterr().err
    q = str(tmp_path / "z.csv")
    _export(q, [("NOP", 0, 1, 0, 0, 0)])
    assert ncu_stalls.main([q]) == 2
    assert "no warp-stall samples" in capsys.readouterr().err
    assert ncu_stalls.main([str(tmp_path / "missing.csv")]) == 2
