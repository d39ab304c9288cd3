"""A run second by second (exp 6, docs/experiments.md): the clients' records in 1 s buckets, and what a fault window
did to them.

Buckets are by time since each client's run start, the clock of the summary's window (results.summarize) and of
the fault schedule (t = 0: the load starts). Per bucket [t, t + 1 s):
  throughput_tps        commits that completed in it
  irt_p50_ms ... p99    latency percentiles (nearest rank) of the committed transactions of the class that
                        *started* in it, as the summary's window does: a transaction held by a fault counts at its
                        issue, so a stall shows where it began, not only when it ends
  in_flight             transactions issued and not yet finished at its end (committed or given up); under an open
                        load from their arrival, so those waiting for a coordinator count (docs/workloads.md)
  given_up, retried     transactions given up (after the retry limit) that ended in it; failed attempts of those
                        that ended in it (a transaction abandoned at the drain, outcome unknown, is not given up)
  stalled               no commit in it while transactions were in flight
A percentile of a bucket without samples is empty (NaN in the CSV, a gap in a figure), never 0.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from testbed.analysis.results import nearest_rank, read_records
from testbed.core import files

SERIES_FILE = "timeseries.csv"
COLUMNS = ["t_s", "throughput_tps", "irt_p50_ms", "irt_p99_ms", "crt_p50_ms", "crt_p99_ms", "in_flight",
           "given_up", "retried", "stalled"]
TOLERANCE = 0.10       # recovered: throughput and IRT p99 back within 10 % of before the fault ...
RECOVERY_SPAN_S = 3.0  # ... over a window of this many seconds (pooled, so that one noisy second does not decide)
BACK_SPAN_S, BACK_STEP_S = 2.0, 0.25   # throughput back (tput_back_s): a 2 s window, searched in 0.25 s steps


def _pct(values, p):
    v = nearest_rank(values, p)
    return float("nan") if v is None else float(v)


def series(df: pd.DataFrame, duration_s: float, bucket_s: float = 1.0) -> pd.DataFrame:
    """The run's records (results.read_records) in buckets of bucket_s from 0 to duration_s."""
    if bucket_s <= 0 or duration_s <= 0:
        raise ValueError(f"bucket {bucket_s} s, duration {duration_s} s: both must be > 0")
    n = max(1, math.ceil(round(duration_s / bucket_s, 9)))
    b_us = bucket_s * 1e6
    start = df.start_us.to_numpy(dtype=float)
    end = start + df.latency_us.to_numpy(dtype=float)
    committed = (df.status == "committed").to_numpy()
    gave_up = (df.status == "given_up").to_numpy()   # not the abandoned: their outcome is unknown
    crt = (df["class"] == "CRT").to_numpy()
    attempts = df.attempts.to_numpy(dtype=float)
    lat_ms = df.latency_us.to_numpy(dtype=float) / 1000.0
    sb = np.floor(start / b_us).astype(int)
    eb = np.floor(end / b_us).astype(int)
    rows = []
    for i in range(n):
        t0, t1 = i * b_us, (i + 1) * b_us
        done = eb == i
        row = {"t_s": round(i * bucket_s, 6), "throughput_tps": float((done & committed).sum()) / bucket_s}
        for cls, mask in (("irt", ~crt), ("crt", crt)):
            lats = sorted(lat_ms[(sb == i) & committed & mask].tolist())
            row[f"{cls}_p50_ms"] = _pct(lats, 50)
            row[f"{cls}_p99_ms"] = _pct(lats, 99)
        row["in_flight"] = int(((start < t1) & (end >= t1)).sum())
        row["given_up"] = int((done & gave_up).sum())
        row["retried"] = int((attempts[done] - 1).clip(min=0).sum())
        row["stalled"] = bool(row["throughput_tps"] == 0 and ((start < t1) & (end >= t0)).any())
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def write_series(run_dir, duration_s: float, bucket_s: float = 1.0) -> pd.DataFrame:
    """series() of a run folder, written beside its summary as timeseries.csv."""
    ts = series(read_records(run_dir), duration_s, bucket_s)
    with files.replacing(Path(run_dir, SERIES_FILE)) as tmp:
        ts.to_csv(tmp, index=False, float_format="%.3f")
    return ts


