"""Host-side helpers of the kernel launchers. ``triton.cdiv`` / ``triton.next_power_of_2`` are
Triton ``constexpr_function``s since Triton 3.5: called from Python each goes through a wrapper that
unwraps its arguments (a few microseconds; an eager MoE forward makes a dozen such calls)."""

import functools


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints, b > 0."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


@functools.lru_cache(maxsize=None)
def interpreted(kernel) -> bool:
    """Whether ``kernel`` was created in Triton's interpreter mode (``TRITON_INTERPRET=1`` at
    import; fixed per kernel object, so asked once)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


# ---- direct launches of compiled kernels ----------------------------------------------------------
#
# ``kernel[grid](*args)`` costs 30-70 us of Python per launch in Triton 3.6 on the H200 host (a
# profile of an eager Qwen3-30B decode call, session 6: ``JITFunction.run`` was 60 % of the host
# time -- argument binding, the cache-key string, a ``!=`` per global constexpr the kernel reads --
# for five launches per call). ``launch`` does that work once per specialization: it keys the call
# by what Triton specializes on (constexpr values; dtype and 16-byte alignment of every tensor;
# ints equal to 1, divisible by 16, 32- or 64-bit; None; launch options) and afterwards calls the
# compiled kernel's launcher as ``JITFunction.run`` does. Off with FUSEDMOE_DIRECT_LAUNCH=0; never
# used under the interpreter or while a Triton launch hook (profilers such as proton) is installed.

import os as _os

_DIRECT = _os.environ.get("FUSEDMOE_DIRECT_LAUNCH", "1") != "0"
_I32_MIN, _I32_MAX = -(2 ** 31), 2 ** 31


class _KernelSig:
    __slots__ = ("names", "constexpr", "defaults", "param_set", "cache")

    def __init__(self, kernel):
        self.names = tuple(p.name for p in kernel.params)
        self.constexpr = tuple(bool(p.is_constexpr) for p in kernel.params)
        self.defaults = tuple(p.default for p in kernel.params)  # inspect.Parameter.empty: required
        self.param_set = frozenset(self.names)
        self.cache = {}  # specialization key -> CompiledKernel


_SIGS: dict = {}


def _arg_key(v, is_constexpr: bool):
    """What Triton's specialization of one argument depends on (finer is safe: one more compile)."""
    if is_constexpr:
        return v
    cls = v.__class__
    if cls is bool:
        return ("b", v)
    if cls is int:
        return ("i", v == 1, (v & 15) == 0, _I32_MIN <= v < _I32_MAX)
    if cls is float:
        return "f"
    if v is None:
        return None
    ptr = getattr(v, "data_ptr", None)
    if ptr is not None:
        return (v.dtype, (ptr() & 15) == 0)
    raise TypeError(type(v).__name__)  # not a type this fast path knows: the caller falls back


def _hooked(hook) -> bool:
    """A launch hook is installed (Triton 3.6 keeps an empty ``HookChain`` when there is none)."""
    return hook is not None and bool(getattr(hook, "calls", True))


def launch(kernel, grid, *args, **kwargs):
    """``kernel[grid](*args, **kwargs)`` for a ``triton.jit`` kernel and a tuple ``grid``; after the
    first launch of a specialization, the compiled kernel is launched directly (see above)."""
    if not _DIRECT or interpreted(kernel):
        return kernel[grid](*args, **kwargs)
    from triton import knobs

    rt = knobs.runtime
    if _hooked(rt.launch_enter_hook) or _hooked(rt.launch_exit_hook):
        return kernel[grid](*args, **kwargs)
    sig = _SIGS.get(kernel)
    if sig is None:
        sig = _SIGS[kernel] = _KernelSig(kernel)
    import torch

    device = torch.cuda.current_device()
    vals = list(args)
    names, cx = sig.names, sig.constexpr
    try:
        for i in range(len(args), len(names)):
            n = names[i]
            vals.append(kwargs[n] if n in kwargs else sig.defaults[i])
        key = [device, *(_arg_key(v, c) for v, c in zip(vals, cx))]
        for n, v in kwargs.items():
            if n not in sig.param_set:
                key.append((n, v))
        key = tuple(key)
        compiled = sig.cache.get(key)
    except (TypeError, KeyError):  # unknown argument type / unhashable value: Triton decides
        return kernel[grid](*args, **kwargs)
    if compiled is None:
        compiled = kernel[grid](*args, **kwargs)
        if compiled is not None and not hasattr(compiled, "result"):
            sig.cache[key] = compiled
        return compiled
    n = len(grid)
    compiled.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1,
                 torch._C._cuda_getCurrentRawStream(device), compiled.function, compiled.packed_metadata,
                 None, None, None, *vals)
    return compiled
