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
