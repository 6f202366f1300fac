"""The CLI runs and reports; the demo's checks pass on the CPU (scaled-down shape)."""

import re

import pytest

from fusedmoe.cli import main


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "reference" in out and "auto backend" in out


def _fake_gpu(monkeypatch, name: str, major: int, sms: int) -> None:
    """``torch.cuda`` reports one GPU ``name`` of compute capability ``major``.0 with ``sms`` SMs (80 GB)."""
    import types

    import torch

    from fusedmoe.kernels import _host

    props = types.SimpleNamespace(name=name, major=major, minor=0, multi_processor_count=sms, total_memory=80 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: props)
    monkeypatch.setattr(_host, "device_capability", lambda dev: (major, 0) if dev.type == "cuda" else None)


def test_info_says_how_e4m3_travels_below_sm89(capsys, monkeypatch):
    """On a GPU below sm_89 (faked here: the properties and the byte switch) ``info`` says that E4M3 numbers travel
    as bytes; the support table still lists every format for the triton backend."""
    _fake_gpu(monkeypatch, "NVIDIA A100-SXM4-80GB", 8, 108)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "sm_80" in out and "E4M3 numbers travel as bytes" in out, out
    assert "triton: fastest backend" in out, out
    assert "no tuned entries for this GPU -- the heuristic" in out, out


def test_info_says_where_kernel_configs_come_from(capsys, monkeypatch):
    """A faked H100 SXM has a few entries of its own in the shipped table (tuned where the H200's lost on it), then
    its sibling's (the H200's); an H800 only its sibling's; ``table_source`` for the other cases."""
    from fusedmoe.backends.kernel_configs import KernelConfig, TunedTable, table_source

    _fake_gpu(monkeypatch, "NVIDIA H100 80GB HBM3", 9, 132)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"kernel configs: \d+ tuned entries for this GPU, then \d+ of its sibling NVIDIA H200", out), out
    _fake_gpu(monkeypatch, "NVIDIA H800", 9, 132)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "tuned entries of its sibling NVIDIA H200" in out, out
    tbl = TunedTable()
    c = KernelConfig(16, 32, 64)
    for dev, n in (("NVIDIA H200", 3), ("NVIDIA H100 80GB HBM3", 2)):
        for t in range(n):
            tbl.add(device=dev, weight_format="bf16", activation="*", gemm="gemm1", N=64, K=64, E=8, tokens=1 << t,
                    config=c)
    assert tbl.device_entries("NVIDIA H200") == 3
    assert table_source("NVIDIA H100 80GB HBM3", 132, tbl).startswith(
        "kernel configs: 2 tuned entries for this GPU, then 3 of its sibling NVIDIA H200")
    assert table_source("NVIDIA H200", 132, tbl).startswith("kernel configs: 3 tuned entries for this GPU, else")
    assert "the 3 tuned entries of its sibling" in table_source("NVIDIA H800", 132, tbl)
    assert "no tuned entries" in table_source("NVIDIA H100 PCIe", 114, tbl)


def test_tune_summary_rows():
    """``fusedmoe tune``'s summary: the table's time ('=' where it served the heuristic) and the winner's gain over
    it next to the gain over the heuristic; budget points left out."""
    from fusedmoe.cli import TUNE_COLUMNS, tune_rows

    base = {"preset": "p", "weight_format": "bf16", "tried": 5, "candidates": 8, "rejected": 1, "errors": 0}
    pts = [dict(base, tokens=512, heuristic_us=120.0, table_us=100.0, tuned_us=80.0, speedup=1.5, vs_table=1.25),
           dict(base, tokens=8, heuristic_us=50.0, table_us=None, tuned_us=50.0, speedup=1.0, vs_table=1.0),
           {"preset": "p", "weight_format": "bf16", "tokens": 2048, "status": "budget"}]
    rows = tune_rows(pts)
    assert len(rows) == 2 and all(len(r) == len(TUNE_COLUMNS) for r in rows)
    col = {c: i for i, c in enumerate(TUNE_COLUMNS)}
    assert [rows[0][col[c]] for c in ("T", "heuristic", "table", "tuned", "speedup", "vs table", "tried")] == [
        "512", "120.0", "100.0", "80.0", "1.50x", "1.25x", "5/8"]
    assert (rows[1][col["table"]], rows[1][col["vs table"]]) == ("=", "1.00x")
    # a --max-candidates cut shows what the search space offered
    assert tune_rows([dict(pts[0], offered=31)])[0][col["tried"]] == "5/8 of 31"
    assert tune_rows([dict(pts[0], offered=8)])[0][col["tried"]] == "5/8"
    # the fastest candidate did not hold its lead when re-timed: what the point ran before stays
    kept = dict(pts[0], tuned_us=100.0, speedup=1.2, vs_table=1.0, confirmed=False)
    assert tune_rows([kept])[0][col["vs table"]] == "1.00x kept"
    assert tune_rows([dict(pts[0], confirmed=True)])[0][col["vs table"]] == "1.25x"


