"""Per-run summary (summary.json) from the clients' raw record CSVs (docs/running.md: the results folder)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from testbed.core import deploy as deploylib, files
from testbed.core.tables import text_table

PERCENTILES = (50, 90, 95, 99, 99.9)
CLASSES = ("IRT", "CRT", "all")
COLUMNS = ["txn_id", "type", "type_name", "class", "start_us", "latency_us", "attempts", "status"]


def nearest_rank(values, p: float):
    """Nearest-rank percentile: sorted[ceil(p/100*n) - 1]; None for an empty input."""
    s = sorted(values)
    if not s:
        return None
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p}: must be in (0, 100]")
    return s[max(0, math.ceil(round(p / 100 * len(s), 9)) - 1)]


def read_records(run_dir) -> pd.DataFrame:
    files = sorted(Path(run_dir, "clients").glob("*.records.csv"))
    if not files:
        return pd.DataFrame(columns=COLUMNS + ["client"])
    frames = []
    for f in files:
        df = pd.read_csv(f)
        missing = set(COLUMNS) - set(df.columns)
        if missing:
            raise ValueError(f"{f}: missing column(s) {', '.join(sorted(missing))}")
        frames.append(df.assign(client=f.name.removesuffix(".records.csv")))
    return pd.concat(frames, ignore_index=True)


def _started_in(df: pd.DataFrame, w0_us: float, w1_us: float) -> pd.DataFrame:
    return df[(df.start_us >= w0_us) & (df.start_us < w1_us)]


def _latencies_ms(started: pd.DataFrame) -> pd.Series:
    """The latency population of the percentiles: committed transactions among those started in the window."""
    return started[started.status == "committed"].latency_us / 1000.0


def _class_stats(df: pd.DataFrame, w0_us: float, w1_us: float) -> dict:
    committed = df[df.status == "committed"]
    end = committed.start_us + committed.latency_us
    done = committed[(end >= w0_us) & (end < w1_us)]           # throughput: completions in window
    started = _started_in(df, w0_us, w1_us)                    # latency: txns started in window
    lat = _latencies_ms(started)
    out = {"committed": int(len(done)), "throughput_tps": len(done) / ((w1_us - w0_us) / 1e6),
           "latency_samples": int(len(lat))}
    ordered = sorted(lat.tolist())   # sorted once: nearest_rank's sort of a sorted list is linear
    for p in PERCENTILES:
        v = nearest_rank(ordered, p)
        out[f"p{p:g}_ms"] = None if v is None else round(float(v), 3)
    out["mean_ms"] = round(float(lat.mean()), 3) if len(lat) else None
    out["given_up"] = int((started.status == "given_up").sum())
    # in flight when the drain timeout ran out (outcome unknown), over the whole run: they pile up at its end
    out["abandoned"] = int((df.status == "abandoned").sum())
    out["aborts"] = int((started.attempts - 1).clip(lower=0).sum())  # failed attempts before success/give-up
    att = int(started.attempts.sum())
    out["abort_rate"] = round(out["aborts"] / att, 6) if att else 0.0
    out["mean_attempts"] = round(float(started.attempts.mean()), 4) if len(started) else None
    return out


def summarize(run_dir, warmup_s: float, duration_s: float, cooldown_s: float, write: bool = True) -> dict:
    """Window [warmup, duration - cooldown) in seconds since each client's start."""
    if not 0 <= warmup_s < duration_s - cooldown_s:
        raise ValueError(f"empty window: warmup={warmup_s}, duration={duration_s}, cooldown={cooldown_s}")
    df = read_records(run_dir)
    w0, w1 = warmup_s * 1e6, (duration_s - cooldown_s) * 1e6
    stats = df[["class", "start_us", "latency_us", "attempts", "status"]]   # what _class_stats reads: faster copies
    summary = {
        "window_s": [warmup_s, duration_s - cooldown_s], "window_len_s": duration_s - cooldown_s - warmup_s,
        "clients": int(df.client.nunique()) if len(df) else 0, "records": int(len(df)),
        "classes": {c: _class_stats(stats if c == "all" else stats[stats["class"] == c], w0, w1) for c in CLASSES},
        "by_type": {str(t): int(n) for t, n in
                    df[df.status == "committed"].type_name.value_counts().sort_index().items()},
    }
    summary["throughput_tps"] = summary["classes"]["all"]["throughput_tps"]
    load = open_loop_load(run_dir, summary["throughput_tps"])
    if load is not None:   # a closed-loop summary stays as it was (so run folders from before are derived alike)
        load["kept_up_pct"] = round(100 * kept_up_share(load), 3)
        summary["load"] = load
    summary["counters"] = server_counters(run_dir)
    if write:
        files.write_text(Path(run_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
    return summary


def open_loop_load(run_dir, achieved_tps: float) -> dict | None:
    """An open-loop run's offered load and what became of it, summed over the clients' summaries (each client's
    `open_loop`, written by the engine; docs/workloads.md); None for a closed-loop run.
      offered_tps    the configured rate (the clients' client.rate_tps summed)
      arrival_tps    arrivals in the measurement window per second (the Poisson draw around offered_tps)
      achieved_tps   commits completing in the window per second (the summary's throughput_tps)
      shed           arrivals refused because client.max_outstanding were running or waiting (never run, in no
                     percentile); unsent: still waiting for a coordinator when the drain timeout passed
      *_in_window    of those, the ones that arrived in the window (the engine's, the deployment's window)
      max_queued     the most arrivals that waited for a coordinator at once, at any one client"""
    parts = []
    for f in sorted(Path(run_dir, "clients").glob("*.summary.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{f}: {e}") from e
        if isinstance(data, dict) and isinstance(data.get("open_loop"), dict):
            parts.append((data, data["open_loop"]))
    if not parts:
        return None

    def total(key: str) -> int:
        return sum(int(ol.get(key, 0)) for _, ol in parts)
    arrival_tps = sum(int(ol.get("arrivals_in_window", 0)) / max(float(c["window_end_s"]) - float(c["window_start_s"]),
                                                                 1e-9) for c, ol in parts)
    return {"mode": "open", "clients": len(parts),
            # rounded: a total split over the clients and summed again would show as 100.00000000000001
            "offered_tps": round(sum(float(ol["rate_tps"]) for _, ol in parts), 6),
            "arrival_tps": arrival_tps, "achieved_tps": achieved_tps,
            "max_outstanding": max(int(ol.get("max_outstanding", 0)) for _, ol in parts),
            **{k: total(k) for k in ("arrivals", "shed", "unsent", "arrivals_in_window", "shed_in_window",
                                     "unsent_in_window")},
            "max_queued": max(int(ol.get("max_queued", 0)) for _, ol in parts)}


def kept_up_share(load: dict | None) -> float:
    """The share of an open load's arrivals that were run (neither shed nor left unsent at the drain); 1 for a
    closed loop (load None)."""
    if not load or not load.get("arrivals"):
        return 1.0
    return 1 - (int(load.get("shed", 0)) + int(load.get("unsent", 0))) / int(load["arrivals"])


def load_shortfall(load: dict) -> str:
    """'<shed> % of the arrivals shed, <unsent> never sent' for an open load that was not kept up with."""
    n = int(load["arrivals"])
    return (f"{100 * int(load.get('shed', 0)) / n:.1f} % of {n} arrivals shed (client.max_outstanding), "
            f"{int(load.get('unsent', 0))} never sent (waiting when the drain timeout ran out)")


def server_counters(run_dir) -> dict:
    """Protocol counters summed over every server state dump of a run (servers/*.state.json, key "counters"; e.g.
    DAST's irts and irts_behind_undecided_crt, docs/protocols/dast.md); a counter whose name ends in `_max` (Janus's
    largest_scc_max) is a maximum and is combined as one. {} when no dump carries any."""
    totals: dict = {}
    for f in sorted(Path(run_dir, "servers").glob("*.state.json")):
        try:
            counters = json.loads(f.read_text()).get("counters") or {}
        except (OSError, ValueError, AttributeError) as e:
            raise ValueError(f"{f}: {e}") from e
        for k, v in counters.items():
            totals[k] = max(totals.get(k, 0), int(v)) if k.endswith("_max") else totals.get(k, 0) + int(v)
    return totals


def _client_knobs(run_dir) -> dict:
    return deploylib.load_yaml(Path(run_dir, "deploy.yml"))["client"]


def summarize_run(run_dir, write: bool = True) -> dict:
    """summarize() with the window taken from the run's deploy.yml."""
    client = _client_knobs(run_dir)
    return summarize(run_dir, client["warmup_s"], client["duration_s"], client["cooldown_s"], write)


def format_table(summary: dict) -> str:
    def f(v, nd=1):
        return "-" if v is None else f"{v:.{nd}f}"
    cols = ["class", "commits", "tput/s"] + [f"p{p:g}ms" for p in PERCENTILES] + ["att", "gaveup", "abandoned"]
    rows = []
    for c in CLASSES:
        s = summary["classes"][c]
        rows.append([c, str(s["committed"]), f(s["throughput_tps"])]
                    + [f(s[f"p{p:g}_ms"]) for p in PERCENTILES]
                    + [f(s["mean_attempts"], 2), str(s["given_up"]), str(s.get("abandoned", 0))])
    w = summary["window_s"]
    head = f"window [{w[0]:g}s, {w[1]:g}s)  clients {summary['clients']}  records {summary['records']}"
    tail = []
    load = summary.get("load")
    if load:   # open loop: what was offered beside what was done, and what was refused (never silently)
        tail.append(f"open loop: offered {load['offered_tps']:.1f} txn/s, arrived {load['arrival_tps']:.1f}/s in the "
                    f"window, achieved {load['achieved_tps']:.1f}/s")
        tail.append(f"  shed {load['shed']} of {load['arrivals']} arrivals ({load['shed_in_window']} in the window; "
                    f"max_outstanding {load['max_outstanding']} per client), unsent at the drain timeout "
                    f"{load['unsent']}, most waiting at one client {load['max_queued']}")
        if kept_up_share(load) < 1:
            tail.append(f"  warning: the offered load was not kept up with: {load_shortfall(load)}")
    if summary.get("counters"):
        tail.append("counters (whole run): " + ", ".join(f"{k} {v}" for k, v in sorted(summary["counters"].items())))
    return "\n".join([head, text_table(cols, rows)] + tail)


def window_of_run(run_dir) -> tuple[float, float]:
    """The measurement window [warmup, duration - cooldown) of a run, in seconds, from its deploy.yml."""
    client = _client_knobs(run_dir)
    return float(client["warmup_s"]), float(client["duration_s"]) - float(client["cooldown_s"])


def class_percentiles(run_dir, percentiles, window: tuple[float, float] | None = None) -> dict:
    """{class: {p: latency_ms or None}} for any percentiles p in (0, 100], nearest-rank over the committed
    transactions that started in the window (the same population as summary.json's p50..p99.9), pooled over
    every client of the run. window: (start_s, end_s); default the run's own from deploy.yml."""
    w0, w1 = window if window is not None else window_of_run(run_dir)
    df = read_records(run_dir)
    out = {}
    for c in CLASSES:
        sub = df if c == "all" else df[df["class"] == c]
        lat = sorted(_latencies_ms(_started_in(sub, w0 * 1e6, w1 * 1e6)).tolist())
        out[c] = {p: (None if not lat else round(float(nearest_rank(lat, p)), 3)) for p in percentiles}
    return out
