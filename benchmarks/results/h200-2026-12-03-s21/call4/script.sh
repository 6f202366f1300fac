set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 60 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider tests/test_quant_kernels.py -k whole_range > $OUT/gpu_tests.txt 2>&1
el "tests rc=$?"; tail -2 $OUT/gpu_tests.txt
mkdir -p /tmp/oldrepo && tar -c --exclude=./.git . | tar -x -C /tmp/oldrepo && rm -rf /tmp/oldrepo/src && tar xzf .calls/old_src.tgz -C /tmp/oldrepo && tar xzf .calls/old_plugin.tgz -C /tmp/oldrepo
P="--dtypes bf16 fp8_tensor fp8_channel --tokens 1 8 2048 8192"; PC="--dtypes bf16,fp8_tensor,fp8_channel --tokens 1,8,2048,8192"
mkdir -p $OUT/hB
(cd /tmp/oldrepo && OUT=$OUT/hB PEERS=sglang,fusedmoe PLAN_ARGS="$P" PRECOMPILE_ARGS="$PC" BUDGET_S=70 timeout 150 bash benchmarks/harness_run.sh > $OUT/hB/run.txt 2>&1); el "hB rc=$?"
cd $OUT && tar czf hB.tgz hB && rm -rf hB; tail -3 $OUT/hB.tgz >/dev/null; true
