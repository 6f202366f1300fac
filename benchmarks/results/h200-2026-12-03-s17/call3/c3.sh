set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 330 python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 200 tests > $OUT/gpu_suite.txt 2>&1; timeout 120 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider tests/test_triton_moe.py -k "quant_on_load or gemm1_amax or reciprocal" > $OUT/interp_on_gpu.txt 2>&1
echo "suite $(( $(date +%s)-T0 ))s"; tail -3 $OUT/gpu_suite.txt; tail -2 $OUT/interp_on_gpu.txt
for v in "dA sglang,fusedmoe" "dB sglang,fusedmoe-noqload"; do
  set -- $v
  mkdir -p $OUT/$1
  OUT=$OUT/$1 PEERS=$2 BUDGET_S=60 PLAN_ARGS="--dtypes fp8_channel --tokens 1 8 32 128" PRECOMPILE_ARGS="--dtypes fp8_channel --tokens 1,8,32,128" timeout 100 bash benchmarks/harness_run.sh > $OUT/$1/run.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-T0 ))s"
done
python3 - <<'PY'
import os, re
out = os.environ["OUT"]
for h in ("dA", "dB"):
    print("==", h)
    p = f"{out}/{h}/peers.txt"
    for line in (open(p) if os.path.exists(p) else []):
        if "|" in line and re.match(r"^\w", line) and not line.startswith(("model", "us ", "sglang", "speedup", "(roof")):
            parts = line.split("|"); head = parts[0].split()
            print(" ".join(head[:4]), " ".join(x.split()[0] for x in parts[1:] if x.split()))
PY
cd $OUT && rm -f */precompile_sglang.log */peers.log && tar czf h.tgz dA dB && rm -rf dA dB
