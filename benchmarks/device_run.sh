#!/usr/bin/env bash
# One device call: environment, GPU tests, demo, the shared peer harness with our plugin, tuning.
#   bash benchmarks/device_run.sh [tests] [tests-core] [demo] [quick|full] [tune-fp8] [tune-fp4] [tune-rest]
#                                  [tune-cover-a] [tune-cover-b] [tune-cover-c] [tune-cover-d] [tune-fp8-prefill] [eager] [bench] [bench-all]
#                                  [bench-fp4] [bench-fp4-tuned] [ncu] [dist] [tests-rest] [profile] [breakdown]
#                                  [tune:PRESETS:FORMATS[:BUDGET_S[:TOKENS]]] [alzero] [dot-race] [dot-repro]
#                                  [smoke] [optin-tests] [ab-optin] [s38-checks]
# $OUT brings back at most 8 files: pack the rest (tar) at the end of a call.
# tune-cover-*: merged into TUNE_OUT (default: the shipped table), so two GPUs can tune at once
# (CUDA_VISIBLE_DEVICES=0 / 1, each its own TUNE_OUT; merge the files with merge_into_file).
# dist: needs 2 GPUs (nvidia-h200-x2): EP/TP benchmark at world size 1 and 2, NCCL tests.
# tune-*: merged into src/fusedmoe/configs/triton_moe_tuned.json, copied to $OUT (copy it back
# into the repo and commit); budgets in TUNE_BUDGET_S (default 300 each).
# Needs .peers/ (a copy of ../shared/bench/peers with vendor/ filled by get_peers.sh) carried along.
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
# NVLink multicast stays off on the shared multi-GPU hosts (device KINDS.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-$PWD/bench_results}"
mkdir -p "$OUT"
stages=" $* "
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
if [[ "$stages" == *" tests "* ]]; then
  # real-shape GPU tests hold 10-50 GB each: at most 3 workers share the H200
  python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
fi
if [[ "$stages" == *" tests-core "* ]]; then
  # the kernel tests only (~130 s): triton BF16/FP8 and FP4/MX
  # TESTS_K: a pytest -k expression to run part of them
  timeout "${TESTS_TIMEOUT_S:-300}" python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 240 \
      ${TESTS_K:+-k "$TESTS_K"} tests/test_triton_moe.py tests/test_triton_fp4.py 2>&1 | tee "$OUT/gpu_tests_core.log" | tail -25
fi
if [[ "$stages" == *" tests-rest "* ]]; then
  # every GPU test outside the kernel files and the 2-GPU file: the layer path (CUDA graph,
  # torch.compile, transformers, eager dispatch), routing, quantizers, bench
  timeout "${TESTS_REST_TIMEOUT_S:-300}" python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 240 \
      --ignore tests/test_triton_moe.py --ignore tests/test_triton_fp4.py --ignore tests/test_distributed.py tests \
      2>&1 | tee "$OUT/gpu_tests_rest.log" | tail -25
fi
if [[ "$stages" == *" smoke "* ]]; then
  # the opt-in Gluon kernels that have not run on a GPU (twenty-ninth / thirtieth sessions): a triage with every
  # variant in its own process and a time limit (one hang does not hide the rest); ~6-8 minutes: a call of its own
  timeout "${SMOKE_TIMEOUT_S:-480}" python3 benchmarks/smoke_gluon.py --jobs 4 --timeout 150 --json "$OUT/smoke.json" \
      2>&1 | tee "$OUT/smoke.txt" | tail -22
fi
if [[ "$stages" == *" s38-checks "* ]]; then
  # the thirty-seventh / thirty-eighth sessions' compiled-only code (BENCH_COMMANDS.md, next plan item 0): the wide
  # pipelined loops in their own processes, then the same-bits tests of the FP8 block paths (one weight scale a tile
  # in the Triton GEMMs -- on by default --, a column group in the warp-specialized ones, wide and pipelined block
  # tiles) and of the pipelined loops; the per-test limit ends a hang
  timeout 300 python3 benchmarks/smoke_gluon.py --jobs 2 --timeout 120 --json "$OUT/smoke_s38.json" \
      --only wspipe-fp8c-prefill,wspipe-fp8t-relu2-prefill 2>&1 | tee "$OUT/smoke_s38.txt" | tail -6
  timeout "${S38_TESTS_TIMEOUT_S:-420}" python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider \
      --timeout 150 tests/test_ws_gemm.py tests/test_triton_moe.py \
      -k "pipelined or one_part or block_scalar or fp8_block or BLOCK or block" 2>&1 | tee "$OUT/s38_tests.txt" | tail -25
