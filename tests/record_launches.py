"""Record the Triton kernel launches of a few small layers (in Triton's interpreter, on the CPU) and compile each
recorded specialization for another target with Triton's bundled ptxas: the whole path a layer takes -- routing,
align, GEMMs, combine -- not only the GEMM variants of the compile tables. ``tests/test_arch_support.py`` runs
``python record_launches.py record FILE`` and then ``python record_launches.py compile FILE CC`` (the first with
TRITON_INTERPRET=1, the second without).

A recorded launch is the kernel's module and name and, per parameter, a tensor's dtype and 16-byte alignment, a
scalar's type, or a constexpr's value. The GEMMs are the interpreter's flavour (fp32 operand tiles, no inline
PTX): the compile tables cover their GPU flavour.
"""

import os
import pickle
import re
import sys

import torch


def _desc(v):
    if isinstance(v, torch.Tensor):
        return ("ptr", str(v.dtype).replace("torch.", ""), v.data_ptr() % 16 == 0)
    if isinstance(v, bool):
        return ("i1", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("fp32", v)
    if v is None:
        return ("none",)
    return ("const", v)


def record(path: str) -> None:
    import inspect

    import fusedmoe as fm
    from fusedmoe.backends import triton_moe
    from fusedmoe.kernels import _host
    from fusedmoe.formats import triton_quant
    from fusedmoe.routing import triton_routing

    recs = {}

    def wrap(mod):
        orig = mod.launch

        def rec(kernel, grid, *args, **kwargs):
            fn = getattr(kernel, "fn", kernel)
            d = {n: _desc(a) for n, a in zip(inspect.signature(fn).parameters, args)}
            d.update({k: _desc(v) for k, v in kwargs.items()})
            recs[(fn.__module__, fn.__name__, repr(sorted(d.items())))] = (fn.__module__, fn.__name__, d)
            return orig(kernel, grid, *args, **kwargs)

        mod.launch = rec

    for m in (triton_routing, triton_quant, triton_moe):
        wrap(m)
    _host.E4M3_BYTES_FORCED = True  # E4M3 numbers as bytes: how the launcher hands them over below sm_89
    g = torch.Generator().manual_seed(0)
    E, H, I = 8, 128, 64
    dsv3 = fm.RoutingConfig(fm.RoutingMethod.DEEPSEEK_V3, top_k=4, n_group=4, topk_group=3, routed_scaling_factor=2.5)
    renorm = fm.RoutingConfig(fm.RoutingMethod.RENORMALIZE, top_k=4)
    # (format, activation, tokens, routing): one-program and multi-program align (<= / > 256 slots), grouped routing
    F, A = fm.Format, fm.Activation
    for fmt, act, T, routing, kw in ((F.BF16, A.SWIGLU, 3, dsv3, {}), (F.BF16, A.RELU2, 70, renorm, {}),
                                     (F.MXFP4, A.SWIGLU_OAI, 3, renorm, {}), (F.NVFP4, A.RELU2, 3, renorm, {}),
                                     (F.FP8_TENSOR, A.RELU2, 3, renorm, dict(input_scale=0.02,
                                                                             intermediate_scale=0.02)),
                                     (F.FP8_TENSOR, A.SWIGLU, 70, renorm, {}), (F.FP8_BLOCK, A.SWIGLU, 3, renorm, {}),
                                     (F.MXFP8, A.GEGLU, 3, renorm, {})):
        M = 2 * I if act.is_gated else I
        w13, w2 = torch.randn(E, M, H, generator=g) * 0.1, torch.randn(E, H, I, generator=g) * 0.1
        w = fm.ExpertWeights.from_float(w13, w2, activation=act, format=fmt, **kw)
        x = torch.randn(T, H, generator=g).to(torch.float16)
        logits = torch.randn(T, E, generator=g)
        bias = torch.randn(E, generator=g) if routing is dsv3 else None
        fm.FusedMoE(w, routing=routing, activation=act, backend="triton")(x, logits, bias)
        triton_routing.route_triton(logits, routing, bias)
    with open(path, "wb") as f:
        pickle.dump(list(recs.values()), f)


_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "int32": "i32", "int64": "i64", "uint8": "u8",
          "int16": "i16", "int8": "i8", "float8_e4m3fn": "fp8e4nv", "bool": "i1"}


def compile_all(path: str, cc: int) -> None:
    """Print ``RESULT|module.kernel|ok`` or the compile error's first line, per recorded specialization."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    with open(path, "rb") as f:
        recs = pickle.load(f)
    for mod, name, d in recs:
        fn = getattr(importlib.import_module(mod), name)
        sig, ce, attrs, opts = {}, {}, {}, {}
        for k in ("num_warps", "num_stages"):
            if k in d:
                opts[k] = d[k][1]
        for i, p in enumerate(fn.params):
            v = d.get(p.name, _desc(p.default))
            if p.is_constexpr or v[0] in ("none", "const"):
                ce[p.name] = v[1] if len(v) > 1 else None
                sig[p.name] = "constexpr"
            elif v[0] == "ptr":
                sig[p.name] = "*" + _TYPES[v[1]]
                if v[2]:
                    attrs[(i,)] = [["tt.divisibility", 16]]
            elif v[0] == "int":
                sig[p.name] = "i32" if -2**31 <= v[1] < 2**31 else "i64"
            else:
                sig[p.name] = v[0]
        try:
            triton.compile(ASTSource(fn, sig, constexprs=ce, attrs=attrs), target=GPUTarget("cuda", cc, 32),
                           options=opts)
            res = "ok"
        except Exception as e:  # noqa: BLE001 - the error is the result
            t = str(e)
            m = re.search(r"error\s*: (.*)", t) or re.search(r"(type \w+ not supported[^.\"]*)", t)
            res = (m.group(1) if m else f"{type(e).__name__}: {t[:200]}").strip().replace("|", "/").replace("\n", " ")
        print(f"RESULT|{mod}.{name}|{res}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "record":
        assert os.environ.get("TRITON_INTERPRET") == "1", "record in Triton's interpreter (TRITON_INTERPRET=1)"
        record(sys.argv[2])
    else:
        compile_all(sys.argv[2], int(sys.argv[3]))
