set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 1,8,64 --weight-format mxfp4,nvfp4 --peers triton --quick-ceilings --no-progress --no-plot"
python3 .calls/mk_table.py src/fusedmoe/configs/triton_moe_tuned.json /tmp/var.json
FUSEDMOE_MX_KMAJOR=1 timeout 170 python3 -m fusedmoe bench $B --budget-s 140 --tuned-configs /tmp/var.json --out $OUT/var > $OUT/var.log 2>&1; el "var rc=$?"
timeout 170 python3 -m fusedmoe bench $B --budget-s 140 --out $OUT/base > $OUT/base.log 2>&1; el "base rc=$?"
for v in base var; do echo "== $v"; grep -E "^\| (nemotron|gpt)" $OUT/$v/bench.md | cut -c1-200 | head -8; grep -iE "error|fail" $OUT/$v.log | head -5; done
cd $OUT && tar czf r.tgz base var && rm -rf base var
