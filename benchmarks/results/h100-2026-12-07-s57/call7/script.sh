export PYTHONPATH=$PWD/src
for r in 1 2; do for t in shipped tuned; do
  [[ $t == tuned ]] && cp .calls/tuned6.json src/fusedmoe/configs/triton_moe_tuned.json || git checkout -q src/fusedmoe/configs/triton_moe_tuned.json
  echo "== $t round $r"
  timeout 60 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b --weight-format nvfp4 --tokens 8,64 --calls 20 --bw 3.1 2>&1 | grep floor | cut -c1-100
  timeout 60 python3 benchmarks/kernel_breakdown.py --preset nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 --tokens 8,32 --calls 20 --bw 3.1 2>&1 | grep floor | cut -c1-100
done; done > $OUT/ab_table.txt; cat $OUT/ab_table.txt