fi
if [[ "$stages" == *" optin-tests "* ]]; then
  # their tests; the per-test limit covers the first compiles of a test's variants (~10-30 s each) and still ends a
  # hang (a wrong barrier phase or byte count hangs rather than fails)
  timeout "${OPTIN_TESTS_TIMEOUT_S:-540}" python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider \
      --timeout 240 tests/test_ws_dec.py tests/test_ws_fp4_dec.py tests/test_ws_fp4.py 2>&1 \
      | tee "$OUT/optin_tests.txt" | tail -25
fi
if [[ "$stages" == *" ab-optin "* ]]; then
  # the opt-in kernels against the defaults, in-process (CUDA graphs, rounds interleaved)
  timeout 200 python3 benchmarks/decode_ab.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano,minimax-m2 \
      --weight-format bf16,fp8_tensor,fp8_channel,fp8_block --tokens 1,8 \
      --settings default,wsdec,wsdec3,wsdec4,wsdecr,tabler,wsdec2b,wsdectma,wsdecfused --rounds 2 2>&1 | tee "$OUT/ab_wsdec.txt" \
      | tail -40
  # (the FP4 decode kernel: cp.async token rows -- the default -- against the gather launch, 4 programs an SM)
  timeout 180 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
      --weight-format mxfp4,nvfp4 --tokens 1,8,64 --rounds 2 \
      --settings default,ws4dec,ws4dectma,ws4dec4,ws4decs,ws4dec4s,ws4dec4sr \
      2>&1 | tee "$OUT/ab_ws4dec.txt" | tail -20
  timeout 150 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4 \
      --tokens 2048,4096,8192 --settings default,ws4skip,ws4ch4,ws4pad,nows4 --rounds 2 2>&1 | tee "$OUT/ab_ws4pre.txt" \
      | tail -12
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
if [[ "$stages" == *" tune-fp8 "* ]]; then
  python3 -m fusedmoe tune --preset qwen3-30b-a3b,deepseek-v3-tp8,minimax-m2,deepseek-v3,mixtral-8x7b \
      --weight-format fp8_tensor,fp8_channel,fp8_block --max-candidates 12 --jobs 8 --budget-s "${TUNE_BUDGET_S:-300}" \
      --report "$OUT/tune_fp8.json" --no-progress 2>&1 | tee "$OUT/tune_fp8.log" | tail -30
  cp src/fusedmoe/configs/triton_moe_tuned.json "$OUT/"
fi
if [[ "$stages" == *" tune-fp4 "* ]]; then
  python3 -m fusedmoe tune --preset qwen3-30b-a3b,gpt-oss-120b,nemotron-nano --weight-format nvfp4,mxfp4,mxfp8 \
      --max-candidates 12 --jobs 8 --budget-s "${TUNE_BUDGET_S:-300}" \
      --report "$OUT/tune_fp4.json" --no-progress 2>&1 | tee "$OUT/tune_fp4.log" | tail -30
  cp src/fusedmoe/configs/triton_moe_tuned.json "$OUT/"
fi
if [[ "$stages" == *" tune-rest "* ]]; then
  # what the 2026-11-29 sessions had not tuned: the other presets in BF16 / FP8 block (what bench-all
  # measures), FP8 per channel and MXFP8 for the three main presets
  python3 -m fusedmoe tune --preset minimax-m2,deepseek-v3,mixtral-8x7b,qwen3-235b-a22b,nemotron-super,gpt-oss-20b \
      --weight-format bf16,fp8_block --max-candidates 8 --jobs 12 --budget-s "${TUNE_BUDGET_S:-260}" \
      --report "$OUT/tune_rest.json" --no-progress 2>&1 | tee "$OUT/tune_rest.log" | tail -30
  python3 -m fusedmoe tune --preset qwen3-30b-a3b,deepseek-v3-tp8,nemotron-nano --weight-format fp8_channel,mxfp8 \
      --max-candidates 8 --jobs 12 --budget-s "${TUNE_BUDGET_S2:-150}" \
      --report "$OUT/tune_rest2.json" --no-progress 2>&1 | tee "$OUT/tune_rest2.log" | tail -30
  cp src/fusedmoe/configs/triton_moe_tuned.json "$OUT/"
