#!/usr/bin/env bash
# s27 call 9 (device-only hack, upper bound of an idea): GEMM1 launched with a register cap (maxnreg) so that 6
# programs fit an SM instead of 5 (89 -> 77 registers, no spills in the sm_90 compile), with split-K 2 / 3 / 4
set -uo pipefail
export PYTHONUNBUFFERED=1
cp .calls/s27_call9.sh "$OUT/script.sh"
mkdir -p /tmp/hk && cp -r src /tmp/hk/
sed -i 's/^            num_warps=c1.num_warps, num_stages=c1.num_stages,$/            num_warps=c1.num_warps, num_stages=c1.num_stages, **({"maxnreg": int(os.environ["MAXNREG"])} if os.environ.get("MAXNREG") else {}),/' /tmp/hk/src/fusedmoe/backends/triton_moe.py
grep -c 'MAXNREG' /tmp/hk/src/fusedmoe/backends/triton_moe.py
for n in 0 80; do
  if [ $n = 0 ]; then unset MAXNREG; else export MAXNREG=$n; fi
  PYTHONPATH=/tmp/hk/src timeout 150 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,gpt-oss-20b --weight-format mxfp4 \
     --tokens 1,8,64 --calls 30 --gemm1 '{"split_k": 3}' --gemm1 '{"split_k": 4}' --gemm1 '{"split_k": 2}' \
     > "$OUT/kb_nreg$n.txt" 2>&1
  echo "maxnreg $n rc=$?"
done
for n in 0 80; do echo "== maxnreg $n"; grep -E 'T=|_gemm1' "$OUT/kb_nreg$n.txt" | grep -v '^#' | paste - - | awk '{print $1, $3, $NF, $(NF-1)}' ; done 2>/dev/null | head -60
for n in 0 80; do echo "== $n"; grep -E 'T=|_gemm1_kernel' "$OUT/kb_nreg$n.txt" | grep -v '^#'; done | cut -c1-150 | head -70