def read_series(run_dir) -> pd.DataFrame | None:
    f = Path(run_dir, SERIES_FILE)
    if not f.is_file():
        return None
    ts = pd.read_csv(f)
    missing = set(COLUMNS) - set(ts.columns)
    if missing:
        raise ValueError(f"{f}: missing column(s) {', '.join(sorted(missing))}")
    return ts


def _stats(df: pd.DataFrame, w0_s: float, w1_s: float, done_in: bool = False) -> dict:
    """Throughput (completions) and IRT/CRT p99 (committed, started) in [w0, w1) seconds; done_in: of those that
    also completed in it (the baseline before a fault: what the fault did not touch)."""
    w0, w1 = w0_s * 1e6, w1_s * 1e6
    committed = df[df.status == "committed"]
    end = committed.start_us + committed.latency_us
    out = {"throughput_tps": float(((end >= w0) & (end < w1)).sum()) / max(w1_s - w0_s, 1e-9)}
    keep = (committed.start_us >= w0) & (committed.start_us < w1)
    if done_in:
        keep &= end < w1
    started = committed[keep]
    for cls in ("IRT", "CRT"):
        out[f"{cls.lower()}_p99_ms"] = _pct(sorted((started[started["class"] == cls].latency_us / 1000).tolist()), 99)
    return out


def fault_effect(df: pd.DataFrame, start_s: float, end_s: float, warmup_s: float, duration_s: float,
                 tolerance: float = TOLERANCE, span_s: float = RECOVERY_SPAN_S, step_s: float = 1.0) -> dict:
    """What the fault window [start_s, end_s) did: throughput and IRT/CRT p99 before it (from the warm-up's end; the
    transactions that also completed before it, so that those the fault held do not count as its baseline), during
    it, and after it; and recovery_s, the time from the heal (end_s) until a window of span_s whose
    throughput is at least (1 - tolerance) x before and whose IRT p99 is at most (1 + tolerance) x before first
    starts (searched in steps of step_s; None when no such window starts before the run's end: not recovered); and
    tput_back_s, the time from the heal until a window of BACK_SPAN_S whose throughput alone is at least
    (1 - tolerance) x before first starts (searched in BACK_STEP_S steps: what a restart's recovery is measured by,
    docs/experiments.md "Exp 6")."""
    if not warmup_s <= start_s <= end_s <= duration_s:
        raise ValueError(f"fault window [{start_s}, {end_s}) s is not inside the run's [{warmup_s}, {duration_s}] s")
    before = _stats(df, warmup_s, start_s, done_in=True) if start_s > warmup_s else {}
    out = {"window_s": [start_s, end_s], "before": before, "during": _stats(df, start_s, max(end_s, start_s + 1)),
           "after": _stats(df, end_s, duration_s) if end_s < duration_s else {}, "recovery_s": None,
           "tput_back_s": None}
    if not before or not before["throughput_tps"]:
        out["recovery_note"] = "no load before the fault to compare with"
        return out
    t = end_s
    while t + BACK_SPAN_S <= duration_s + 1e-9:
        if _stats(df, t, t + BACK_SPAN_S)["throughput_tps"] >= (1 - tolerance) * before["throughput_tps"]:
            out["tput_back_s"] = round(t - end_s, 3)
            break
        t += BACK_STEP_S
    t = end_s
    while t + span_s <= duration_s + 1e-9:
        s = _stats(df, t, t + span_s)
        irt_ok = math.isnan(before["irt_p99_ms"]) or (not math.isnan(s["irt_p99_ms"]) and
                                                      s["irt_p99_ms"] <= (1 + tolerance) * before["irt_p99_ms"])
        if s["throughput_tps"] >= (1 - tolerance) * before["throughput_tps"] and irt_ok:
            out["recovery_s"] = round(t - end_s, 3)
            break
        t += step_s
    return out
