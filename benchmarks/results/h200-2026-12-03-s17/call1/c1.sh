set -u
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
t0=$(date +%s)
python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 200 tests > $OUT/gpu_suite.log 2>&1
echo "gpu suite rc=$? $(( $(date +%s)-t0 ))s"; tail -4 $OUT/gpu_suite.log
for v in "hA sglang,fusedmoe,fusedmoe-wswide fp8_tensor,fp8_channel" "hB sglang,fusedmoe-nohandoff fp8_tensor"; do
  set -- $v
  mkdir -p $OUT/$1
  OUT=$OUT/$1 PEERS=$2 BUDGET_S=150 PLAN_ARGS="--dtypes ${3/,/ } --tokens 512 2048 8192" PRECOMPILE_ARGS="--dtypes $3 --tokens 512,2048,8192" bash benchmarks/harness_run.sh > $OUT/$1/run.log 2>&1
  echo "$1 $(( $(date +%s)-t0 ))s"
done
for h in hA hB; do grep -E "^(dsv3|qwen|mini|mixt|nemo|llama|gpt)" $OUT/$h/run.log | awk '{print $1,$3,$4,$0}' | cut -c1-200 | head -0; done
python3 - <<'PY'
import os, re
out = os.environ["OUT"]
for h in ("hA", "hB"):
    print("==", h)
    for line in open(f"{out}/{h}/peers.txt") if os.path.exists(f"{out}/{h}/peers.txt") else []:
        if "|" in line and re.match(r"^\w", line) and not line.startswith(("model", "us ", "sglang", "speedup", "(roof")):
            parts = line.split("|")
            head = parts[0].split()
            tms = [p.split()[0] for p in parts[1:] if p.split()]
            print(" ".join(head[:4]), " ".join(tms))
PY
cd $OUT && tar czf h.tgz hA hB && rm -rf hA hB
