"""Compile a Gluon kernel for sm_90 on any machine (Triton's bundled ptxas) and read its SASS: the CPU tests of the
Gluon kernels (``test_ws_gemm.py``, ``test_ws_fp4.py``) run it in their compile scripts."""

import os
import subprocess
import tempfile

# the head of a compile script run by ``test_triton_fp4.run_sm90_script`` (``ROOT`` defined before it): the JIT
# instead of the interpreter, the repository's sources, Gluon's language and this module's ``compile_sm90``
SCRIPT_HEAD = r'''
import os, re, sys
os.environ.pop("TRITON_INTERPRET", None)
sys.path[:0] = [os.path.join(ROOT, "src"), os.path.join(ROOT, "tests")]
from triton.experimental.gluon import language as gl
from gluon_sm90 import compile_sm90, k_loop, sass_instructions
'''


def compile_sm90(kernel, sig: dict, constexprs: dict, num_warps: int = 4, aligned=(), **options):
    """(compiled kernel, its SASS text) of the Gluon ``kernel`` for sm_90 with the argument types ``sig`` and the
    ``constexprs``; ``aligned``: names of arguments specialized as the JIT does for 16-byte aligned pointers and
    integers divisible by 16 (``tt.divisibility``); ``options``: more compile options (``maxnreg=...``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sig = dict(sig, **{k: "constexpr" for k in constexprs})
    attrs = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    k = triton.compile(GluonASTSource(kernel, sig, constexprs=constexprs, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, **options))
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    try:
        cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    return k, sass



def sass_instructions(sass: str) -> list:
    """(address, instruction text) of every instruction in ``sass`` (cuobjdump's listing)."""
    import re

    return [(int(m.group(1), 16), m.group(2)) for m in
            (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?);", line) for line in sass.splitlines()) if m]


def k_loop(ins: list, mma: str = "GMMA") -> list:
    """The instructions of the shortest loop (a backward branch's range) that holds an ``mma`` instruction: a
    warp-specialized kernel's K loop. ``ins``: :func:`sass_instructions`."""
    import re

    at = {a: n for n, (a, _) in enumerate(ins)}
    loops = []
    for n, (a, t) in enumerate(ins):
        m = re.search(r"BRA (0x[0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            body = [x for _, x in ins[at[int(m.group(1), 16)]:n + 1]]
            if any(mma in x for x in body):
                loops.append(body)
    return min(loops, key=len)

class LaunchCapture:
    """Stands in for a Gluon kernel in the launcher tests: ``kernel[grid](*args, **kw)`` records ``(grid, args, kw)``
    in ``calls`` (the launchers' positional arguments are then bound to the real kernel's signature)."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kw: self.calls.append((grid, args, kw))
