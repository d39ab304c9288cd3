"""Exp 6's figure: what a fault does to each protocol, second by second (docs/experiments.md, Exp 6).

One panel row per fault kind (the sweep's points, `point_label` in each run's meta.json), three columns: IRT p99,
CRT p99 and throughput per 1 s bucket (timeseries.py), one line per protocol, the fault window shaded. A run that
failed is named in its row's panels with its reason (never dropped); a protocol with no run at all is named in the
caption. Beside the figure: results/data-faults.csv, one row per (protocol, fault kind): p99 and throughput
before, during and after the window, and the recovery time (timeseries.fault_effect); every run's timeseries.csv
is written (again) from its records, so the figure never draws a stale one.

The fault window of a run: `fault_window_s` of its meta.json (the sweep records its point's), else none; the
region the fault targets: `fault_region` (0-based), whose clients are left out of the series and the table: the
figure shows what the fault did to the regions it did not touch (all regions when the fault names none).
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd
import yaml

from testbed.analysis import durability, timeseries
from testbed.analysis.histories import Unreadable
from testbed.analysis.figures import MANIFEST, NoRuns, Figure, line_name, load_runs, select, style, system_rank
from testbed.analysis.results import read_records
from testbed.analysis.rundirs import read_json
from testbed.core import files
from testbed.core.tables import text_table

PANELS = (("irt_p99_ms", "IRT p99 (ms)"), ("crt_p99_ms", "CRT p99 (ms)"), ("throughput_tps", "throughput (txn/s)"))
TABLE_COLUMNS = ["system", "fault", "status", "reason", "window_start_s", "window_end_s",
                 "tput_before", "tput_during", "tput_after", "irt_p99_before_ms", "irt_p99_during_ms",
                 "irt_p99_after_ms", "crt_p99_before_ms", "crt_p99_during_ms", "crt_p99_after_ms", "recovery_s",
                 "tput_back_s",
                 "stalled_s", "caught_up_after_s", "run_id"]


def _window(meta: dict) -> tuple[float, float] | None:
    w = meta.get("fault_window_s")
    if isinstance(w, (list, tuple)) and len(w) == 2 and all(isinstance(x, (int, float)) for x in w):
        return float(w[0]), float(w[1])
    return None


def _nan(d: dict, key: str) -> float:
    v = (d or {}).get(key)
    return math.nan if v is None else float(v)


def untouched_records(run_dir: Path, region) -> pd.DataFrame:
    """The run's records, without those of the clients in `region` (deploy.yml's nodes; None: every client)."""
    df = read_records(run_dir)
    if region is None:
        return df
    try:
        nodes = yaml.safe_load((run_dir / "deploy.yml").read_text())["nodes"]
        regions = {n["name"]: int(n["region"]) for n in nodes if n.get("kind") == "client"}
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as e:
        raise ValueError(f"deploy.yml: no client regions ({e})") from e
    return df[df.client.map(regions) != int(region)]


def collect(root, name: str = "faults") -> tuple[list[dict], dict | None]:
    """(one row per run of the current sweep: system, fault, status, reason, window, ts, effect, run_id; the
    sweep's manifest). Raises NoRuns when there is none."""
    exp_dir = Path(root) / name
    manifest = read_json(exp_dir / MANIFEST)
    runs = load_runs(exp_dir, 99)
    sel = select(runs, manifest)
    if sel.empty:
        raise NoRuns(f"no runs of {name} under {exp_dir}/ (run experiments/exp6_faults.py first)")
    rows = []
    for r in sel.sort_values(["x", "system", "repeat"]).itertuples():
        run_dir = Path(r.run_dir)
        meta = read_json(run_dir / "meta.json") or {}
        row = dict(system=r.system, fault=meta.get("point_label") or f"x={r.x:g}", x=r.x, status=r.status,
                   reason=r.reason or "", window=_window(meta), ts=None, effect=None, run_id=r.run_id,
                   repeat=r.repeat, restarted=False, caught_up_after_s=None,
                   no_majority_s=((read_json(run_dir / "check.json") or {}).get("stats") or {}).get("no_majority_s"))
        try:   # a crashed follower started again: when it caught up (faults.jsonl)
            back = durability.restarted_replicas(run_dir)
        except Unreadable:
            back = {}
        if back:
            after = [v["caught_up_t_s"] - v["restarted_t_s"] for v in back.values() if v["caught_up_t_s"] is not None]
            row.update(restarted=True, caught_up_after_s=round(max(after), 3) if len(after) == len(back) else None)
        if r.status == "ok":
            duration = float(r.duration or 0) or float((meta.get("knobs") or {}).get("duration_s") or 0)
            warmup = float(r.warmup or 0)
            try:
                df = untouched_records(run_dir, meta.get("fault_region"))
                row["ts"] = timeseries.series(df, duration)
                row["ts"].to_csv(run_dir / timeseries.SERIES_FILE, index=False, float_format="%.3f")
                if row["window"]:
                    row["effect"] = timeseries.fault_effect(df, *row["window"], warmup_s=warmup,
                                                            duration_s=duration)
            except (OSError, ValueError, KeyError) as e:
                row.update(status="failed", reason=f"unreadable records: {e}")
        rows.append(row)
    return rows, manifest


def table(rows: list[dict]) -> pd.DataFrame:
    out = []
    for r in rows:
        e = r["effect"] or {}
        b, d, a = e.get("before") or {}, e.get("during") or {}, e.get("after") or {}
        ts = r["ts"]
        w = r["window"]
        stalled = math.nan
        if ts is not None and w:
            inside = ts[(ts.t_s >= w[0]) & (ts.t_s < w[1])]
            stalled = float(inside.stalled.sum())
        out.append(dict(system=r["system"], fault=r["fault"], status=r["status"], reason=r["reason"],
                        window_start_s=w[0] if w else math.nan, window_end_s=w[1] if w else math.nan,
                        tput_before=_nan(b, "throughput_tps"), tput_during=_nan(d, "throughput_tps"),
                        tput_after=_nan(a, "throughput_tps"),
                        irt_p99_before_ms=_nan(b, "irt_p99_ms"), irt_p99_during_ms=_nan(d, "irt_p99_ms"),
                        irt_p99_after_ms=_nan(a, "irt_p99_ms"), crt_p99_before_ms=_nan(b, "crt_p99_ms"),
                        crt_p99_during_ms=_nan(d, "crt_p99_ms"), crt_p99_after_ms=_nan(a, "crt_p99_ms"),
                        recovery_s=_nan(e, "recovery_s") if e else math.nan,
                        tput_back_s=_nan(e, "tput_back_s") if e else math.nan, stalled_s=stalled,
                        caught_up_after_s=r.get("caught_up_after_s") if r.get("caught_up_after_s") is not None
                        else math.nan,
                        run_id=r["run_id"]))
    return pd.DataFrame(out, columns=TABLE_COLUMNS)


def _outcome(r: dict) -> str:
    """'Janus: stalled 5 s, back in 2 s' for a panel: how long nothing committed in the window, the recovery."""
    e, ts, w = r["effect"], r["ts"], r["window"]
    stalled = int(ts[(ts.t_s >= w[0]) & (ts.t_s < w[1])].stalled.sum()) if ts is not None else 0
    back = "not back" if e.get("recovery_s") is None else f"back in {e['recovery_s']:g} s"
    return f"{line_name(r['system'])}: " + (f"stalled {stalled} s, " if stalled else "") + back


def text(t: pd.DataFrame) -> str:
    """Plain-text table: per protocol and fault, IRT/CRT p99 before and during the window, and the recovery."""
    def f(v, nd=1):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"
    rows = [[r.fault, line_name(r.system), r.status,
             f(r.tput_before, 0), f(r.tput_during, 0), f(r.irt_p99_before_ms), f(r.irt_p99_during_ms),
             f(r.crt_p99_before_ms), f(r.crt_p99_during_ms), f(r.stalled_s, 0),
             "not recovered" if r.status == "ok" and not math.isnan(r.window_start_s) and math.isnan(r.recovery_s)
             else f(r.recovery_s),
             "not back" if r.status == "ok" and not math.isnan(r.window_start_s) and math.isnan(r.tput_back_s)
             else f(r.tput_back_s, 2), textwrap.shorten(r.reason or "", 50) if isinstance(r.reason, str) else ""]
            for r in t.itertuples()]
    cols = ["fault", "system", "status", "tput before", "during", "IRT p99 before", "during", "CRT p99 before",
            "during", "stalled s", "recovery s", "tput back s", "note"]
    return text_table(cols, rows, left=(0, 1, 2, 12)) + "\n(latencies in ms; the regions the fault did not touch)"


def build(rows: list[dict], systems: list, title: str, caption_text: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    kinds = list(dict.fromkeys(r["fault"] for r in sorted(rows, key=lambda r: r["x"])))
    fig, axes = plt.subplots(len(kinds), len(PANELS), figsize=(15, 2.6 * len(kinds) + 1.6), squeeze=False,
                             sharex=True)
    for i, kind in enumerate(kinds):
        mine = [r for r in rows if r["fault"] == kind]
        window = next((r["window"] for r in mine if r["window"]), None)
        failed = [r for r in mine if r["status"] != "ok"]
        for j, (col, label) in enumerate(PANELS):
            ax = axes[i][j]
            if window:
                ax.axvspan(*window, color="0.85", zorder=0)
            for r in mine:
                if r["ts"] is None or r["repeat"]:
                    continue
                st = style(r["system"])
                ax.plot(r["ts"].t_s + 0.5, r["ts"][col], color=st["color"], linestyle=st["linestyle"],
                        linewidth=1.6, marker=st["marker"], markersize=3)
            if window and kind == "crash" and not any(r.get("restarted") for r in mine):
                xlim = ax.get_xlim()   # no restart: the follower stays down after the window (lighter shade)
                ax.axvspan(window[1], xlim[1], color="0.94", zorder=0)
                ax.set_xlim(xlim)
            if col == "throughput_tps":
                said = [_outcome(r) for r in mine if r["status"] == "ok" and r["effect"] and not r["repeat"]]
                if said:
                    ax.text(0.99, 0.03, "\n".join(said), transform=ax.transAxes, va="bottom", ha="right",
                            fontsize=7, family="monospace", color="0.2")
            if failed:
                ax.text(0.01, 0.97, "\n".join(f"{line_name(r['system'])}: FAILED "
                                              f"({textwrap.shorten(r['reason'], 60)})" for r in failed),
                        transform=ax.transAxes, va="top", ha="left", fontsize=7.5, color="tab:red")
            if col != "throughput_tps":
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(ScalarFormatter())
                ax.yaxis.set_minor_formatter(NullFormatter())
            else:
                ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.set_title(f"{kind}: {label}" if j == 0 else label, fontsize=10, loc="left")
            if i == len(kinds) - 1:
                ax.set_xlabel("time since the load started (s); shaded: the fault")
    ran = {r["system"] for r in rows}
    handles = []
    for s in systems:
        st = style(s)
        if s not in ran:
            st["label"] += " (no runs)"
        handles.append(Line2D([], [], linewidth=2, alpha=1.0 if s in ran else 0.35, **st))
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), frameon=False)
    fig.suptitle(title, fontsize=13, fontweight="bold", x=0.02, ha="left")
    lines = textwrap.wrap(caption_text, 180)
    fig.text(0.5, 0.005, "\n".join(lines), ha="center", va="bottom", fontsize=8.5)
    # the caption's height (8.5 pt lines, 1.2 spacing) below the panels, whatever the figure's height
    fig.tight_layout(rect=(0, min(0.5, (0.142 * len(lines) + 0.08) / fig.get_figheight()), 1, 0.95))
    return fig


