set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
# A. MX weights x MXFP8 activations at decode: E4M3 partial sums (default) vs dequantized, plain vs swizzled nibbles
A="--preset gpt-oss-120b,nemotron-super --weight-format mxfp4,mxfp8 --act-format mxfp8 --tokens 1,8,64 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 50"
FUSEDMOE_FP4_LAYOUT=tiled timeout 80 python3 -m fusedmoe bench $A --out $OUT/mxdot_tiled > $OUT/mxdot_tiled.log 2>&1; el "mxdot tiled rc=$?"
FUSEDMOE_MXDOT_FORMATS=none timeout 80 python3 -m fusedmoe bench $A --out $OUT/deq_swz > $OUT/deq_swz.log 2>&1; el "deq swz rc=$?"
FUSEDMOE_MXDOT_FORMATS=none FUSEDMOE_FP4_LAYOUT=tiled timeout 80 python3 -m fusedmoe bench $A --out $OUT/deq_tiled > $OUT/deq_tiled.log 2>&1; el "deq tiled rc=$?"
python3 .calls/cmp.py $OUT mxdot_tiled deq_swz e4m3T deqS > $OUT/ab_mx8.txt; python3 .calls/cmp.py $OUT mxdot_tiled deq_tiled e4m3T deqT >> $OUT/ab_mx8.txt
# B. upper bound of K-permuted activations in memory: 16-bit activation tiles without the register permutation
rm -rf /tmp/hk && mkdir -p /tmp/hk && cp -r src /tmp/hk/ && (cd /tmp/hk && python3 $OLDPWD/.calls/hack_noperm.py)
Bq="--preset gpt-oss-120b,nemotron-super --weight-format mxfp4,nvfp4 --tokens 8,64,4096 --peers triton --quick-ceilings --no-progress --no-plot --no-check --budget-s 60"
timeout 90 python3 -m fusedmoe bench $Bq --out $OUT/perm > $OUT/perm.log 2>&1; el "perm rc=$?"
PYTHONPATH=/tmp/hk/src timeout 90 python3 -m fusedmoe bench $Bq --out $OUT/noperm > $OUT/noperm.log 2>&1; el "noperm rc=$?"
python3 .calls/cmp.py $OUT perm noperm perm noperm > $OUT/ab_perm.txt
# C. FP4 decode entries of the other presets, tuned on the swizzled words
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/tuned.json
left=$(( 560 - ($(date +%s)-T0) ))
el "tune budget $((left-25))"
timeout $left python3 -m fusedmoe tune --preset deepseek-v3,qwen3-235b-a22b,minimax-m2,mixtral-8x7b,llama4-scout --weight-format nvfp4,mxfp4 --tokens 1,8,64 --out $OUT/tuned.json --report $OUT/tune_report.json --budget-s $((left-25)) --max-candidates 8 --no-progress > $OUT/tune.txt 2>&1; el "tune rc=$?"
tail -34 $OUT/tune.txt
cd $OUT && tar czf r.tgz mxdot_tiled deq_swz deq_tiled perm noperm *.log 2>/dev/null; rm -rf mxdot_tiled deq_swz deq_tiled perm noperm *.log
cat ab_mx8.txt ab_perm.txt
