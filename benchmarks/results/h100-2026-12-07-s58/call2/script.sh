#!/usr/bin/env bash
# Planned in the fifty-seventh session: the next session's second call. On an H200: the BF16 ReLU^2 tune of the SwiGLU
# models' shapes under a deadline (the fifty-fifth session's H100 call, never run on an H200), entries merged into a
# copy of the shipped table ($OUT/table.json). On an H100: every GPU test outside the kernel files (tests-rest; last
# run in the fifty-sixth session, 232 passed before its limit).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
if [[ "$name" == *H200* ]]; then
  DEADLINE_S=${DEADLINE_S:-330} bash benchmarks/results/h100-2026-12-07-s55/call3/script.sh
else
  TESTS_REST_TIMEOUT_S=400 bash benchmarks/device_run.sh tests-rest > $OUT/tests_rest.txt 2>&1; echo "tests rc=$?"
  tail -5 $OUT/tests_rest.txt
fi
