"""Console output helpers: rich tables and progress bars, with plain-text fallbacks."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator, List

__all__ = ["print_table", "progress_bar"]


def print_table(title: str, columns: List[str], rows: List[List[str]], *, console=None) -> None:
    """Print a table with rich when it is installed, else as aligned plain text."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
        return
    t = Table(title=title)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*r)
    (console or Console(width=max(150, sum(len(c) + 3 for c in columns) + 40))).print(t)


@contextmanager
def progress_bar(total: int, description: str, *, enabled: bool = True) -> Iterator[Callable[[str, int], None]]:
    """Yields ``update(text, advance)``: a rich progress bar on a terminal (stderr), one line per
    25 % of the work otherwise (logs stay short), nothing when ``enabled`` is False."""
    if not enabled or total <= 0:
        yield lambda text, advance: None
        return
    try:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        Progress = None
    if Progress is not None and sys.stderr.isatty():
        from rich.console import Console

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[item]}"), console=Console(stderr=True), transient=False) as prog:
            task = prog.add_task(description, total=total, item="")

            def update(text: str, advance: int) -> None:
                prog.update(task, advance=advance, item=text)

            yield update
        return
    state = {"done": 0, "next": 0.25}

    def update_plain(text: str, advance: int) -> None:
        state["done"] += advance
        if state["done"] / total >= state["next"]:
            print(f"[{description}] {state['done']}/{total} ({text})", file=sys.stderr, flush=True)
            while state["done"] / total >= state["next"]:
                state["next"] += 0.25

    yield update_plain
