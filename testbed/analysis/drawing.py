"""Which module draws an experiment: exp 6 (faults) over time (faultfig.py), the others over their swept x
(figures.py). The sweeps and genFigure.py draw through here."""
from __future__ import annotations

from testbed.analysis import faultfig, figures
from testbed.core import experiments


def draw(name: str, root="results", tail: float | None = None, config=None) -> figures.Figure:
    """figures.draw, or faultfig.draw for exp 6 (its tail is p99; config is not read)."""
    exp = experiments.get(name)
    if exp.name == "faults":
        return faultfig.draw(root, exp.name)
    return figures.draw(exp.name, root=root, tail=tail, config=config)


def point_table(fig: figures.Figure) -> str:
    """The table a sweep prints under its figure."""
    if "fault" in fig.table.columns:
        return faultfig.text(fig.table)
    return figures.point_table(fig.table, fig.tail)
