"""Compare fusedmoe bench runs: python3 s23_cmp.py OUT nameA1,nameA2 nameB1,nameB2 ... (mean t_us per point)."""
import json, sys, os, collections
out = sys.argv[1]
groups = [g.split(",") for g in sys.argv[2:]]
tabs = []
for g in groups:
    acc = collections.defaultdict(list)
    for n in g:
        p = os.path.join(out, n, "bench.json")
        if not os.path.exists(p):
            continue
        for r in json.load(open(p))["results"]:
            if r.get("backend") == "triton" and r.get("status") == "ok":
                acc[(r["case"], r["tokens"])].append((r["t_us"], r.get("tbps"), r.get("tflops")))
    tabs.append({k: (sum(x[0] for x in v) / len(v), v[0][1], v[0][2]) for k, v in acc.items()})
keys = sorted(set().union(*[t.keys() for t in tabs]))
print("case tokens " + " ".join(g[0] for g in groups) + "  ratio(last/first)")
for k in keys:
    vals = [t.get(k) for t in tabs]
    cells = [f"{v[0]:9.1f}" if v else "      n/a" for v in vals]
    ratio = f"{vals[-1][0] / vals[0][0]:.3f}" if vals[0] and vals[-1] else ""
    v0 = vals[0]
    if v0 and v0[1] and k[1] <= 64:
        tb = f"{v0[1]:.2f}TB/s"
    else:
        tb = f"{v0[2]:.0f}TF/s" if v0 and v0[2] else ""
    print(f"{k[0]:40s} {k[1]:5d} " + " ".join(cells) + f"  {ratio}  ({tb} first)")
