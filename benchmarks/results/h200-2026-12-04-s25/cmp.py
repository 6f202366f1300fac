"""python3 cmp.py OUT a1,a2 b1,b2 [labelA labelB]: mean t_us per (case, weight fmt, act fmt, tokens) of the triton backend;
prints A, B, A/B and TB/s of each."""
import json, sys, os, collections
out, A, B = sys.argv[1:4]
la, lb = (sys.argv[4:6] if len(sys.argv) >= 6 else ("A", "B"))
def load(names):
    acc, tb = collections.defaultdict(list), {}
    for n in names.split(","):
        p = os.path.join(out, n, "bench.json")
        if not os.path.exists(p):
            continue
        for r in json.load(open(p))["results"]:
            if r.get("backend") == "triton" and r.get("status") == "ok":
                k = (r["case"].split("/")[0], r["weight_format"], r.get("act_format"), r["tokens"])
                acc[k].append(r["t_us"]); tb[k] = r.get("bytes")
    return {k: (sum(v) / len(v), tb[k]) for k, v in acc.items()}
a, b = load(A), load(B)
print(f"{'case':24s} {'w':6s} {'act':6s} {'T':>5s} {la:>9s} {lb:>9s} {la+'/'+lb:>7s}  TB/s {la}/{lb}")
for k in sorted(set(a) | set(b), key=lambda k: (k[0], k[1], str(k[2]), k[3])):
    ta, tbb = a.get(k, (None, None))[0], b.get(k, (None, None))[0]
    by = (a.get(k) or b.get(k))[1]
    r = f"{ta / tbb:7.3f}" if ta and tbb else "      -"
    bw = lambda t: f"{by / t / 1e6:5.2f}" if t and by else "  -  "
    print(f"{k[0]:24s} {k[1]:6s} {str(k[2]):6s} {k[3]:5d} {ta or 0:9.1f} {tbb or 0:9.1f} {r}  {bw(ta)} {bw(tbb)}")
