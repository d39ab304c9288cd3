"""Aggregate an experiment's run folders and draw results/data-<name>.{pdf,png,csv}.

    draw("n_clients", root="results") -> Figure(pdf, png, csv, table)

Input: every results/<name>/<run-id>/ whose meta.json was written by the sweep runner (experiment, system,
x, point_key, repeat). When results/<name>/sweep.json exists (written by the runner at the start of every
sweep) only the points it declares count, so runs of an older configuration never mix in; points it declares
but that have no run yet are reported as "not run". Per (point, repeat) the latest run counts (a re-run or
--fresh supersedes older ones).

Per run: throughput from summary.json; median and tail latency per class (IRT, CRT) recomputed from the raw
client records (nearest-rank over committed transactions started in the measurement window) at the configured
TAIL_PERCENTILE, whatever it is. Per point: the median over the ok repeats, with min and max as the spread.
A point whose repeats all failed is a failure (drawn as an 'x' on the x axis, reason in the notes), never a
zero. A protocol of SYSTEMS with no data is listed in the legend as "no data". A protocol's variant ('tapir+backoff',
testbed/core/variants.py) is a line of its own: its protocol's colour and marker, dotted, labelled with the value of
the knob it sets ('Tapir (backoff 10 ms)'); the caption says which line retried aborts how. An unknown experiment is a
ValueError; an experiment with no run to draw (none at all, or none of its current sweep) raises NoRuns and
writes nothing.
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from testbed.analysis import results as resultslib
from testbed.analysis.rundirs import read_json, run_outcome, run_start, scan_runs
from testbed.core import experiments, files, rtt as rttlib, variants
from testbed.core.config import load_exp_config
from testbed.core.tables import text_table

MANIFEST = "sweep.json"
SYSTEM_ORDER = ("dast", "janus", "tapir", "slog")
STYLES = {  # DAST red solid, Janus orange dashed, SLOG blue dotted, Tapir green dash-dot
    "dast": dict(label="DAST", color="tab:red", linestyle="-", marker="s"),
    "janus": dict(label="Janus", color="tab:orange", linestyle="--", marker="v"),
    "slog": dict(label="SLOG", color="tab:blue", linestyle=":", marker="o"),
    "tapir": dict(label="Tapir", color="tab:green", linestyle="-.", marker="*"),
}
VARIANT_LINESTYLE = (0, (1, 1))   # a protocol's variant ('tapir+backoff'): the protocol's colour and marker, dotted
SERIES_FILLS = ("full", "none", "left", "bottom", "right", "top")
METRICS = ("throughput_tps", "irt_p50_ms", "irt_tail_ms", "crt_p50_ms", "crt_tail_ms")


def metric_titles(tail: float) -> dict:
    t = f"p{tail:g}"
    return {"throughput_tps": ("Throughput (committed, all regions)", "txn/s"),
            "irt_p50_ms": ("IRT median latency", "ms"), "irt_tail_ms": (f"IRT {t} latency", "ms"),
            "crt_p50_ms": ("CRT median latency", "ms"), "crt_tail_ms": (f"CRT {t} latency", "ms")}


# ---------------------------------------------------------------- reading run folders

def _deploy_info(run_dir: Path) -> dict:
    try:
        d = yaml.safe_load((run_dir / "deploy.yml").read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    link, w, c = d.get("link", {}), d.get("workload", {}), d.get("client", {})
    rtt = link.get("rtt_ms") or [[]]
    diag = sorted({row[i] for i, row in enumerate(rtt) if i < len(row)})
    off = sorted({v for i, row in enumerate(rtt) for j, v in enumerate(row) if i != j})
    clients = sum(1 for n in d.get("nodes", []) if n.get("kind") == "client")
    shards = d.get("regions", 0) * d.get("shards_per_region", 0)
    return dict(regions=d.get("regions"), shards_per_region=d.get("shards_per_region"), replicas=d.get("replicas"),
                scale=w.get("scale"), workload=w.get("name"), intra_rtt=tuple(diag), inter_rtt=tuple(off),
                jitter_one_way=link.get("jitter_ms"), mechanism=link.get("mechanism"),
                duration=c.get("duration_s"), warmup=c.get("warmup_s"), cooldown=c.get("cooldown_s"),
                retry_backoff=float(c.get("retry_backoff_ms") or 0), retry_backoff_max=c.get("retry_backoff_max_ms"),
                concurrency=c.get("n_concurrent"), clients_per_shard=(clients // shards) if shards else None)


def load_runs(exp_dir, tail: float) -> pd.DataFrame:
    """One row per sweep run: identity, outcome, metrics (NaN unless ok), deployment facts."""
    rows = []
    for run_dir, meta in scan_runs(exp_dir):
        status, reason = run_outcome(run_dir, meta)
        x = meta.get("x") or {}
        row = dict(run_id=run_dir.name, run_dir=str(run_dir), start=run_start(meta, run_dir),
                   experiment=meta.get("experiment"), system=meta.get("system"), series=meta.get("series") or "",
                   x=float(x.get("value")), x_name=x.get("name"), x_unit=x.get("unit", ""),
                   point_key=meta.get("point_key"), repeat=int(meta.get("repeat", 0)), status=status,
                   reason=reason, backend=meta.get("backend"), shaping=meta.get("shaping"),
                   git_sha=meta.get("git_sha"),
                   steal_pct=(meta.get("machine_cpu") or {}).get("steal_pct", math.nan),
                   busy_pct=(meta.get("machine_cpu") or {}).get("busy_pct", math.nan),
                   **{m: math.nan for m in METRICS})
        if status == "ok":
            summary = read_json(run_dir / "summary.json") or {}
            row["throughput_tps"] = summary.get("classes", {}).get("all", {}).get("throughput_tps", math.nan)
            row["given_up"] = sum(int(summary.get("classes", {}).get(c, {}).get("given_up") or 0)
                                  for c in ("IRT", "CRT"))
            # an open load not kept up with: arrivals shed or never sent (%), transactions abandoned at the drain
            load = summary.get("load")
            row["unkept_pct"] = 100 * (1 - resultslib.kept_up_share(load)) if load else math.nan
            row["abandoned"] = int(summary.get("classes", {}).get("all", {}).get("abandoned") or 0)
            try:
                pct = resultslib.class_percentiles(run_dir, (50, tail))
            except (OSError, ValueError, KeyError) as e:
                row.update(status="failed", reason=f"unreadable records: {e}")
            else:
                for cls in ("IRT", "CRT"):
                    for p, col in ((50, "p50"), (tail, "tail")):
                        v = pct[cls][p]
                        row[f"{cls.lower()}_{col}_ms"] = math.nan if v is None else v
        row.update(_deploy_info(run_dir))
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- aggregation

def latest_per_repeat(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (point_key, repeat) the most recent run only (re-runs and --fresh supersede)."""
    if runs.empty:
        return runs
    return runs.sort_values("start").groupby(["point_key", "repeat"], as_index=False).tail(1)


