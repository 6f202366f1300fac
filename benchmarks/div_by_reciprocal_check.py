"""CPU proof for a cheaper static-FP8 re-quantization (BENCH_COMMANDS.md, next plan 1(e)).

The kernels quantize the intermediate h (rounded to bf16 / fp16) with the static scale s as
``e4m3(clamp(h / s, +-448))``, the division IEEE round-to-nearest (``_quant._div_rn``: ``div.rn.f32``,
~10 SASS instructions per element plus a slow-path check). Candidate, with ``r = RN32(1 / s)`` computed
once per call::

    q0 = RN32(h * r)
    rem = fma(-q0, s, h)                    # exact: the remainder of a correctly rounded reciprocal
    q = q0 if rem == 0 or not finite(rem) else fma(rem, r, q0)

(Markstein's correction; the two special cases keep -0.0 and let +-inf / overflow clamp as the
division does). This script emulates it exactly in float64 (TwoSum for the fused add, fp32 ties
checked) and compares with numpy's IEEE float32 division for every finite bf16 and fp16 value of h
against ``--scales`` random scales in 2^-20 .. 2^10 plus a few fixed ones: the fp32 quotients where
|h / s| >= 2^-11 (below, e4m3 rounds to zero) and the e4m3 bytes after the clamp must all be equal.
It proves the arithmetic, not a kernel: the GPU test of the kernel that uses it must still show the
same bits. Run: ``python3 benchmarks/div_by_reciprocal_check.py`` (~1 min per 1000 scales).
"""

import argparse

import numpy as np
import torch


def _rn32_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """RN32(a + b) of float64 a, b (b exact): the float64 sum, its exact error (TwoSum), and the fp32
    rounding corrected where the float64 sum sits exactly on an fp32 midpoint."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    r = s.astype(np.float32)
    back = r.astype(np.float64)
    up = np.nextafter(r, np.float32(np.inf)).astype(np.float64)
    dn = np.nextafter(r, np.float32(-np.inf)).astype(np.float64)
    r = np.where((s == (up + back) / 2) & (err > 0), np.nextafter(r, np.float32(np.inf)), r)
    r = np.where((s == (dn + back) / 2) & (err < 0), np.nextafter(r, np.float32(-np.inf)), r)
    return r


def divide_by_reciprocal(h: np.ndarray, s: np.float32) -> np.ndarray:
    """The candidate sequence above, as a GPU would run it (fp32 mul, two fused multiply-adds)."""
    r = np.float32(1.0) / s
    with np.errstate(all="ignore"):
        q0 = (h.astype(np.float64) * np.float64(r)).astype(np.float32)
        rem = h.astype(np.float64) - q0.astype(np.float64) * np.float64(s)  # exact where it matters
        q = _rn32_sum(q0.astype(np.float64), rem * np.float64(r))
    return np.where((rem == 0) | ~np.isfinite(rem), q0, q)


def _e4m3(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.clip(x, -448, 448)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, default=2000)
    args = ap.parse_args(argv)
    bits = np.arange(1 << 16, dtype=np.uint32)
    hs = {"bf16": (bits << 16).view(np.float32),
          "fp16": bits.astype(np.uint16).view(np.float16).astype(np.float32)}
    rng = np.random.default_rng(0)
    scales = np.concatenate([np.float32(2.0) ** rng.uniform(-20, 10, args.scales).astype(np.float32),
                             np.array([1.0, 3.0, 448.0, 1 / 448, 0.1, 7.0, 2.0 ** -20], np.float32)]).astype(np.float32)
    failed = 0
    for name, h in hs.items():
        h = h[np.isfinite(h)]
        n = bad32 = bad8 = 0
        for s in scales:
            s = np.float32(s)
            q = divide_by_reciprocal(h, s)
            with np.errstate(all="ignore"):
                ref = h / s
            m = np.isfinite(ref) & (np.abs(ref) >= 2.0 ** -11)
            bad32 += int((m & (q.view(np.uint32) != ref.view(np.uint32))).sum())
            bad8 += int((_e4m3(q) != _e4m3(ref)).sum()) + int(np.isnan(q).sum())  # no NaN from finite h
            n += h.size
        print(f"{name}: {n} (h, s) pairs: {bad32} fp32 quotients differ (|h/s| >= 2^-11), {bad8} e4m3 bytes differ")
        failed += bad32 + bad8
    print("same bits" if not failed else "DIFFERENT BITS")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
