#!/usr/bin/env bash
# s28 call 5: the Gluon MXFP4 prefill prototype with the library's PTX converter (cvt 1) and its MX fold (cvt 2),
# 128- and 256-token tiles
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s28_call5.sh "$OUT/script.sh"
P="python3 benchmarks/gluon_fp4_prefill.py --n 2880 --k 2880"
timeout 120 $P --experts 128 --rows 128 --bt 128 --cvt 0,1,2 --stages 4 2>&1 | tee "$OUT/proto.txt" | grep -v "^torch"
timeout 100 $P --experts 32 --rows 512 --bt 128 --cvt 2 --stages 3,4 2>&1 | tee -a "$OUT/proto.txt" | grep -v "^torch"
timeout 100 $P --experts 32 --rows 512 --bt 256 --cvt 2 --stages 3,4 2>&1 | tee -a "$OUT/proto.txt"
