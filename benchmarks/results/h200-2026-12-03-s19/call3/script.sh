set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
mkdir -p /tmp/old && tar xzf .calls/old_src.tgz -C /tmp/old
KB="--preset nemotron-super,deepseek-v3,qwen3-30b-a3b,minimax-m2 --weight-format nvfp4,fp8_block --tokens 1,8,32,64 --calls 20"
PYTHONPATH=$PWD/src timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 140 \
  tests/test_triton_moe.py tests/test_triton_fp4.py -k "align or fold or fast_conversions or tile_dequant" > $OUT/gpu_tests.txt 2>&1
el "tests rc=$?"; tail -2 $OUT/gpu_tests.txt
PYTHONPATH=$PWD/src timeout 150 python3 benchmarks/kernel_breakdown.py $KB --json $OUT/kb_new.json > $OUT/kb_new.txt 2>&1; el "kb new rc=$?"
PYTHONPATH=/tmp/old/src timeout 150 python3 benchmarks/kernel_breakdown.py $KB --json $OUT/kb_old.json > $OUT/kb_old.txt 2>&1; el "kb old rc=$?"
PYTHONPATH=$PWD/src timeout 90 python3 benchmarks/fp4_stream_probe.py > $OUT/probe.txt 2>&1; el "probe rc=$?"; cat $OUT/probe.txt
mkdir -p $OUT/h
OUT=$OUT/h PYTHONPATH=$PWD/src PEERS=sglang,fusedmoe PLAN_ARGS="--tokens 1 8 32 128" PRECOMPILE_ARGS="--tokens 1,8,32,128" BUDGET_S=120 timeout 200 bash benchmarks/harness_run.sh > $OUT/h/run.txt 2>&1; el "harness rc=$?"
grep -A9 "^summary" $OUT/h/run.txt | cut -c1-160
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
def load(p):
    d = json.load(open(p)); r = {}
    for pt in d if isinstance(d, list) else d.get("points", d):
        pass
    return d
for tag in ("old", "new"):
    print("==", tag)
    for l in open(f"{out}/kb_{tag}.txt"):
        if "floor" in l or "align" in l: print(l.rstrip()[:150])
PY
cd $OUT && tar czf h.tgz h && rm -rf h
