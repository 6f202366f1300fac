set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
left() { echo $(( 575 - ($(date +%s)-T0) )); }
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 140 tests/test_triton_fp4.py -k "dot_order or swap_ab_prefill or k_tail or decode_tiles" > $OUT/gpu_dot.txt 2>&1; el "gpu dot tests rc=$?"
tail -4 $OUT/gpu_dot.txt
D="--preset gpt-oss-120b,gpt-oss-20b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 --tokens 512,4096 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 60"
FUSEDMOE_A_DOT_ORDER=0 timeout 90 python3 -m fusedmoe bench $D --out $OUT/perm1 > $OUT/perm1.log 2>&1; el "perm1 rc=$?"
timeout 90 python3 -m fusedmoe bench $D --out $OUT/dot1 > $OUT/dot1.log 2>&1; el "dot1 rc=$?"
M="--preset gpt-oss-120b,nemotron-super --weight-format mxfp4 --act-format mxfp8 --tokens 1,8,64 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 30"
timeout 50 python3 -m fusedmoe bench $M --out $OUT/mx_e4m3 > $OUT/mx_e4m3.log 2>&1; el "mx e4m3 rc=$?"
FUSEDMOE_MXDOT_FORMATS=mxfp8 timeout 50 python3 -m fusedmoe bench $M --out $OUT/mx_deqT > $OUT/mx_deqT.log 2>&1; el "mx deqT rc=$?"
FUSEDMOE_MXDOT_FORMATS=mxfp8 FUSEDMOE_FP4_LAYOUT=swizzled timeout 50 python3 -m fusedmoe bench $M --out $OUT/mx_deqS > $OUT/mx_deqS.log 2>&1; el "mx deqS rc=$?"
N="--preset deepseek-v3,qwen3-235b-a22b,minimax-m2,mixtral-8x7b,llama4-scout --weight-format nvfp4,mxfp4 --tokens 1,8,64 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 50"
timeout 75 python3 -m fusedmoe bench $N --tuned-configs .calls/tuned_c1.json --out $OUT/new1 > $OUT/new1.log 2>&1; el "new1 rc=$?"
timeout 75 python3 -m fusedmoe bench $N --out $OUT/old1 > $OUT/old1.log 2>&1; el "old1 rc=$?"
if [ $(left) -gt 130 ]; then
FUSEDMOE_A_DOT_ORDER=0 timeout 65 python3 -m fusedmoe bench $D --out $OUT/perm2 > $OUT/perm2.log 2>&1; el "perm2 rc=$?"
timeout 65 python3 -m fusedmoe bench $D --out $OUT/dot2 > $OUT/dot2.log 2>&1; el "dot2 rc=$?"
fi
python3 .calls/cmp.py $OUT perm1,perm2 dot1,dot2 perm dot > $OUT/ab_dot.txt
python3 .calls/cmp.py $OUT mx_e4m3 mx_deqT e4m3 deqT > $OUT/ab_mx8.txt; python3 .calls/cmp.py $OUT mx_e4m3 mx_deqS e4m3 deqS >> $OUT/ab_mx8.txt
python3 .calls/cmp.py $OUT old1 new1 old new > $OUT/ab_tune.txt
cd $OUT && tar czf r.tgz perm* dot* mx_* new1 old1 *.log 2>/dev/null; rm -rf perm? dot? mx_e4m3 mx_deqT mx_deqS new1 old1 *.log
cat ab_dot.txt ab_mx8.txt ab_tune.txt
