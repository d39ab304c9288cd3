"""Exp 6's figure and table (testbed/analysis/faultfig.py) from fake run folders: a stall drawn and measured, a
failed point drawn as failed, a protocol without runs named in the caption, the touched region left out."""
import math

import pandas as pd

from testbed.analysis import faultfig, timeseries

from test_figures import make_run, manifest, rec

WINDOW = (4.0, 6.0)   # the fake runs last 10 s with a 2 s warm-up (test_figures.WINDOW)


def steady(t0, t1, rate, lat_ms, first=0):
    return [rec(first + i, "IRT", t0 + i / rate, lat_ms) for i in range(int((t1 - t0) * rate))]


def stalled_then_back():
    """50 txn/s at 10 ms; nothing completes in the window, whose issues wait for its end; back at once after."""
    rows = steady(0, 4, 50, 10)
    rows += [rec(1000 + i, "IRT", 4 + i / 50, (6.001 - (4 + i / 50)) * 1000) for i in range(10)]
    return rows + steady(6, 10, 50, 10, first=2000)


def fault_run(root, system, x, label, clients, key, region=None, **kw):
    meta = {"point_label": label, "fault_window_s": list(WINDOW)}
    if region is not None:
        meta["fault_region"] = region
    return make_run(root, exp="faults", system=system, x=x, key=key, clients=clients, meta_extra=meta, **kw)


def test_the_figure_draws_every_kind_and_protocol_and_names_failures_and_missing_ones(tmp_path):
    fault_run(tmp_path, "dast", 0, "none", {"c0.0.0": steady(0, 10, 50, 10)}, "k1")
    fault_run(tmp_path, "janus", 0, "none", {"c0.0.0": steady(0, 10, 50, 12)}, "k2")
    # the partition of region 1 (0-based): its client c1.0.0 stalls, c0.0.0 elsewhere does not
    fault_run(tmp_path, "dast", 1, "partition", {"c0.0.0": steady(0, 10, 50, 10), "c1.0.0": stalled_then_back()},
              "k3", region=1)
    fault_run(tmp_path, "janus", 1, "partition", {"c0.0.0": stalled_then_back()}, "k4", region=1)
    fault_run(tmp_path, "janus", 2, "pause", {}, "k5", status="failed", error="RunError: replica s0.0.1 died")
    manifest(tmp_path, "faults", [("k1", "dast", 0), ("k2", "janus", 0), ("k3", "dast", 1), ("k4", "janus", 1),
                                  ("k5", "janus", 2)], systems={"dast": "run", "janus": "run", "tapir": "run"})
    fig = faultfig.draw(tmp_path)
    assert fig.pdf.is_file() and fig.png.is_file() and fig.csv.is_file()
    t = pd.read_csv(fig.csv)
    assert list(t.columns) == faultfig.TABLE_COLUMNS
    part = t[t.fault == "partition"].set_index("system")
    # DAST's untouched region never noticed; Janus's stalled for the whole window and recovered at the heal
    assert part.loc["dast", "irt_p99_during_ms"] == 10 and part.loc["dast", "recovery_s"] == 0
    assert part.loc["janus", "irt_p99_during_ms"] >= 1900 and part.loc["janus", "stalled_s"] == 2
    assert part.loc["janus", "recovery_s"] == 0
    pause = t[t.fault == "pause"].iloc[0]
    assert pause.status == "failed" and "died" in pause.reason and math.isnan(pause.recovery_s)
    rows, _ = faultfig.collect(tmp_path)
    cap = faultfig.caption(rows, ["dast", "janus", "tapir"])
    assert "1 run(s) failed" in cap and "No runs: Tapir" in cap
    # every ok run's series is written beside its summary
    for r in rows:
        if r["status"] == "ok":
            assert timeseries.read_series(tmp_path / "faults" / r["run_id"]) is not None


def test_no_runs_is_an_error_not_an_empty_figure(tmp_path):
    import pytest
    from testbed.analysis.figures import NoRuns
    with pytest.raises(NoRuns):
        faultfig.draw(tmp_path)


def test_the_sweep_prints_the_fault_table(tmp_path):
    from testbed.analysis import drawing, figures
    fault_run(tmp_path, "janus", 1, "partition", {"c0.0.0": stalled_then_back()}, "k4", region=1)
    fig = drawing.draw("exp6", root=tmp_path)
    text = drawing.point_table(fig)
    line = next(x for x in text.splitlines() if x.startswith("partition"))
    assert "Janus" in line and " ok " in line and "2001.0" in line, text
    assert figures.hot_points(fig.table) == []
