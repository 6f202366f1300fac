"""Merge tune winners into a table where the bench A/B keeps them: python3 merge_tune.py REPORT TABLE OUT old1,old2 new1,new2
(mean t_us per (preset, format, tokens); a point is kept when new <= old * 1.01)."""
import json, sys, os, collections
sys.path.insert(0, "src")
from fusedmoe.bench.tune import add_to_table, merge_into_file
from fusedmoe.backends.kernel_configs import TunedTable, MoEKernelConfig, KernelConfig
from fusedmoe.config import Format, Activation
rep, table, out, olds, news = sys.argv[1:6]
def load(names):
    acc = collections.defaultdict(list)
    for n in names.split(","):
        p = os.path.join(out, n, "bench.json")
        if os.path.exists(p):
            for r in json.load(open(p))["results"]:
                if r.get("backend") == "triton" and r.get("status") == "ok":
                    acc[(r["case"].split("/")[0], r["weight_format"], r["tokens"])].append(r["t_us"])
    return {k: sum(v) / len(v) for k, v in acc.items()}
old, new = load(olds), load(news)
rep = json.load(open(rep))
dev = rep["env"]["device"]
tbl = TunedTable(); kept = []
for p in rep["points"]:
    k = (p["preset"], p["weight_format"], p["tokens"])
    o, n = old.get(k), new.get(k)
    ok = o is not None and n is not None and n <= o * 1.01 and p.get("best")
    print(k, o, n, f"{o / n:.3f}x" if o and n else "", "keep" if ok else "skip")
    if ok:
        cfg = MoEKernelConfig(KernelConfig.from_dict(p["best"]["gemm1"]), KernelConfig.from_dict(p["best"]["gemm2"]))
        add_to_table(tbl, cfg, device_name=dev, weight_format=Format(p["weight_format"]),
                     activation=Activation(p["activation"]), hidden=p["H"], intermediate_padded=p["I_pad"],
                     experts=p["E"], tokens=p["tokens"])
        kept.append(k)
merge_into_file(tbl, table)
print("kept", len(kept), "of", len(rep["points"]))