def test_demo_small_cpu(capsys):
    assert main(["demo", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for fmt in ("BF16", "FP8_TENSOR", "NVFP4"):
        assert fmt in out
    assert "FAIL" not in out


def test_bad_subcommand():
    with pytest.raises(SystemExit):
        main(["nope"])


# ---- bench / tune / check ------------------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402


def _usage_error(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err, err
    return err


def test_bench_cpu_end_to_end(capsys, tmp_path):
    out = tmp_path / "res"
    rc = main(["bench", "--device", "cpu", "--preset", "tiny", "--tokens", "1,3", "--dtype", "bf16",
               "--peers", "reference,torch-grouped-mm", "--out", str(out), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "ceilings" in text and "not meaningful" in text and "torch-grouped-mm" in text
    doc = json.loads((out / "bench.json").read_text())
    assert doc["format"] == "fusedmoe-bench" and len(doc["results"]) == 4
    md = (out / "bench.md").read_text()
    assert "| case | T=1 | T=3 |" in md and "| reference | % of roofline |" in md
    assert (out / "bench.png").exists() or "plot skipped" in text


@pytest.mark.parametrize("argv,needle", [
    (["--preset", "nope"], "unknown preset"),
    (["--shape", "1,2,3"], "four"),
    (["--shape", "64,32,8,2", "--preset", "tiny"], "one of --preset"),
    (["--tokens", "0"], ">= 1"),
    (["--tokens", "a"], "integers"),
    (["--weight-format", "fp8_token"], "activation format, not a weight format"),
    (["--weight-format", "fp9"], "unknown format"),
    (["--peers", "vllm"], "unknown peer"),
    (["--act-format", "fp8_block", "--weight-format", "bf16"], "not available with bf16"),
    (["--timing", "graph", "--device", "cpu"], "--timing applies to CUDA"),
    (["--activation", "relu2", "--preset", "tiny"], "--activation applies to --shape"),
    (["--routing", "llama4", "--preset", "tiny"], "--routing for preset tiny"),
    (["--shape", "64,32,8,2", "--routing", "deepseek_v3", "--n-group", "3"], "--shape"),
    (["--budget-s", "-1"], "> 0"),
    (["--tuned-configs", "/nonexistent.json"], "--tuned-configs"),
])
def test_bench_argument_errors(capsys, argv, needle):
    _usage_error(capsys, ["bench", "--device", "cpu", *argv], needle)


def test_bench_list_presets(capsys):
    assert main(["bench", "--list-presets"]) == 0
    out = capsys.readouterr().out
    for name in ("nemotron-super-tp8", "deepseek-v3", "gpt-oss-120b", "llama4-scout", "tiny"):
        assert name in out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a machine without CUDA; with a GPU, tune runs for real")
def test_tune_refuses_without_cuda(capsys):
    _usage_error(capsys, ["tune", "--preset", "tiny"], "needs a CUDA GPU")


def test_tune_dry_run_and_errors(capsys):
    assert main(["tune", "--dry-run", "--preset", "qwen3-30b-a3b,gpt-oss-20b", "--weight-format", "bf16,fp8_block",
                 "--tokens", "1,256", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "candidates" in out and "(heuristic)" in out and "multiple of 128" in out and "[gemm2]" in out
    assert main(["tune", "--dry-run", "--preset", "qwen3-30b-a3b", "--weight-format", "bf16", "--tokens", "256",
                 "--max-candidates", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\b3 of \d+", out), out  # the cut and what the search space offered
    _usage_error(capsys, ["tune", "--dry-run", "--weight-format", "fp8_token"], "has no fp8_token weights")
    _usage_error(capsys, ["tune", "--dry-run", "--preset", "x"], "unknown preset")
    _usage_error(capsys, ["tune", "--dry-run", "--min-gain", "1"], "a fraction in [0, 1)")
    _usage_error(capsys, ["tune", "--dry-run", "--min-gain", "x"], "expected a number")
    _usage_error(capsys, ["tune", "--dry-run", "--confirm-rounds", "-1"], ">= 0")


def test_check_cpu_subset(capsys, tmp_path):
    j = tmp_path / "check.json"
    rc = main(["check", "--device", "cpu", "--backends", "reference", "--activations", "swiglu,relu2",
               "--formats", "bf16,fp8_block", "--routings", "renormalize_naive,llama4", "--json", str(j),
               "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "ALL PASSED" in out
    rows = json.loads(j.read_text())["rows"]
    assert len(rows) == 2 * 2 + 1 and all(r["status"] == "ok" for r in rows)
    _usage_error(capsys, ["check", "--backends", "cuda-magic"], "unknown backend")
    _usage_error(capsys, ["check", "--formats", "fp8_token"], "not a weight format")
    _usage_error(capsys, ["check", "--routings", "softmax"], "unknown routing method")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="triton on a CPU needs the interpreter")
def test_check_cpu_triton_interpreter(capsys):
    rc = main(["check", "--device", "cpu", "--activations", "relu2", "--formats", "fp8_tensor",
               "--routings", "deepseek_v3", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "ALL PASSED" in out and "triton" in out
