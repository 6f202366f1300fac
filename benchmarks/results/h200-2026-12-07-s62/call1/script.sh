#!/usr/bin/env bash
# Planned in the sixty-first session: the next session's first call (any GPU, ~400 s). (1) The FP4 GPU tests under
# the sixty-first session's defaults -- the pair order for non-gated layers, the 256-token two-steps path removed, the
# rings' unsigned positions -- and its opt-in GEMM1 weight rows in the pair order (set_ws_fp4_pair_rows: same bits as
# the epilogue's permutation). (2) The A/B that decides the pair order for gated layers: gpt-oss-120b with the pair
# order by the epilogue (ws4pairs) and by the rows (ws4pairs+ws4prows); Nemotron (pair order on by default) with the
# rows (ws4prows). If ws4pairs+ws4prows wins on gpt-oss-120b, make "auto" take every layer with the rows; if ws4prows
# wins on Nemotron, make the rows the default.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 170 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 150 tests/test_ws_fp4.py \
  tests/test_ws_fp4_dec.py > $OUT/tests_fp4.txt 2>&1; echo "fp4 tests rc=$?"; tail -3 $OUT/tests_fp4.txt
timeout 120 python3 benchmarks/decode_ab.py --preset gpt-oss-120b --weight-format mxfp4,nvfp4 --tokens 8192,4096,2048 \
  --settings default,ws4pairs,ws4pairs+ws4prows --rounds 5 --budget-s 0.3 > $OUT/ab_gated.txt 2>&1; echo "ab rc=$?"
grep -vE "^\s*$" $OUT/ab_gated.txt | tail -7 | cut -c1-150
timeout 150 python3 benchmarks/decode_ab.py --preset nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 8192,4096,2048 --settings default,ws4prows --rounds 5 --budget-s 0.3 > $OUT/ab_rows.txt 2>&1
echo "ab rc=$?"; grep -vE "^\s*$" $OUT/ab_rows.txt | tail -13 | cut -c1-150
