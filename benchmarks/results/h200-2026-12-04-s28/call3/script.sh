#!/usr/bin/env bash
# s28 call 3: why 8-byte scale runs made the 64-row MXFP4 decode tiles slower (call 2: Nemotron-3-Super 1.16-1.25x):
# per-kernel times and Nsight Compute at Nemotron-3-Super MXFP4, 1 token, 4-byte rule vs 16
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s28_call3.sh "$OUT/script.sh"
for m in 4 16; do
  FUSEDMOE_SCALE_RUN_MAX=$m timeout 120 python3 benchmarks/kernel_breakdown.py --preset nemotron-super,gpt-oss-120b \
     --weight-format mxfp4 --tokens 1,8 --calls 20 2>&1 | grep -v Warn | tee "$OUT/kb_max$m.txt" | grep -E "T=|_gemm"
done
for m in 4 16; do
  FUSEDMOE_SCALE_RUN_MAX=$m NCU_POINTS="nemotron-super:mxfp4:1" NCU_TAG=max$m NCU_TIMEOUT_S=150 \
    bash benchmarks/device_run.sh ncu 2>&1 | tail -3
done
for f in "$OUT"/ncu_max*.tgz; do tar xzf "$f" -C /tmp; done
for s in /tmp/ncu/*.summary.txt; do echo "== $s"; grep -A1 "_gemm[12]_kernel grid" "$s" | cut -c1-420; grep -A3 "^_gemm[12]_kernel:" "$s"; done