def caption(rows: list[dict], systems: list) -> str:
    ran = {r["system"] for r in rows}
    missing = [s for s in systems if s not in ran]
    parts = ["IRT and CRT p99 of the transactions issued in each second (log scale; a gap: none committed), "
             "throughput of the commits completed in it, of the clients in the regions the fault did not touch "
             "(all regions for a fault that names none); recovery = from the heal until a 3 s "
             "window is back within 10 % of the throughput and IRT p99 before the fault, tput back = until a 2 s "
             "window is back within 10 % of the throughput (data-faults.csv)."]
    crashes = [r for r in rows if r["fault"] == "crash"]
    if any(not r.get("restarted") for r in crashes):
        parts.append("Crash: the follower killed at the window's start stays down to the end (no restart; lighter "
                     "shade); its recovery counts from the window's end, with the follower still gone.")
    if any(r.get("restarted") for r in crashes):
        after = [r["caught_up_after_s"] for r in crashes if r.get("caught_up_after_s") is not None]
        parts.append("Crash: the follower killed at the window's start is restarted empty at its end and takes "
                     "over a live replica's state" + (f" (caught up {min(after):.2f}-{max(after):.2f} s after "
                                                      "its restart)" if after else "") + ".")
    gaps = [r for r in rows if r.get("no_majority_s")]
    if gaps:
        parts.append(f"{len(gaps)} run(s) left a shard without a majority of its replicas live and running for a while ("
                     + ", ".join(f"{line_name(r['system'])} {r['fault']} {r['no_majority_s']:g} s" for r in gaps)
                     + "): no protocol could commit its transactions then (check.json notes).")
    n_failed = sum(r["status"] != "ok" for r in rows)
    if n_failed:
        parts.append(f"{n_failed} run(s) failed, named in their panels.")
    if missing:
        parts.append("No runs: " + ", ".join(map(line_name, missing)) + ".")
    return " ".join(parts)


def draw(root="results", name: str = "faults") -> Figure:
    import matplotlib.pyplot as plt
    rows, manifest = collect(root, name)
    systems = list((manifest or {}).get("systems") or [])
    systems += sorted({r["system"] for r in rows} - set(systems), key=system_rank)
    title = (manifest or {}).get("title") or "Exp 6: what a fault does to each protocol"
    if (manifest or {}).get("quick"):
        title += "  (--quick preset)"
    fig = build(rows, systems, title, caption(rows, systems))
    root = Path(root)
    pdf, png, csv = (root / f"data-{name}.{ext}" for ext in ("pdf", "png", "csv"))
    try:   # each file whole or not at all (testbed/core/files.py)
        for path, dpi in ((pdf, None), (png, 100)):
            with files.replacing(path) as tmp:
                fig.savefig(tmp, **({"dpi": dpi} if dpi else {}))
    finally:
        plt.close(fig)
    t = table(rows)
    with files.replacing(csv) as tmp:
        t.to_csv(tmp, index=False, float_format="%.3f")
    return Figure(pdf, png, csv, t, 99.0)
