"""Launch-size arithmetic for host code. ``triton.cdiv`` / ``triton.next_power_of_2`` are Triton
``constexpr_function``s since Triton 3.5: called from Python each goes through a wrapper that
unwraps its arguments (a few microseconds; an eager MoE forward makes a dozen such calls)."""


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints, b > 0."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1
