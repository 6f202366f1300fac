"""benchmarks/peer_ratio.py: a harness run's per-point time ratios against one peer."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import peer_ratio  # noqa: E402


def _jsonl(tmp_path, rows):
    p = tmp_path / "peers.jsonl"
    with open(p, "w") as f:
        f.write(json.dumps({"kind": "env"}) + "\n")
        for model, M, peer, t_ms, status in rows:
            f.write(json.dumps({"kind": "moe", "model": model, "act": "swiglu", "dtype": "bf16", "M": M, "peer": peer,
                                "t_ms": t_ms, "status": status, "check": "ok"}) + "\n")
    return str(p)


def test_ratios_region_geomeans_and_slow_points(tmp_path, capsys):
    p = _jsonl(tmp_path, [("m", 1, "fusedmoe", 0.010, "ok"), ("m", 1, "sglang", 0.020, "ok"),
                          ("m", 8, "fusedmoe", 0.010, "ok"), ("m", 8, "sglang", 0.005, "ok"),
                          ("m", 2048, "fusedmoe", 1.000, "ok"), ("m", 2048, "sglang", 0.900, "ok"),
                          ("m", 8192, "fusedmoe", 2.000, "ok"), ("m", 8192, "sglang", 3.000, "error")])
    assert peer_ratio.main([p, "fusedmoe"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[3]: ln.split() for ln in out.splitlines() if ln.startswith("bf16 m swiglu")}
    assert rows["1"][4:] == ["10.0", "20.0", "0.500"]  # base µs, peer µs, base / peer
    assert rows["8"][4:] == ["10.0", "5.0", "2.000"]
    assert rows["2048"][4:] == ["1000.0", "900.0", "1.111"]
    assert rows["8192"][4:] == ["2000.0", "-"]  # the peer's failed point is left out
    # 1-8 tokens: geomean of 0.5 and 2.0 is 1.0; all three points: (0.5 * 2 * 1.111) ** (1 / 3)
    assert "sglang: 1-8 1.000 (n=2), 2048-8192 1.111 (n=1), all 1.036 (n=3)" in out
    assert "points where a peer is > 5 % slower than fusedmoe: 1" in out
    assert "sglang bf16 m swiglu 1: 0.500" in out


def test_unknown_base_peer_is_an_error(tmp_path, capsys):
    p = _jsonl(tmp_path, [("m", 1, "fusedmoe", 0.010, "ok")])
    assert peer_ratio.main([p, "nope"]) == 1
    assert "no point of peer 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        peer_ratio.main([])