fi
TUNE_OUT="${TUNE_OUT:-src/fusedmoe/configs/triton_moe_tuned.json}"
# tune:PRESETS:FORMATS[:BUDGET_S[:TOKENS]] -- any list of presets x weight formats, merged into TUNE_OUT
# (the tuner stops starting cases once BUDGET_S, default 240, is spent; the stage is killed 80 s later)
for st in "$@"; do
  [[ $st == tune:* ]] || continue
  IFS=: read -r _ t_presets t_formats t_budget t_tokens <<< "$st"
  t_budget=${t_budget:-240}
  # one report / log per stage (device_x2.sh runs every stage as its own device_run.sh call)
  n_tune="$(printf '%s' "$st" | md5sum | cut -c1-8)"
  timeout $((t_budget + 80)) python3 -m fusedmoe tune --preset "$t_presets" --weight-format "$t_formats" \
      ${t_tokens:+--tokens "$t_tokens"} --max-candidates "${TUNE_MAX_CANDIDATES:-6}" --jobs "${TUNE_JOBS:-10}" \
      --budget-s "$t_budget" --out "$TUNE_OUT" --report "$OUT/tune_list_$n_tune.json" --no-progress 2>&1 \
      | tee "$OUT/tune_list_$n_tune.log" | tail -12
done
if [[ "$stages" == *" tune-cover-a "* ]]; then
  # presets with no tuned entry yet (gpt-oss BF16 / FP8 block, Llama-4 Scout), then Nemotron-Super in FP4
  timeout "${TUNE_A_TIMEOUT_S:-420}" python3 -m fusedmoe tune --preset gpt-oss-120b,gpt-oss-20b,llama4-scout \
      --weight-format bf16,fp8_block --max-candidates 8 --jobs 10 --budget-s "${TUNE_BUDGET_S:-220}" --out "$TUNE_OUT" \
      --report "$OUT/tune_cover_a.json" --no-progress 2>&1 | tee "$OUT/tune_cover_a.log" | tail -20
  timeout "${TUNE_A2_TIMEOUT_S:-200}" python3 -m fusedmoe tune --preset nemotron-super,minimax-m2 --weight-format nvfp4,mxfp4 \
      --max-candidates 8 --jobs 10 --budget-s "${TUNE_BUDGET_S2:-120}" --out "$TUNE_OUT" \
      --report "$OUT/tune_cover_a2.json" --no-progress 2>&1 | tee "$OUT/tune_cover_a2.log" | tail -20
fi
if [[ "$stages" == *" tune-cover-b "* ]]; then
  # the TP8 shards in BF16 and FP8 block at every token bucket
  timeout "${TUNE_B_TIMEOUT_S:-300}" python3 -m fusedmoe tune \
      --preset qwen3-30b-a3b-tp8,qwen3-235b-a22b-tp8,minimax-m2-tp8,nemotron-nano-tp8,nemotron-super-tp8,gpt-oss-120b-tp8,mixtral-8x7b-tp8,llama4-scout-tp8 \
      --weight-format bf16,fp8_block --max-candidates 6 --jobs 10 --budget-s "${TUNE_BUDGET_S:-200}" --out "$TUNE_OUT" \
      --report "$OUT/tune_cover_b.json" --no-progress 2>&1 | tee "$OUT/tune_cover_b.log" | tail -20
