"""Benchmarks, tuner and correctness sweep behind ``fusedmoe bench``, ``tune`` and ``check``.

Modules:

* :mod:`~fusedmoe.bench.presets` -- model shape presets (docs/models.md section 9), weight and
  input generation, the :class:`~fusedmoe.bench.presets.BenchCase` of one measured layer.
* :mod:`~fusedmoe.bench.roofline` -- ceilings measured on the device, bytes and flops of a MoE
  forward, the time floor and percent of roofline, geometric means by token region.
* :mod:`~fusedmoe.bench.timing` -- CUDA-graph replay / CUDA-event / wall-clock timing.
* :mod:`~fusedmoe.bench.peers` -- what is measured: our triton backend, our reference,
  ``torch._grouped_mm`` and SGLang's Triton fused MoE (when its sources are importable).
* :mod:`~fusedmoe.bench.runner` -- the ``bench`` loop, JSON results, the rich table, summaries.
* :mod:`~fusedmoe.bench.plot` -- PNG plot of time and percent of roofline against tokens.
* :mod:`~fusedmoe.bench.tune` -- kernel-config search, validated against the reference.
* :mod:`~fusedmoe.bench.check` -- correctness sweep of every backend.

Nothing here is imported by ``import fusedmoe``; the CLI imports it on demand.
"""