def select(runs: pd.DataFrame, manifest: dict | None) -> pd.DataFrame:
    """The runs that make up the current sweep (see the module doc)."""
    if runs.empty:
        return runs
    if manifest:
        keys = {p["key"] for p in manifest.get("points", [])}
        runs = runs[runs.point_key.isin(keys) & (runs.repeat < int(manifest.get("n_repeat", 1)))]
        return latest_per_repeat(runs)
    runs = latest_per_repeat(runs)
    # no manifest: where several configurations measured the same (system, series, x), the newest one wins
    newest = runs.sort_values("start").groupby(["system", "series", "x"]).point_key.last()
    return runs[runs.point_key.isin(set(newest))]


def aggregate(runs: pd.DataFrame, manifest: dict | None = None) -> pd.DataFrame:
    """One row per (system, series, x): its line's name (line_name), median/min/max of every metric over ok repeats,
    repeat counts, status ok | partial | failed | not run, and the failure reasons."""
    cols = ["system", "series", "x", "line", "point_key", "status", "repeats_ok", "repeats_failed", "reasons",
            "run_ids"]
    cols += [f"{m}_{s}" for m in METRICS for s in ("median", "min", "max")] + ["busy_pct_max", "unkept_pct_max"]
    out = []
    sel = select(runs, manifest)
    seen = set()
    if not sel.empty:
        for (system, series, x), g in sel.groupby(["system", "series", "x"], sort=True):
            ok, bad = g[g.status == "ok"], g[g.status != "ok"]
            row = dict(system=system, series=series, x=float(x), line=line_name(system, series, sel),
                       point_key=g.point_key.iloc[-1],
                       status="ok" if bad.empty else ("failed" if ok.empty else "partial"),
                       repeats_ok=len(ok), repeats_failed=len(bad),
                       reasons="; ".join(dict.fromkeys(bad.reason.astype(str))),
                       run_ids=" ".join(g.sort_values("repeat").run_id))
            for m in METRICS:
                v = ok[m].dropna()
                row[f"{m}_median"] = float(v.median()) if len(v) else math.nan
                row[f"{m}_min"] = float(v.min()) if len(v) else math.nan
                row[f"{m}_max"] = float(v.max()) if len(v) else math.nan
            for col in ("busy_pct", "unkept_pct"):
                v = ok[col].dropna() if col in ok else []
                row[f"{col}_max"] = float(v.max()) if len(v) else math.nan
            out.append(row)
            seen.add(row["point_key"])
    for p in (manifest or {}).get("points", []):
        if p["key"] not in seen:
            out.append(dict(system=p["system"], series=p.get("series", ""), x=float(p["x"]), point_key=p["key"],
                            line=line_name(p["system"], p.get("series", ""), sel),
                            status="not run", repeats_ok=0, repeats_failed=0, reasons="", run_ids="",
                            **{c: math.nan for c in cols if c.endswith(("_median", "_min", "_max"))}))
            seen.add(p["key"])
    df = pd.DataFrame(out, columns=cols)
    if df.empty:
        return df
    df["_o"] = df.system.map(system_rank)
    return df.sort_values(["_o", "series", "x"]).drop(columns="_o").reset_index(drop=True)


