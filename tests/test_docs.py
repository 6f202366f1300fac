"""docs/kernels.md's switch table ("## Every switch") names exactly the environment variables the package reads,
and every setter it names exists with the default it states."""

import functools
import pathlib
import re

import pytest

from fusedmoe.backends import kernel_configs, triton_moe
from fusedmoe.weights import ExpertWeights

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV_RE = re.compile(r"FUSEDMOE_[A-Z0-9_]+")


def _switch_rows():
    """The table's rows as (variable, setter cell, default cell)."""
    text = (ROOT / "docs" / "kernels.md").read_text()
    section = text.split("## Every switch", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        m = re.match(r"\| `(FUSEDMOE_[A-Z0-9_]+)` \| ([^|]+) \| ([^|]+) \|", line)
        if m:
            rows.append((m.group(1), m.group(2).strip(), m.group(3).strip()))
    return rows


@functools.lru_cache(maxsize=1)
def _package_source() -> str:
    return "\n".join(p.read_text() for p in sorted((ROOT / "src").rglob("*.py")))


def _variables_read_by_the_package():
    """Every ``"FUSEDMOE_..."`` string literal under src/ (how the package reads its environment variables)."""
    return {m.group(1) for m in re.finditer(r"[\"'](FUSEDMOE_[A-Z0-9_]+)[\"']", _package_source())}


def test_switch_table_names_every_environment_variable():
    rows = _switch_rows()
    documented = [v for v, _, _ in rows]
    assert len(documented) == len(set(documented)), "a variable is listed twice"
    read = _variables_read_by_the_package()
    assert read, "no FUSEDMOE_* variable found under src/ (the scan is broken)"
    assert sorted(read - set(documented)) == [], "read by the package, missing from docs/kernels.md's table"
    assert sorted(set(documented) - read) == [], "in docs/kernels.md's table, no longer read by the package"


def _setter(cell: str):
    """The object a setter cell names, or None for '--' cells (variables without a setter)."""
    name = re.match(r"`([A-Za-z0-9_.]+)`", cell)
    if name is None:
        assert cell.startswith("--"), cell
        return None
    name = name.group(1)
    if name.startswith("kernel_configs."):
        return getattr(kernel_configs, name.split(".", 1)[1])
    if name.startswith("ExpertWeights."):
        return getattr(ExpertWeights, name.split(".", 1)[1])
    return getattr(triton_moe, name)


@pytest.mark.parametrize("variable,setter,default", _switch_rows())
def test_switch_setter_exists(variable, setter, default):
    obj = _setter(setter)
    assert obj is None or callable(obj), (variable, setter)


# defaults the code computes instead of spelling them as os.environ.get's literal default: the state it starts in
_COMPUTED_DEFAULTS = {"FUSEDMOE_WS_FP4_CHUNKS": lambda: triton_moe._WS_FP4["chunks"] == 0}


@pytest.mark.parametrize("variable,setter,default", _switch_rows())
def test_switch_default_matches_the_code(variable, setter, default):
    """The table's default is what ``os.environ.get(variable, default)`` spells in the code ("unset ...": "")."""
    m = re.search(r"environ\.get\(\s*[\"']" + variable + r"[\"'],\s*[\"']([^\"']*)[\"']\)", _package_source())
    if variable in _COMPUTED_DEFAULTS:
        assert m is None, f"{variable} now has a literal default: drop it from _COMPUTED_DEFAULTS"
        assert default == "`0`" and _COMPUTED_DEFAULTS[variable](), (variable, default)
        return
    assert m is not None, f"{variable}: no os.environ.get(..., <literal default>) found under src/"
    expected = "" if default.startswith("unset") else default.strip("`")
    assert m.group(1) == expected, (variable, m.group(1), default)
