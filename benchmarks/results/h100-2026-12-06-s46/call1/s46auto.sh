#!/usr/bin/env bash
# s46: the first call that gets a machine: on an H200 issue 3's harness (its targets are the H200's), on an H100
# the FP4 DYN / lag tests and A/Bs (call 2); the other one in the next call
if [[ "${FORCE:-}" != t ]] && { [[ "${FORCE:-}" == h ]] || nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; }; then
  exec bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh  # (.calls/s46c1.sh then)
fi
exec bash benchmarks/results/h100-2026-12-06-s46/call1/script.sh  # (.calls/s46c2.sh then)