def tidy(agg: pd.DataFrame, experiment: str, x_name: str, tail: float) -> pd.DataFrame:
    """Long form: one row per (system, series, x, metric)."""
    titles = metric_titles(tail)
    rows = []
    for _, r in agg.iterrows():
        for m in METRICS:
            rows.append(dict(experiment=experiment, system=r.system, series=r.series, x_name=x_name, x=r.x,
                             metric=m.replace("tail", f"p{tail:g}"), unit=titles[m][1],
                             median=r[f"{m}_median"], min=r[f"{m}_min"], max=r[f"{m}_max"],
                             repeats_ok=r.repeats_ok, repeats_failed=r.repeats_failed, status=r.status,
                             reasons=r.reasons, point_key=r.point_key))
    return pd.DataFrame(rows, columns=["experiment", "system", "series", "x_name", "x", "metric", "unit", "median",
                                       "min", "max", "repeats_ok", "repeats_failed", "status", "reasons",
                                       "point_key"])


# ---------------------------------------------------------------- drawing

@dataclass
class Figure:
    pdf: Path
    png: Path
    csv: Path
    table: pd.DataFrame   # aggregate()
    tail: float


def _fmt(v, nd=1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


CPU_BUSY_WARN_PCT = 70  # machine CPU busy over a run above which latency tails carry CPU queueing (2-core VM)


def style(system: str, detail: str = "") -> dict:
    """A system's line style: its protocol's (STYLES; black for one without); a variant's with VARIANT_LINESTYLE and
    the label 'Tapir (backoff)', or with a detail 'Tapir (backoff 10 ms)'."""
    protocol, variant = variants.protocol_of(system), system.partition(variants.SEP)[2]
    st = dict(STYLES.get(protocol, dict(label=protocol, color="black", linestyle="-", marker="o")))
    if variant:
        st.update(label=f"{st['label']} ({variant}{' ' + detail if detail else ''})", linestyle=VARIANT_LINESTYLE)
    return st


def system_rank(system: str) -> tuple:
    """Where a system's line goes among the others: SYSTEM_ORDER's protocols first, a variant right after its
    protocol."""
    protocol = variants.protocol_of(system)
    return (SYSTEM_ORDER.index(protocol) if protocol in SYSTEM_ORDER else len(SYSTEM_ORDER), protocol, system)


def line_name(system: str, series: str = "", runs: pd.DataFrame | None = None) -> str:
    """A protocol's line as the legend, tables and notes name it: 'DAST', or 'DAST [2 client proc/shard]'; a variant's
    with the value its runs (load_runs()) had of the knob it shows: 'Tapir (backoff 10 ms)' ('Tapir (backoff)' without
    runs)."""
    v = variants.variant_of(system)
    vals = _values(runs[runs.system == system], v.shown[0]) if v and runs is not None and "system" in runs else []
    detail = f"{_one_or_swept(vals)} {v.shown[1]}" if vals else ""
    return style(system, detail)["label"] + (f" [{series}]" if series else "")


def hot_points(agg: pd.DataFrame, limit: float = CPU_BUSY_WARN_PCT) -> list[str]:
    """'<protocol> at x=<x> (<busy> %)' for every point where a run kept the host's CPU more than `limit` % busy:
    there the latency tails carry CPU queueing, not only the protocol's waits."""
    if agg.empty or "busy_pct_max" not in agg:
        return []
    hot = agg[agg.busy_pct_max > limit]
    return [f"{r.line} at x={_xfmt(r.x)} ({r.busy_pct_max:.0f} %)" for r in hot.itertuples()]


def unkept_points(agg: pd.DataFrame) -> list[str]:
    """'<protocol> at x=<x> (<share> %)' for every point where an open load was not kept up with (a run shed
    arrivals or left some unsent at the drain): its latencies are of the transactions it did run."""
    if agg.empty or "unkept_pct_max" not in agg:
        return []
    return [f"{r.line} at x={_xfmt(r.x)} ({r.unkept_pct_max:.1f} %)"
            for r in agg[agg.unkept_pct_max > 0].itertuples()]


def _xfmt(x: float) -> str:
    return f"{x:g}"


def _values(df: pd.DataFrame, col: str) -> list:
    if df.empty or col not in df:
        return []
    vals = {v for v in df[col].tolist() if v is not None and not (isinstance(v, float) and math.isnan(v))}
    try:
        return sorted(vals)
    except TypeError:
        return sorted(vals, key=str)


def _one_or_swept(vals, fmt=lambda v: f"{v:g}") -> str:
    if not vals:
        return "?"
    return fmt(vals[0]) if len(vals) == 1 else "swept " + "/".join(fmt(v) for v in vals)


def caption(runs: pd.DataFrame, manifest: dict | None, workload: str, n_repeat: int | None, tail: float) -> str:
    """Scale, RTTs, shaping mechanism, regions x shards, run length, repeats, load, latency definition."""
    if runs.empty:
        return "no runs yet"
    rtt = lambda t: "/".join(f"{v:g}" for v in t) if t else "-"
    intra = _one_or_swept(_values(runs, "intra_rtt"), rtt)
    inter = _one_or_swept(_values(runs, "inter_rtt"), rtt)
    jit = [round(rttlib.rtt_jitter(j), 3) for j in _values(runs, "jitter_one_way")]
    jitter = "no jitter" if jit in ([], [0]) else f"RTT std-dev {_one_or_swept(jit)} ms"
    mech = ", ".join(f"{m} ({b} backend)" for m, b in
                     sorted({(str(r.shaping), str(r.backend)) for r in runs.itertuples()}))
    dur, wu, cd = (_values(runs, k) for k in ("duration", "warmup", "cooldown"))
    run_len = (f"runs {_one_or_swept(dur)} s, measured {wu[0]:g}-{dur[0] - cd[0]:g} s"
               if len(dur) == len(wu) == len(cd) == 1 else f"runs {_one_or_swept(dur)} s")
    reps = n_repeat if n_repeat else int(runs.repeat.max()) + 1
    load = (f"load {_one_or_swept(_values(runs, 'clients_per_shard'))} client proc/shard x "
            f"{_one_or_swept(_values(runs, 'concurrency'))} closed-loop coordinators each")
    retries = _retries(runs)
    parts = [workload or _one_or_swept(_values(runs, "workload"), str),
             f"{_one_or_swept(_values(runs, 'regions'))} regions x {_one_or_swept(_values(runs, 'shards_per_region'))}"
             f" shards x 3 replicas", f"scale {_one_or_swept(_values(runs, 'scale'))}",
             f"RTT {intra} ms intra-region, {inter} ms cross-region ({jitter})",
             f"shaping {mech}", load, retries, run_len,
             f"{reps} repeat{'s' if reps != 1 else ''}/point (median" + (", bars min-max)" if reps > 1 else ")"),
             f"latency: nearest-rank over committed txns started in the window; "
             f"IRT = intra-region txn, CRT = cross-region txn; tail = p{tail:g}"]
    busy = runs.dropna(subset=["busy_pct"]) if "busy_pct" in runs else runs.iloc[0:0]
    if len(busy):  # a saturated CPU shows up as latency: say where the machine was busy
        lo, hi = f"{busy.busy_pct.min():.0f}", f"{busy.busy_pct.max():.0f}"
        part = f"host CPU busy {lo if lo == hi else lo + '-' + hi} %"
        hot = sorted(set(busy.x[busy.busy_pct > CPU_BUSY_WARN_PCT]))
        if hot:
            part += (f", above {CPU_BUSY_WARN_PCT} % at x = {', '.join(_xfmt(x) for x in hot)} "
                     "(tails there include CPU queueing)")
        parts.insert(-1, part)
    steal = runs["steal_pct"].dropna() if "steal_pct" in runs else []
    if len(steal) and steal.max() > 5:  # the hypervisor took CPU from the runs: say so beside the numbers
        parts.insert(-1, f"CPU steal during runs {steal.median():.0f} % median, {steal.max():.0f} % max")
    unkept = runs[runs["unkept_pct"].fillna(0) > 0] if "unkept_pct" in runs else runs.iloc[0:0]
    if len(unkept):  # an open load the system could not keep up with: its latencies are of what it did run
        worst = unkept.groupby(["system", "x"]).unkept_pct.max()
        parts.insert(-1, "open load NOT kept up with (arrivals shed or never sent): " + ", ".join(
            f"{line_name(sy, runs=runs)} at x = {_xfmt(x)} ({v:.1f} %)" for (sy, x), v in worst.items()))
    if "abandoned" in runs and runs["abandoned"].fillna(0).sum() > 0:
        ab = runs.groupby("system")["abandoned"].sum()
        parts.insert(-1, "abandoned in flight at the drain (outcome unknown, in no latency): " + ", ".join(
            f"{line_name(sy, runs=runs)} {int(n)}" for sy, n in ab.items() if n > 0))
    if "given_up" in runs and runs["given_up"].fillna(0).sum() > 0:  # aborted on every attempt: not in the latencies
        gave = runs.groupby("system")["given_up"].sum()
        parts.insert(-1, "given up after the retry limit (started in the window, not in the latencies): " + ", ".join(
            f"{line_name(sy, runs=runs)} {int(n)}" for sy, n in gave.items() if n > 0))
    for sy, sk in sorted(((manifest or {}).get("skipped_points") or {}).items()):  # by rule, not by failure
        parts.insert(-1, f"{line_name(sy, runs=runs)} not run at x = "
                         f"{', '.join(_xfmt(x) for x in sk.get('x', []))} ({sk.get('reason', 'skipped')})")
    shas = _values(runs, "git_sha")
    if shas:
        parts.insert(-1, "code " + _one_or_swept(shas, lambda v: str(v)[:12] + str(v)[40:]))
    return " | ".join(parts)


def _retries(runs: pd.DataFrame) -> str:
    """How the runs retried an aborted attempt; where the lines did it differently (a variant 'tapir+backoff' beside
    'tapir'), which line did what."""
    policies = {}   # (first backoff, cap) -> the systems whose runs had it; (0, 0): at once
    for r in runs.itertuples():
        first = getattr(r, "retry_backoff", 0.0)
        first = 0.0 if first != first or not first else float(first)   # NaN: a run folder without its deploy.yml
        policies.setdefault((first, float(r.retry_backoff_max) if first else 0.0), set()).add(r.system)

    def said(first, cap):
        return ("aborted attempts retried at once (the artifact's)" if not first else "aborted attempts retried "
                f"after a randomized exponential backoff from {first:g} ms, at most {cap:g} ms")
    if len(policies) <= 1:
        return said(*next(iter(policies), (0.0, 0.0)))
    return "; ".join(said(*k) + ": " + ", ".join(line_name(sy, runs=runs) for sy in sorted(systems, key=system_rank))
                     for k, systems in sorted(policies.items()))


def _notes(agg: pd.DataFrame, limit: int = 9) -> list[str]:
    notes = []
    for _, r in agg.iterrows():
        name = r.line
        if r.status == "failed":
            notes.append(f"x  {name} at {_xfmt(r.x)}: failed ({r.reasons})")
        elif r.status == "partial":
            notes.append(f"{name} at {_xfmt(r.x)}: {r.repeats_failed} of {r.repeats_ok + r.repeats_failed} "
                         f"repeats failed ({r.reasons})")
        elif r.status == "not run":
            notes.append(f"{name} at {_xfmt(r.x)}: not run (sweep interrupted or still running)")
    if len(notes) > limit:
        notes = notes[:limit - 1] + [f"... and {len(notes) - limit + 1} more (see the CSV)"]
    return ["\n      ".join(textwrap.wrap(n, 58)) for n in notes]


def build_figure(agg: pd.DataFrame, runs: pd.DataFrame, *, title: str, x_label: str, systems,
                 no_data_reason: dict, tail: float, caption_text: str):
    """The matplotlib Figure: 5 panels, legend and notes in the sixth cell, caption line at the bottom."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    titles = metric_titles(tail)
    fig = plt.figure(figsize=(15, 9.2))
    gs = fig.add_gridspec(2, 3, left=0.055, right=0.985, top=0.9, bottom=0.17, hspace=0.42, wspace=0.22)
    slots = {"throughput_tps": gs[0, 0], "irt_p50_ms": gs[0, 1], "irt_tail_ms": gs[0, 2],
             "crt_p50_ms": gs[1, 1], "crt_tail_ms": gs[1, 2]}
    axes = {m: fig.add_subplot(s) for m, s in slots.items()}
    info = fig.add_subplot(gs[1, 0])
    info.axis("off")

    xs_all = sorted(set(agg.x)) if not agg.empty else []
    series_of = {}
    for s in (agg.series.unique() if not agg.empty else []):
        series_of[s] = SERIES_FILLS[len(series_of) % len(SERIES_FILLS)]
    any_failed = False
    for m, ax in axes.items():
        plotted = False
        for (system, series), g in (agg.groupby(["system", "series"], sort=False) if not agg.empty else []):
            st = style(system)
            g = g.sort_values("x")
            med, lo, hi = g[f"{m}_median"], g[f"{m}_min"], g[f"{m}_max"]
            ok = med.notna()
            if ok.any():
                ax.errorbar(g.x[ok], med[ok], yerr=[(med - lo)[ok], (hi - med)[ok]], color=st["color"],
                            linestyle="none", capsize=3, elinewidth=1, zorder=2)
                # NaN (failed / not run / no sample) breaks the line, so a gap is visible
                ax.plot(g.x, med, color=st["color"], linestyle=st["linestyle"], marker=st["marker"], linewidth=2,
                        markersize=7, fillstyle=series_of.get(series, "full"), zorder=3)
                plotted = True
            failed = g[g.status == "failed"]
            if len(failed):
                any_failed = True
                tr = blended_transform_factory(ax.transData, ax.transAxes)
                ax.plot(failed.x, [0] * len(failed), transform=tr, linestyle="none", marker="x", markersize=11,
                        markeredgewidth=2.5, color=st["color"], clip_on=False, zorder=4)
        ax.set_title(titles[m][0], fontsize=11)
        ax.set_ylabel(titles[m][1])
        ax.set_xlabel(x_label, fontsize=9)
        ax.grid(True, alpha=0.3)
        if xs_all:
            pad = (max(xs_all) - min(xs_all)) * 0.06 or max(abs(xs_all[0]) * 0.1, 0.5)
            ax.set_xlim(min(xs_all) - pad, max(xs_all) + pad)
            if len(xs_all) <= 12:
                ax.set_xticks(xs_all, [_xfmt(x) for x in xs_all])
        ax.set_ylim(bottom=0)
        if plotted:
            top = max(float(agg[[f"{m}_median", f"{m}_max"]].max().max()), 1e-9)
            ax.set_ylim(0, top * 1.12)  # headroom: the highest point stays clear of the frame
        else:
            ax.text(0.5, 0.5, "no successful runs" if not agg.empty else "no data", transform=ax.transAxes,
                    ha="center", va="center", color="0.4")

    handles = []
    for system in systems:
        st, name = style(system), line_name(system, runs=runs)
        has = (not agg.empty) and ((agg.system == system) & (agg.status != "not run")).any()
        why = f": {no_data_reason[system]}" if no_data_reason.get(system) else ""
        label = name if has else f"{name} (no data{why})"
        sers = sorted(agg[agg.system == system].series.unique()) if has else [""]
        for s in sers:
            handles.append(Line2D([], [], color=st["color"], linestyle=st["linestyle"], marker=st["marker"],
                                  linewidth=2, fillstyle=series_of.get(s, "full"),
                                  label=label + (f", {s}" if s else ""), alpha=1.0 if has else 0.35))
    if any_failed:
        handles.append(Line2D([], [], color="0.2", linestyle="none", marker="x", markersize=9, markeredgewidth=2,
                              label="failed point (all repeats failed)"))
    leg = info.legend(handles=handles, loc="upper left", frameon=False, fontsize=10, title="protocol",
                      title_fontsize=10, borderaxespad=0)
    leg._legend_box.align = "left"
    notes = _notes(agg)
    if notes:
        info.text(0, 0.5 - 0.02 * max(0, len(handles) - 4), "\n".join(notes), transform=info.transAxes,
                  va="top", ha="left", fontsize=8, family="monospace", color="0.15")

    fig.suptitle(title, fontsize=14, fontweight="bold")
    fig.text(0.5, 0.012, "\n".join(textwrap.wrap(caption_text, 170)), ha="center", va="bottom", fontsize=9.5,
             color="0.15")
    return fig


def plot(agg: pd.DataFrame, runs: pd.DataFrame, *, pdf: Path, png: Path, **kw) -> None:
    import matplotlib.pyplot as plt
    fig = build_figure(agg, runs, **kw)
    try:   # each file whole or not at all: a full disk keeps the last figure (testbed/core/files.py)
        for path, dpi in ((pdf, None), (png, 110)):
            with files.replacing(path) as tmp:
                fig.savefig(tmp, **({"dpi": dpi} if dpi else {}))
    finally:
        plt.close(fig)


class NoRuns(ValueError):
    """draw(): the experiment has no run folder to draw (none at all, or none of its current sweep.json)."""


def draw(name: str, root="results", tail: float | None = None, config=None) -> Figure:
    """Aggregate results/<name>/ and write results/data-<name>.{pdf,png,csv}. tail: the tail percentile
    (default: the sweep's recorded TAIL_PERCENTILE, else exp_config.py's). name: an experiment or its alias
    exp1..exp5 (ValueError otherwise). Raises NoRuns, writing nothing, when there is no run to draw; a sweep
    whose runs all failed is drawn (as failures)."""
    exp = experiments.get(name)
    name = exp.name
    root = Path(root)
    exp_dir = root / name
    manifest = read_json(exp_dir / MANIFEST)
    if tail is None:
        tail = (manifest or {}).get("tail_percentile")
    if tail is None:
        try:
            tail = load_exp_config(config).tail_percentile
        except ValueError:
            tail = 99
    tail = float(tail)
    if not 0 < tail <= 100:
        raise ValueError(f"tail percentile {tail}: must be in (0, 100]")
    runs = load_runs(exp_dir, tail)
    sel = select(runs, manifest)
    if sel.empty:
        where = f"no runs of {name} under {exp_dir}/"
        if runs.empty:
            raise NoRuns(f"{where} (run {exp.script()} first)")
        n = len(runs)
        raise NoRuns(f"{where} belong to its current sweep ({MANIFEST}; the {n} run{'s' if n != 1 else ''} there "
                     f"{'are' if n != 1 else 'is'} of another configuration); run {exp.script()}")
    agg = aggregate(runs, manifest)
    x_name = (manifest or {}).get("x", {}).get("name") or runs.x_name.iloc[0]
    x_label = ((manifest or {}).get("x", {}).get("label") or exp.x_label).replace("{inter}", "the mean")
    title = (manifest or {}).get("title") or exp.title
    systems = list((manifest or {}).get("systems") or [])
    if not systems:
        try:
            systems = list(load_exp_config(config).systems)
        except ValueError:
            systems = list(SYSTEM_ORDER)
    systems += [s for s in (agg.system.unique() if not agg.empty else []) if s not in systems]
    no_data_reason = {s: v for s, v in ((manifest or {}).get("systems") or {}).items() if v != "run"}
    reps = (manifest or {}).get("n_repeat")
    if (manifest or {}).get("quick"):
        title += "  (--quick preset)"
    cap = caption(sel, manifest, (manifest or {}).get("workload") or exp.workload, reps, tail)
    pdf, png, csv = (root / f"data-{name}.{ext}" for ext in ("pdf", "png", "csv"))
    plot(agg, sel, title=title, x_label=x_label, systems=systems, no_data_reason=no_data_reason, tail=tail,
         caption_text=cap, pdf=pdf, png=png)
    with files.replacing(csv) as tmp:
        tidy(agg, name, x_name, tail).to_csv(tmp, index=False)
    return Figure(pdf, png, csv, agg, tail)


def point_table(agg: pd.DataFrame, tail: float) -> str:
    """Plain-text per-point table (median over ok repeats)."""
    t = f"p{tail:g}"
    cols = ["system", "x", "ok/fail", "tput/s", "IRT p50", f"IRT {t}", "CRT p50", f"CRT {t}", "busy %", "note"]
    rows = []
    for _, r in agg.iterrows():
        name = r.line
        note = r.status if r.status != "ok" else ""
        if r.reasons:
            note += f": {r.reasons}"
        rows.append([name, _xfmt(r.x), f"{r.repeats_ok}/{r.repeats_failed}",
                     _fmt(r.throughput_tps_median), _fmt(r.irt_p50_ms_median), _fmt(r.irt_tail_ms_median),
                     _fmt(r.crt_p50_ms_median), _fmt(r.crt_tail_ms_median), _fmt(r.busy_pct_max, 0), note[:70]])
    head, rest = text_table(cols, rows, left=(0, 8)).split("\n", 1)
    return f"{head}   (latencies in ms)\n{rest}"  # the unit on the header line
