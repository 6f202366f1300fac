#!/usr/bin/env bash
# s32 call 3: re-tune the decode buckets (1, 8 tokens) of the harness shapes with the decode kernel as a candidate
# (2 / 3 programs an SM, 1 / 2 K blocks a step); the merged table comes back as $OUT/triton_moe_tuned.json
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s32_c3.sh "$OUT/script.sh"
export TUNE_OUT="$PWD/src/fusedmoe/configs/triton_moe_tuned.json" TUNE_MAX_CANDIDATES=9
bash benchmarks/device_run.sh "tune:deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano,minimax-m2:bf16,fp8_tensor,fp8_channel,fp8_block:300:1,8" > "$OUT/tune.txt" 2>&1
echo "tune rc=$?"
cp "$TUNE_OUT" "$OUT/triton_moe_tuned.json"
tail -30 "$OUT/tune.txt"
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/tune_list_*.json")):
    for x in json.load(open(f))["points"]:
        ws = [r for r in x["rows"] if r["varies"] == "ws_decode" and r["status"] == "ok"]
        best_ws = min((r["t_us"] for r in ws), default=float("nan"))
        base = [r["t_us"] for r in x["rows"] if r["varies"] == "base" and r["status"] == "ok"]
        took = x["best"]["gemm1"]["warp_specialized"] and x["best"]["gemm1"]["block_m"] == 16
        print(f'{x["preset"]:16s} {x["weight_format"]:12s} T={x["tokens"]:2d} heur {x["heuristic_us"]:7.1f} '
              f'tuned {x["tuned_us"]:7.1f} best_ws {best_ws:7.1f} ws_rows {len(ws)} took_ws {took}')
PY
