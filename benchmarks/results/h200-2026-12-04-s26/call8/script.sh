# call 8 (twenty-sixth session): decode GEMM2 of short K (TP shards, K = I_pad <= 256) holding its activation tile
# across column tiles (KernelConfig.n_tiles > 1, so far tried at prefill only) against the shipped per-tile configs
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
for f in bf16 fp8_tensor fp8_channel fp8_block; do
  bk=256; [[ $f == fp8_block ]] && bk=128
  V=(); for nt in 4 8 16; do V+=(--gemm2 "{\"block_k\": $bk, \"split_k\": 1, \"n_tiles\": $nt, \"num_stages\": 4}"); done
  V+=(--gemm2 "{\"block_n\": 64, \"block_k\": $bk, \"split_k\": 1, \"n_tiles\": 16, \"num_stages\": 4}")
  timeout 68 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8,minimax-m2-tp8 --weight-format $f \
      --tokens 1,8 --calls 20 "${V[@]}" --json $OUT/held_$f.json > $OUT/held_$f.txt 2>&1; el "$f rc=$?"
done
python3 - <<'PY'
import json, glob, os
out = os.environ["OUT"]
for p in sorted(glob.glob(f"{out}/held_*.json")):
    rows = json.load(open(p)); base = {}
    for r in rows:
        k = (r["preset"], r["format"], r["tokens"])
        g2 = sum(v for n, v in r["kernels"].items() if "gemm2" in n)
        if r["gemm2"] is None:
            base[k] = (g2, r["total_us"])
        b = base.get(k)
        lab = (r["gemm2"] or "shipped")[:70]
        print(f"{k[0]:16s} {k[1]:11s} T={k[2]:<3d} {lab:70s}: gemm2 {g2:6.2f} us total {r['total_us']:6.1f} us"
              + (f"  gemm2 x{b[0] / g2:.2f} total x{b[1] / r['total_us']:.2f}" if b and r["gemm2"] else ""))
PY
