#!/usr/bin/env bash
# One device call: environment, GPU tests, demo, and the shared peer harness with our plugin.
#   bash benchmarks/device_run.sh [tests] [demo] [quick|full] [peers-args...]
# Needs .peers/ (a copy of ../shared/bench/peers with vendor/ filled by get_peers.sh) carried along.
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/bench_results}"
mkdir -p "$OUT"
stages=" $* "
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
if [[ "$stages" == *" tests "* ]]; then
  # real-shape GPU tests hold 10-50 GB each: at most 3 workers share the H200
  python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
fi
if [[ "$stages" == *" demo "* ]]; then
  python3 -m fusedmoe demo 2>&1 | tee "$OUT/demo.log" | tail -20
fi
if [[ "$stages" == *" quick "* ]]; then
  PLAN_ARGS="--quick ${PEERS_ARGS:-}" bash benchmarks/harness_run.sh 2>&1 | tee "$OUT/peers_quick.log" | tail -40
fi
if [[ "$stages" == *" full "* ]]; then
  PLAN_ARGS="${PEERS_ARGS:-}" bash benchmarks/harness_run.sh 2>&1 | tee "$OUT/peers_full.log" | tail -40
fi
