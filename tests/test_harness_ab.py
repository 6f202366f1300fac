"""benchmarks/harness_ab.py: separate harness invocations side by side, each against its own SGLang."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import harness_ab  # noqa: E402


def _run(tmp_path, name, rows):
    d = tmp_path / name
    d.mkdir()
    with open(d / "peers.jsonl", "w") as f:
        f.write(json.dumps({"kind": "env"}) + "\n")
        for model, M, peer, t_ms, status in rows:
            f.write(json.dumps({"kind": "moe", "model": model, "act": "swiglu", "dtype": "fp8_channel", "M": M,
                                "peer": peer, "t_ms": t_ms, "status": status}) + "\n")
    return str(d / "peers.jsonl")


def test_side_by_side_ratios_and_geomean(tmp_path):
    a = _run(tmp_path, "hA", [("m", 1, "sglang", 0.040, "ok"), ("m", 1, "fusedmoe", 0.020, "ok"),
                             ("m", 8, "sglang", 0.100, "ok"), ("m", 8, "fusedmoe", 0.050, "ok")])
    b = _run(tmp_path, "hB", [("m", 1, "sglang", 0.030, "ok"), ("m", 1, "fusedmoe-s17", 0.030, "ok"),
                             ("m", 8, "sglang", 0.100, "ok"), ("m", 8, "fusedmoe-s17", 0.200, "error")])
    out = harness_ab.table([a, b]).splitlines()
    assert out[0].split() == ["point", "hA", "hB"]
    assert "20.0 us  2.000x" in out[1] and "30.0 us  1.000x" in out[1]  # m/swiglu/fp8_channel/1
    assert "50.0 us  2.000x" in out[2] and out[2].count("x") == 1  # hB's failed point is left blank
    # geometric means over the points both runs have (M = 1 only)
    geo = next(line for line in out if line.startswith("geomean ratio to SGLang"))
    assert geo.split()[-2:] == ["2.000x", "1.000x"]
    # by token region (1-8: the same M = 1 point): ratios to each run's SGLang, times over the first run's
    assert out[-2].startswith("tokens 1-8: ratio to SGLang (1 points)") and out[-2].split()[-2:] == ["2.000x", "1.000x"]
    assert out[-1].startswith("tokens 1-8: t_run / t_first") and out[-1].split()[-2:] == ["1.000x", "1.500x"]