fi
if [[ "$stages" == *" tune-fp8-prefill "* ]]; then
  # FP8 per tensor / per channel prefill with the promoted (default) accumulation: the wider K and
  # weight tiles that fit only with fewer stages (the tuner keeps them since session 5)
  timeout "${TUNE_C_TIMEOUT_S:-220}" python3 -m fusedmoe tune --preset nemotron-nano,qwen3-30b-a3b,deepseek-v3-tp8 \
      --weight-format fp8_tensor,fp8_channel --tokens 512,4096 --max-candidates 24 --jobs 10 \
      --budget-s "${TUNE_BUDGET_S:-160}" --out "$TUNE_OUT" \
      --report "$OUT/tune_fp8_prefill.json" --no-progress 2>&1 | tee "$OUT/tune_fp8_prefill.log" | tail -20
fi
if [[ "$stages" == *" tune-cover-c "* ]]; then
  # FP8 per tensor / per channel for the full-size presets not tuned yet (harness cases first)
  timeout "${TUNE_D_TIMEOUT_S:-280}" python3 -m fusedmoe tune \
      --preset minimax-m2,deepseek-v3,mixtral-8x7b,qwen3-235b-a22b,nemotron-super,gpt-oss-120b,llama4-scout,gpt-oss-20b \
      --weight-format fp8_tensor,fp8_channel --max-candidates 8 --jobs 10 --budget-s "${TUNE_BUDGET_S2:-220}" \
      --out "$TUNE_OUT" --report "$OUT/tune_cover_c.json" --no-progress 2>&1 | tee "$OUT/tune_cover_c.log" | tail -20
fi
if [[ "$stages" == *" tune-cover-d "* ]]; then
  # FP8 per tensor / per channel for the remaining full-size presets, then FP4 for the presets
  # without FP4 entries
  timeout "${TUNE_E_TIMEOUT_S:-200}" python3 -m fusedmoe tune --preset nemotron-super,gpt-oss-120b,llama4-scout,gpt-oss-20b \
      --weight-format fp8_tensor,fp8_channel --max-candidates 8 --jobs 10 --budget-s "${TUNE_BUDGET_S:-150}" \
      --out "$TUNE_OUT" --report "$OUT/tune_cover_d.json" --no-progress 2>&1 | tee "$OUT/tune_cover_d.log" | tail -20
  timeout "${TUNE_E2_TIMEOUT_S:-200}" python3 -m fusedmoe tune --preset minimax-m2,deepseek-v3,qwen3-235b-a22b,mixtral-8x7b,llama4-scout,gpt-oss-20b \
      --weight-format nvfp4,mxfp4 --max-candidates 8 --jobs 10 --budget-s "${TUNE_BUDGET_S2:-150}" \
      --out "$TUNE_OUT" --report "$OUT/tune_cover_d2.json" --no-progress 2>&1 | tee "$OUT/tune_cover_d2.log" | tail -20
fi
if [[ "$stages" == *" eager "* ]]; then
  timeout "${EAGER_TIMEOUT_S:-120}" python3 benchmarks/eager_overhead.py --preset qwen3-30b-a3b,deepseek-v3-tp8,nemotron-nano \
      --weight-format bf16,fp8_block,nvfp4 --tokens 1,8 2>&1 | tee "$OUT/eager_overhead.log" | tail -20
fi
if [[ "$stages" == *" profile "* ]]; then
  # where an eager call's host time goes (cProfile + the kernels one call launches)
  timeout "${PROFILE_TIMEOUT_S:-150}" python3 benchmarks/eager_overhead.py --preset "${PROFILE_PRESETS:-qwen3-30b-a3b,deepseek-v3-tp8}" \
      --weight-format "${PROFILE_FORMATS:-bf16,fp8_block}" --tokens 1 --profile 200 2>&1 | tee "$OUT/eager_profile.log" | tail -8
fi
if [[ "$stages" == *" breakdown "* ]]; then
  # per-kernel GPU time of one call (torch.profiler)
  timeout "${BREAKDOWN_TIMEOUT_S:-200}" python3 benchmarks/kernel_breakdown.py --preset "${BREAKDOWN_PRESETS:-qwen3-30b-a3b,deepseek-v3-tp8}" \
      --weight-format "${BREAKDOWN_FORMATS:-bf16,fp8_tensor}" --tokens "${BREAKDOWN_TOKENS:-1,8,2048,8192}" --calls 10 \
      2>&1 | tee "$OUT/breakdown.log" | tail -30
