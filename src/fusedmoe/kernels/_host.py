"""Host-side helpers of the kernel launchers. ``triton.cdiv`` / ``triton.next_power_of_2`` are
Triton ``constexpr_function``s since Triton 3.5: called from Python each goes through a wrapper that
unwraps its arguments (a few microseconds; an eager MoE forward makes a dozen such calls)."""

import functools
from typing import Optional

import torch


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints, b > 0."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


_INTERPRETED_CLS = None


def interpreted(kernel) -> bool:
    """Whether ``kernel`` was created in Triton's interpreter mode (``TRITON_INTERPRET=1`` at
    import). An isinstance check (a cache keyed by the kernel would hash it: Triton computes that
    from its source and dependencies)."""
    global _INTERPRETED_CLS
    if _INTERPRETED_CLS is None:
        from triton.runtime.interpreter import InterpretedFunction

        _INTERPRETED_CLS = InterpretedFunction
    return isinstance(kernel, _INTERPRETED_CLS)


# ---- the GPU's compute capability -----------------------------------------------------------------------------

E4M3_CAPABILITY = (8, 9)  # Triton has no float8_e4m3 type below it ("type fp8e4nv not supported in this architecture")
# E4M3 numbers as bytes (see ``e4m3_in_bytes``): None -- below sm_89 only; True / False -- always / never (tests: the
# interpreter and the H200 run the byte path this way)
E4M3_BYTES_FORCED: Optional[bool] = None


@functools.lru_cache(maxsize=None)
def _cuda_available() -> bool:
    return torch.cuda.is_available()  # (~2 us a call uncached: the per-call checks read it)


@functools.lru_cache(maxsize=None)
def cuda_capability(index: int) -> "tuple[int, int]":
    props = torch.cuda.get_device_properties(index)
    return props.major, props.minor


@functools.lru_cache(maxsize=None)
def rocm() -> bool:
    """This torch is a ROCm build (AMD GPUs answer as device type "cuda" there)."""
    return getattr(torch.version, "hip", None) is not None


def device_capability(dev: torch.device) -> "Optional[tuple[int, int]]":
    """The compute capability of a CUDA ``dev``; None for other devices, or where this torch sees no CUDA (a
    capability cannot be known: nothing is refused for it)."""
    if dev.type != "cuda" or not _cuda_available():
        return None
    return cuda_capability(dev.index if dev.index is not None else torch.cuda.current_device())


def e4m3_in_bytes(dev: torch.device) -> bool:
    """Whether the kernels on ``dev`` see E4M3 numbers as bytes: quantizers write clamped fp32 values that torch
    rounds to E4M3 (as under the interpreter), and FP8 tensors reach the GEMMs as uint8 views that they decode with
    integer operations (``_blockscaled._e4m3_f32``). Below sm_89, or as forced by ``E4M3_BYTES_FORCED``."""
    if E4M3_BYTES_FORCED is not None:
        return E4M3_BYTES_FORCED
    cap = device_capability(dev)
    return cap is not None and cap < E4M3_CAPABILITY


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
_RUNTIME = None  # triton.knobs.runtime, fetched on the first launch


class _KernelSig:
    """Per kernel (kept on the kernel object: a dict keyed by the kernel would hash it, which
    Triton computes from its source): parameter names, constexpr flags, defaults, compiled kernels."""

    __slots__ = ("names", "constexpr", "defaults", "runtime_names", "cache", "interp", "keyfns")

    def __init__(self, kernel):
        self.interp = interpreted(kernel)
        params = () if self.interp else kernel.params  # the interpreter's kernels are launched by Triton
        self.names = tuple(p.name for p in params)
        self.constexpr = tuple(bool(p.is_constexpr) for p in params)
        self.defaults = tuple(p.default for p in params)  # inspect.Parameter.empty: required
        self.runtime_names = frozenset(n for n, c in zip(self.names, self.constexpr) if not c)
        self.cache = {}  # specialization key -> CompiledKernel
        self.keyfns = {}  # number of positional arguments -> generated key function (_positional_key_fn)


def _kernel_sig(kernel) -> _KernelSig:
    sig = getattr(kernel, "_fusedmoe_sig", None)
    if sig is None:
        sig = _KernelSig(kernel)
        kernel._fusedmoe_sig = sig
    return sig


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


def _positional_key_fn(constexpr_flags):
    """A function of the positional arguments returning their part of the key: ``_arg_key`` of
    each, inlined for tensors and ints (one generated expression instead of a call per argument)."""
    parts = []
    for i, c in enumerate(constexpr_flags):
        a = f"a{i}"
        if c:
            parts.append(a)
        else:
            parts.append(f"(({a}.dtype, ({a}.data_ptr() & 15) == 0) if {a}.__class__ is _T else "
                         f"(('i', {a} == 1, ({a} & 15) == 0, _LO <= {a} < _HI) if {a}.__class__ is int else "
                         f"_K({a}, False)))")
    args = ", ".join(f"a{i}" for i in range(len(constexpr_flags)))
    src = f"def key({args}):\n    return ({', '.join(parts)}{',' if len(parts) == 1 else ''})\n"
    ns = {"_T": torch.Tensor, "_LO": _I32_MIN, "_HI": _I32_MAX, "_K": _arg_key}
    exec(src, ns)  # noqa: S102 -- generated from the kernel's parameter flags only
    return ns["key"]


def _hooked(hook) -> bool:
    """A launch hook is installed (Triton 3.6 keeps an empty ``HookChain`` when there is none)."""
    return hook is not None and bool(getattr(hook, "calls", True))


def launch(kernel, grid, *args, **kwargs):
    """``kernel[grid](*args, **kwargs)`` for a ``triton.jit`` kernel and a tuple ``grid``; after the
    first launch of a specialization, the compiled kernel is launched directly (see above)."""
    global _RUNTIME
    sig = _kernel_sig(kernel)
    if not _DIRECT or sig.interp:
        return kernel[grid](*args, **kwargs)
    if _RUNTIME is None:
        from triton import knobs

        _RUNTIME = knobs.runtime
    if _hooked(_RUNTIME.launch_enter_hook) or _hooked(_RUNTIME.launch_exit_hook):
        return kernel[grid](*args, **kwargs)
    device = torch.cuda.current_device()
    names, npos = sig.names, len(args)
    try:
        keyfn = sig.keyfns.get(npos)
        if keyfn is None:
            keyfn = sig.keyfns[npos] = _positional_key_fn(sig.constexpr[:npos])
        # keyword arguments enter the key by value: constexprs and launch options only
        if not sig.runtime_names.isdisjoint(kwargs):
            raise TypeError("a runtime argument passed by keyword")
        key = (device, tuple(kwargs.items()), keyfn(*args))
        compiled = sig.cache.get(key)
        if compiled is not None:
            d = sig.defaults
            vals = [*args, *[kwargs[names[i]] if names[i] in kwargs else d[i] for i in range(npos, len(names))]]
    except (TypeError, KeyError, ValueError):  # unknown argument type / unhashable value: Triton decides
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
