"""Scale-out over ``torch.distributed``: expert parallelism (experts split over ranks) and
tensor parallelism (the intermediate dimension split over ranks). NCCL for CUDA tensors, gloo
for CPU tensors; no transport of our own. ``benchmarks/DISTRIBUTED.md`` documents both and the
scaling benchmark.

* :class:`ExpertParallelMoE` — global routing, token dispatch by ``all_to_all_single`` (variable
  splits), ``all_gather`` + reduce-scatter, or ``all_reduce`` (replicated tokens); ``"auto"``
  chooses between the first two with :func:`choose_dispatch`. :func:`expert_partition` gives
  each rank's expert range (even, or uneven with ``expert_counts``).
* :class:`TensorParallelMoE` — I split with :func:`intermediate_shards`; shards from float
  (:func:`shard_float_weights`, any format, padded and quantized per shard) or exactly from
  prepared quantized weights (:func:`shard_expert_weights`, scale blocks kept); fp32 all-reduce.
"""

from .expert_parallel import (DEFAULT_ALL_GATHER_MAX_TOKENS, DISPATCH_MODES, ExpertParallelMoE, choose_dispatch,
                              expert_partition)
from .tensor_parallel import (FloatShard, TensorParallelMoE, intermediate_shards, shard_expert_weights,
                              shard_float_weights, shard_granularity)

__all__ = [
    "DEFAULT_ALL_GATHER_MAX_TOKENS",
    "DISPATCH_MODES",
    "ExpertParallelMoE",
    "FloatShard",
    "TensorParallelMoE",
    "choose_dispatch",
    "expert_partition",
    "intermediate_shards",
    "shard_expert_weights",
    "shard_float_weights",
    "shard_granularity",
]
