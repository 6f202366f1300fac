"""The CLI runs and reports; the demo's checks pass on the CPU (scaled-down shape)."""

import pytest

from fusedmoe.cli import main


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "reference" in out and "auto backend" in out


def test_demo_small_cpu(capsys):
    assert main(["demo", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for fmt in ("BF16", "FP8_TENSOR", "NVFP4"):
        assert fmt in out
    assert "FAIL" not in out


def test_bad_subcommand():
    with pytest.raises(SystemExit):
        main(["nope"])