fi
if [[ "$stages" == *" ncu "* ]]; then
  # Nsight Compute on every kernel of one call at a few points (benchmarks/ncu_profile.py): per point a
  # report, its details page (speed of light, occupancy, scheduler, warp states) and its SASS
  # source page (stall samples per instruction) as CSV, their text summary (benchmarks/ncu_summary.py),
  # packed into ncu.tgz (NCU_GEMM1='{"split_k": 4}': GEMM1 config fields over the chosen ones; NCU_TAG=x:
  # file names and ncu_x.tgz carry the tag)
  mkdir -p "$OUT/ncu"
  for pt in ${NCU_POINTS:-gpt-oss-120b:mxfp4:1 gpt-oss-120b:mxfp4:64 nemotron-super:nvfp4:64}; do
    tag="${pt//:/_}${NCU_TAG:+_$NCU_TAG}"
    timeout "${NCU_TIMEOUT_S:-240}" ncu --clock-control none --profile-from-start off \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
        --section SourceCounters --import-source no -f -o "$OUT/ncu/$tag" \
        python3 benchmarks/ncu_profile.py --point "$pt" ${NCU_GEMM1:+--gemm1 "$NCU_GEMM1"} > "$OUT/ncu/$tag.log" 2>&1
    echo "ncu $pt rc=$?"; tail -3 "$OUT/ncu/$tag.log"
    ncu -i "$OUT/ncu/$tag.ncu-rep" --page details --csv > "$OUT/ncu/$tag.details.csv" 2>&1
    ncu -i "$OUT/ncu/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu/$tag.sass.csv" 2>&1
    python3 benchmarks/ncu_summary.py details "$OUT/ncu/$tag.details.csv" > "$OUT/ncu/$tag.summary.txt" 2>&1
    # the GEMM kernels by name prefix (the Triton GEMMs, the warp-specialized ones), with their K loops' view
    for k in ${NCU_KERNELS:-_gemm1 _gemm2 _ws}; do
      python3 benchmarks/ncu_summary.py stalls "$OUT/ncu/$tag.sass.csv" $k 25 100000 >> "$OUT/ncu/$tag.summary.txt" 2>&1
    done
    ls -la "$OUT/ncu/$tag"*
  done
  tar czf "$OUT/ncu${NCU_TAG:+_$NCU_TAG}.tgz" -C "$OUT" ncu && rm -rf "$OUT/ncu"
fi
# FP4 decode / prefill of the shapes issue 4 names (Nemotron-3 NVFP4 + ReLU2, gpt-oss-120b): bench_fp4 NAME [ARGS]
bench_fp4() {
  local name=$1; shift
  timeout "${BENCH_FP4_TIMEOUT_S:-200}" python3 -m fusedmoe bench --preset nemotron-super,nemotron-nano,gpt-oss-120b \
      --weight-format nvfp4,mxfp4 --tokens 1,8,64,4096 --peers triton --quick-ceilings --out "$OUT/$name" \
      "$@" --no-progress 2>&1 | tee "$OUT/$name.log" | tail -30
}
if [[ "$stages" == *" bench-fp4 "* ]]; then
  bench_fp4 bench_fp4 ${BENCH_FP4_ARGS:-}  # BENCH_FP4_ARGS: e.g. --compare-heuristic
fi
if [[ "$stages" == *" bench-fp4-tuned "* ]]; then
  # the same with the table a tune:... stage of this call wrote (TUNE_OUT)
  bench_fp4 bench_fp4_tuned --tuned-configs "${TUNE_OUT:-src/fusedmoe/configs/triton_moe_tuned.json}"
fi
if [[ "$stages" == *" dist "* ]]; then
  # expert / tensor parallelism on 2 GPUs (benchmarks/DISTRIBUTED.md): world size 1 and 2, then the NCCL tests
  for N in ${DIST_WORLDS:-1 2}; do
    timeout "${DIST_TIMEOUT_S:-120}" torchrun --nproc-per-node $N benchmarks/bench_distributed.py --model deepseek-v3 \
        --modes ep,tp --tokens "${DIST_TOKENS:-1,8,32,128,512,2048}" --iters 20 --out "$OUT/dist_deepseek.jsonl" \
        > "$OUT/dist_deepseek_w$N.log" 2>&1; echo "deepseek-v3 W=$N rc=$?"; tail -5 "$OUT/dist_deepseek_w$N.log"
  done
  python3 benchmarks/bench_distributed.py --summarize "$OUT/dist_deepseek.jsonl" 2>&1 | tee "$OUT/dist_deepseek_summary.txt" | tail -40
  timeout "${DIST_TESTS_TIMEOUT_S:-200}" python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 180 tests/test_distributed.py 2>&1 \
      | tee "$OUT/gpu_tests_dist.log" | tail -15
