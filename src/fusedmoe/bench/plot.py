"""PNG plot of a bench result: per case, time and percent of roofline against tokens.

One row of two panels per case (preset x format): microseconds per call (log-log, with the
roofline floor as a dashed black line) and percent of roofline (log x), one line per backend.
Needs matplotlib (the ``cli`` extra); without it :func:`plot_results` raises ImportError and the
CLI reports that the plot was skipped.
"""

from __future__ import annotations

from typing import Any, Dict, List

__all__ = ["plot_results"]

_STYLE = {"triton": ("C0", "o"), "triton-heuristic": ("C9", "s"), "reference": ("C7", "x"),
          "torch-grouped-mm": ("C2", "^"), "sglang": ("C3", "D")}


def plot_results(doc: Dict[str, Any], path: str) -> str:
    """Write the plot of ``doc`` (a bench results document) to ``path``; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in doc["results"] if r.get("status") == "ok" and r.get("t_us")]
    cases: List[str] = []
    for r in doc["results"]:
        if r["case"] not in cases:
            cases.append(r["case"])
    n = max(1, len(cases))
    fig, axes = plt.subplots(n, 2, figsize=(11, 3.2 * n), squeeze=False)
    meaningful = doc.get("ceilings", {}).get("meaningful", False)
    for i, case in enumerate(cases):
        ax_t, ax_p = axes[i]
        rows = [r for r in recs if r["case"] == case]
        floors = sorted({(r["tokens"], r["floor_us"]) for r in doc["results"] if r["case"] == case and r.get("floor_us")})
        if floors:
            ax_t.plot([t for t, _ in floors], [f for _, f in floors], "k--", lw=1, label="roofline floor")
        for b in sorted({r["backend"] for r in rows}):
            pts = sorted((r["tokens"], r["t_us"], r.get("roofline_pct")) for r in rows if r["backend"] == b)
            color, marker = _STYLE.get(b, (None, "."))
            ax_t.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=b)
            ax_p.plot([p[0] for p in pts if p[2]], [p[2] for p in pts if p[2]], marker=marker, color=color, label=b)
        ax_t.set_xscale("log", base=2)
        ax_t.set_yscale("log")
        ax_p.set_xscale("log", base=2)
        ax_t.set_title(f"{case}: time per call", fontsize=9)
        ax_p.set_title(f"{case}: % of roofline" + ("" if meaningful else " (CPU: not meaningful)"), fontsize=9)
        ax_t.set_xlabel("tokens")
        ax_p.set_xlabel("tokens")
        ax_t.set_ylabel("µs")
        ax_p.set_ylabel("% of roofline")
        ax_p.set_ylim(bottom=0)
        ax_t.grid(True, which="both", alpha=0.3)
        ax_p.grid(True, alpha=0.3)
        ax_t.legend(fontsize=7)
    env = doc.get("env", {})
    fig.suptitle(f"fusedmoe bench -- {env.get('gpu', env.get('device', '?'))}, torch {env.get('torch', '?')}, "
                 f"triton {env.get('triton', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
