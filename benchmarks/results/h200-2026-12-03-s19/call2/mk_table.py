"""Variant table: FP4 decode entries with pipelined block scales (block_k 256 MX / 128 NVFP4, GEMM1 joined 2 x 32 rows)."""
import json, sys
src, dst = sys.argv[1], sys.argv[2]
d = json.load(open(src))
n = 0
for e in d["entries"]:
    c = e["config"]
    if e["weight_format"] in ("mxfp4", "nvfp4") and e["tokens"] <= 64 and c.get("swap_ab") and c["block_m"] <= 16:
        mx = e["weight_format"] == "mxfp4"
        c["block_k"] = 256 if mx else 128
        c["block_n"] = 32 if e["gemm"] == "gemm1" and e["activation"] in ("swiglu", "swiglu_oai", "geglu") else 64
        c["num_stages"] = 4
        n += 1
json.dump(d, open(dst, "w"))
print("changed", n)
