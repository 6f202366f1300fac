#!/usr/bin/env bash
# s41 call 5: the two OOM'd (4 workers on 80 GB) Nemotron NVFP4 tests alone; FP4 decode bench, new table vs old
export PYTHONPATH=$PWD/src
timeout 100 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider tests/test_triton_fp4.py \
  -k "test_gpu_nemotron_nvfp4_relu2" > $OUT/nvfp4_relu2.txt 2>&1; echo "rc=$?"; tail -2 $OUT/nvfp4_relu2.txt
B="python3 -m fusedmoe bench --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 --tokens 1,2,4,8,64 --peers triton --quick-ceilings --no-plot --no-progress --budget-s 110"
timeout 150 $B --out $OUT/new1 > $OUT/new1.txt 2>&1
timeout 150 $B --tuned-configs .calls/old_table.json --out $OUT/old1 > $OUT/old1.txt 2>&1
python3 - <<'PY'
import json, os
o = os.environ["OUT"]
def load(d):
    r = {}
    for rec in json.load(open(f"{o}/{d}/bench.json"))["results"]:
        if rec.get("peer") == "triton" and rec.get("us"):
            r[(rec["preset"], rec["weight_format"], rec["tokens"])] = (rec["us"], rec.get("tbps"))
    return r
try:
    n, od = load("new1"), load("old1")
    for k in sorted(n):
        if k in od:
            print(*k, f"old {od[k][0]:.1f} new {n[k][0]:.1f} ratio {od[k][0]/n[k][0]:.3f} TB/s {n[k][1]}")
except Exception as e:
    print("parse failed", e)
PY
tail -30 $OUT/new1.txt
cd $OUT && tar czf b.tgz new1 old1 && rm -rf new1 old1
