"""Device-only A/B hack (wrong results): 16-bit activation tiles skip the K permutation (_dot_order) -- the speed
of activations stored K-permuted in memory. Patches src/fusedmoe/kernels/_moe_gemm.py in place."""
p = "src/fusedmoe/kernels/_moe_gemm.py"
s = open(p).read()
old = """    a = _load_tile(a_ptr, a_rows, a_scale_ptr, as_rows, 1, ki, K, a_all, A_FMT, BLOCK_M, BK, EVEN_K, CD, FAST_CVT,
                   KPERM)
"""
new = """    if A_FMT == 0:
        a = _load_tile(a_ptr, a_rows, a_scale_ptr, as_rows, 1, ki, K, a_all, A_FMT, BLOCK_M, BK, EVEN_K, CD, FAST_CVT, 0)
    else:
        a = _load_tile(a_ptr, a_rows, a_scale_ptr, as_rows, 1, ki, K, a_all, A_FMT, BLOCK_M, BK, EVEN_K, CD, FAST_CVT,
                       KPERM)
"""
assert old in s
open(p, "w").write(s.replace(old, new, 1))
print("patched")
