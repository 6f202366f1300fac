#!/usr/bin/env bash
# Fifty-sixth session, call 3 (H100, warm after call 2): the Gluon 16-bit / FP8 decode kernel (decode_ab's wsdec: the
# switch on; wsdecr: the kernel at every decode point) against the default (Triton GEMMs) for the ReLU^2 shapes of the
# SwiGLU models at 1 / 8 tokens -- the SwiGLU BF16 one-token layers run that kernel (call 2's breakdown), ReLU^2 not.
export PYTHONPATH=$PWD/src; nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 150 python3 benchmarks/decode_ab.py --preset qwen3-30b-a3b,deepseek-v3-tp8,minimax-m2,mixtral-8x7b \
  --activation relu2 --weight-format bf16,fp8_channel --tokens 1,8 --settings default,wsdec,wsdecr --rounds 2 \
  --budget-s 0.2 > $OUT/ab_relu2_wsdec.txt 2>&1; echo rc=$?; cut -c1-120 $OUT/ab_relu2_wsdec.txt | grep -v Warn
