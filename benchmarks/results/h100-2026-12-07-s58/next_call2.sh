#!/usr/bin/env bash
# Planned in the fifty-seventh session, carried over by the fifty-eighth (which got only H100s): the next session's
# second call. On an H200: the BF16 ReLU^2 tune of the SwiGLU models' shapes under a deadline (the fifty-fifth
# session's H100 call, never run on an H200), entries merged into a copy of the shipped table ($OUT/table.json). On an
# H100: the FP4 kernel GPU tests (tests-core: the fifty-eighth session's run, 259 passed in 309 s, predates the scales
# through the ring) -- run it if the first call's A/B makes ws4ss the default.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
if [[ "$name" == *H200* ]]; then
  DEADLINE_S=${DEADLINE_S:-330} bash benchmarks/results/h100-2026-12-07-s55/call3/script.sh
else
  TESTS_TIMEOUT_S=330 bash benchmarks/device_run.sh tests-core > $OUT/tests_core.txt 2>&1; echo "tests rc=$?"
  tail -5 $OUT/tests_core.txt
fi
