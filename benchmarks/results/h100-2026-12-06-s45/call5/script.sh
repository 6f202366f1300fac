#!/usr/bin/env bash
# s45 call 5 (fp8_tensor): DYN off/on x GEMM1 tile narrow (block_n 64) / wide (block_n 128), per-kernel times, FP8 presets
export PYTHONPATH=$PWD/src
for d in 0 1; do
  FUSEDMOE_WS_DYN=$d timeout 270 python3 benchmarks/kernel_breakdown.py \
    --preset deepseek-v3,minimax-m2,qwen3-30b-a3b,mixtral-8x7b,deepseek-v3-tp8 --weight-format fp8_tensor \
    --tokens 2048,8192 --calls 10 --bw 3.1 --gemm1 '{"block_n": 64}' --gemm1 '{"block_n": 128, "num_stages": 4}' --json $OUT/kb_dyn$d.json \
    > $OUT/kb_dyn$d.txt 2>&1; echo "dyn=$d rc=$?"
done
python3 - <<'PY'
import json, os
o = os.environ["OUT"]; r = {}
for d in (0, 1):
    try: rows = json.load(open(f"{o}/kb_dyn{d}.json"))
    except Exception as e: print("no json", d, e); continue
    for x in rows: r.setdefault((x["preset"], x["format"], x["tokens"], x["gemm2"]), {})[d] = x["total_us"]
for k, v in r.items(): print(f"{k[0]:16s} {k[1]:11s} {k[2]:5d} {str(k[3]):26s} " + "  ".join(f"{v.get(d, 0):8.1f}" for d in (0, 1)))
PY
