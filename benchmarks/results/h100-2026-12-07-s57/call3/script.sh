#!/usr/bin/env bash
# s57 call 3: issue 3's full harness (all 175 points, sglang vs fusedmoe), the current standing on this GPU
bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
