"""Registers, spills and MMA / fp32-add overlap (sm_90 SASS, compiled on the CPU) of every FP8 per
tensor / per channel prefill config in the tuned table, with Triton's promotion and with deferred
promotion (``set_fp8_deferred_promotion``): which tiles could run deferred without spilling.

    python3 benchmarks/sm90_defer_survey.py [--table src/fusedmoe/configs/triton_moe_tuned.json]

Needs Triton's bundled ptxas / cuobjdump, no GPU. Uses the compile helpers of the sm_90 tests
(``tests/test_triton_fp4.py``'s script), run in a subprocess without TRITON_INTERPRET.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_MAIN = r'''
import json, re, sys
combos = json.loads(sys.argv[1])
print("gemm  gated quant  BM  BN  BK  w  s | promoted regs spills overlap | deferred regs spills overlap")
for g, gated, quant, bm, bn, bk, nw, ns in combos:
    row = []
    for defer in (False, True):
        k = gemm(1 if g == "gemm1" else 2, "fp8", "fp8", quant=quant, act=0 if gated else 3, gated=gated,
                 BM=bm, BN=bn, BK=bk, nw=nw, ns=ns, defer=defer)
        sass, regs = sass_of(k)
        spills = len(re.findall(r"\b(?:LDL|STL)\b", sass))
        ov = mma_overlap(sass)
        row.append(f"{regs:4d} {spills:6d} {ov:7d}")
    name = "tensor" if quant == 1 else "row"
    print(f"{g} {str(gated):5s} {name:6s} {bm:3d} {bn:3d} {bk:3d} {nw:2d} {ns:2d} |      {row[0]} |      {row[1]}",
          flush=True)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", default=os.path.join(ROOT, "src", "fusedmoe", "configs", "triton_moe_tuned.json"))
    a = ap.parse_args()
    combos = set()
    for e in json.load(open(a.table))["entries"]:
        c = e["config"]
        if e["weight_format"] in ("fp8_tensor", "fp8_channel") and c["block_m"] >= 64 and not c["fp8_fast_accum"]:
            gated = e["gemm"] == "gemm1" and e["activation"] in ("swiglu", "swiglu_oai", "geglu")
            combos.add((e["gemm"], gated, 1 if e["weight_format"] == "fp8_tensor" else 2, c["block_m"], c["block_n"],
                        c["block_k"], c["num_warps"], c["num_stages"]))
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    os.environ.pop("TRITON_INTERPRET", None)
    from test_triton_fp4 import _SM90_SCRIPT

    head = _SM90_SCRIPT.partition('if __name__ == "__main__":')[0]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}
    return subprocess.run([sys.executable, "-c", head + _MAIN, json.dumps(sorted(combos))], env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main())