fi
if [[ "$stages" == *" bench-all "* ]]; then
  # one table per model preset (TP1 and TP8 shards), BF16 and FP8 block, decode and prefill, vs SGLang
  timeout "${BENCH_ALL_TIMEOUT_S:-500}" python3 -m fusedmoe bench --all-presets --weight-format bf16,fp8_block \
      --tokens "${BENCH_ALL_TOKENS:-1,8,64,512,4096}" \
      --peers triton,sglang --sglang-path .peers/vendor --out "$OUT/bench_all" --budget-s "${BENCH_ALL_BUDGET_S:-420}" \
      --no-progress 2>&1 | tee "$OUT/bench_all.log" | tail -40
fi
if [[ "$stages" == *" bench "* ]]; then
  python3 -m fusedmoe bench --compare-heuristic --sglang-path .peers/vendor --out "$OUT" --budget-s 300 \
      --no-progress 2>&1 | tee "$OUT/bench.log" | tail -40
fi
if [[ "$stages" == *" alzero "* ]]; then
  # set_align_zero_fill (default since the twenty-sixth session): its GPU test, then the FP4 bench at decode with
  # it off (FUSEDMOE_ALIGN_ZERO=0) and on, twice each, in separate processes (the harness peers fusedmoe-noalzero /
  # fusedmoe do the same for BF16 / FP8: PEERS=fusedmoe,fusedmoe-noalzero PLAN_ARGS="--tokens 1 8 32")
  timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 180 tests/test_triton_moe.py \
      -k split_k_cuda_graph 2>&1 | tee "$OUT/alzero_test.log" | tail -5
  AZ="--preset ${ALZERO_PRESETS:-gpt-oss-120b,nemotron-super,deepseek-v3} --weight-format mxfp4,nvfp4 --tokens 1,8
      --peers triton --quick-ceilings --no-progress --no-plot --budget-s 60"
  for r in 1 2; do
    FUSEDMOE_ALIGN_ZERO=0 timeout 90 python3 -m fusedmoe bench $AZ --out "$OUT/az_off$r" > "$OUT/az_off$r.log" 2>&1
    FUSEDMOE_ALIGN_ZERO=1 timeout 90 python3 -m fusedmoe bench $AZ --out "$OUT/az_on$r" > "$OUT/az_on$r.log" 2>&1
  done
  python3 benchmarks/results/h200-2026-12-04-s25/cmp.py "$OUT" az_off1,az_off2 az_on1,az_on2 off on \
      | tee "$OUT/alzero_ab.txt"
  (cd "$OUT" && tar czf alzero.tgz az_off? az_on? az_*.log && rm -rf az_off? az_on? az_*.log)  # 8 files come back
fi
if [[ "$stages" == *" dot-repro "* ]]; then
  # the dot-order 8-warp failure without FP4 (twenty-sixth session): bf16 register A x the transposed cp.async tile
  timeout 120 python3 benchmarks/dot_order_repro.py --runs 20 2>&1 | tee "$OUT/dot_repro.txt" | tail -6
fi
if [[ "$stages" == *" dot-race "* ]]; then
  # the dot-order activations' race (twenty-fifth session): bit stability and speed per setting and variant, each
  # probe in its own process under a timeout; --allow-racy reproduces the swapped 8-warp GEMM1's run-to-run bits
  timeout 200 python3 benchmarks/dot_order_probe.py --runs 40 --variants 2>&1 | tee "$OUT/dot_probe.txt" | tail -60
  timeout 120 python3 benchmarks/dot_order_probe.py --runs 40 --allow-racy 2>&1 | tee "$OUT/dot_probe_racy.txt" | tail -30
fi
