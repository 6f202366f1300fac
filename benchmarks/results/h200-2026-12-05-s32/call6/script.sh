# s32 call 6 (inline; carry .calls .peers; the re-tuned table copied into src/ first): the shared harness at 1 and 8 tokens
export PYTHONPATH=$PWD/src; OUT=$OUT PEERS=sglang,fusedmoe BUDGET_S=250 PLAN_ARGS="--tokens 1 8" PRECOMPILE_ARGS="--tokens 1,8" timeout 380 bash benchmarks/harness_run.sh > $OUT/harness.txt 2>&1; echo rc=$?; tail -45 $OUT/harness.txt
