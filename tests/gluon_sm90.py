"""Compile a Gluon kernel for sm_90 on any machine (Triton's bundled ptxas) and read its SASS: the CPU tests of the
Gluon kernels (``test_ws_gemm.py``, ``test_ws_fp4.py``) run it in their compile scripts."""

import os
import subprocess
import tempfile


def compile_sm90(kernel, sig: dict, constexprs: dict, num_warps: int = 4, **options):
    """(compiled kernel, its SASS text) of the Gluon ``kernel`` for sm_90 with the argument types ``sig`` and the
    ``constexprs``; ``options``: more compile options (``maxnreg=...``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sig = dict(sig, **{k: "constexpr" for k in constexprs})
    k = triton.compile(GluonASTSource(kernel, sig, constexprs=constexprs, attrs={}),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, **options))
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    try:
        cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    return k, sass
