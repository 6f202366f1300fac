#!/usr/bin/env bash
# s28 call 1: where the one-token FP4 GEMM1 loses its time -- the stream / pipeline / K-step ladder at
# gpt-oss-120b's one-token bytes (4 experts), then Nsight Compute on GEMM1 at split 2 vs split 4
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s28_call1.sh "$OUT/script.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv > "$OUT/env.txt" 2>&1
timeout 240 python3 benchmarks/fp4_stream_probe.py --experts 4 --rows 5760 --k 2880 --ladder > "$OUT/ladder4.txt" 2>&1
echo "ladder rc=$?"
for sk in 2 4; do
  NCU_POINTS="gpt-oss-120b:mxfp4:1" NCU_GEMM1="{\"split_k\": $sk}" NCU_TAG=s$sk NCU_TIMEOUT_S=120 \
    bash benchmarks/device_run.sh ncu 2>&1 | tail -5
done
for f in "$OUT"/ncu_s*.tgz; do tar xzf "$f" -C /tmp; done
for s in /tmp/ncu/*.summary.txt; do echo "== $s"; head -12 "$s"; done
echo "== ladder"; cat "$OUT/ladder4.txt"
