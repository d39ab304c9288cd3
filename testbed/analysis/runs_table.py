"""Results as data: every run of a results folder as one tidy table, and one run's transactions, for pandas.

    python -m testbed.analysis.runs_table results                     # results/runs.parquet and results/runs.csv
    python -m testbed.analysis.runs_table results --records n_clients/<run-id>   # <run>/records.parquet, .csv

    df = pd.read_parquet("results/runs.parquet")       # or pd.read_csv("results/runs.csv"): the same frame
    tx = pd.read_parquet("results/n_clients/<run-id>/records.parquet")

runs(root): one row per run folder below root (every folder holding a meta.json, at any depth; RTT self-tests
left out), oldest first, in these columns:
  - where it is: name (its folder under root, e.g. n_clients), run_id, run_dir (relative to root);
  - the sweep point: experiment, system, series, x_name, x, x_unit, point_label, point_key, repeat, n_repeat, and
    current (True when the run is one the experiment's figure draws: its sweep.json's points, the newest run of
    each repeat; testbed/analysis/figures.py select);
  - where and how it ran: backend, shaping (the delay mechanism), git_sha, engine (meta.json's SHA-256 of the
    txn-server that ran), kernel, hostname, start_time, end_time, quick, faults;
  - its outcome: status (ok | failed | interrupted) and reason as testbed/analysis/rundirs.py run_outcome says
    (a damaged or doctored folder is failed, whatever its meta.json says), verdict (check.json's, when there is
    one), no_majority_s (check.json's: the seconds some shard had no majority of its replicas live and running, a
    crash beside a pause, say) and check_notes (check.json's notes, one a line);
  - per class c of irt, crt, all (summary.json: the measurement window): c_committed, c_throughput_tps, c_p50_ms,
    c_p90_ms, c_p99_ms, c_abort_rate, c_given_up, c_abandoned; the host: busy_pct, steal_pct, cpu_seconds;
  - every knob of the run (config.json's "knobs", flattened: knobs.concurrency, knobs.protocol_options.
    defer_commutative, ...; a list such as knobs.rtt_ms as JSON text), an open-loop run's offered load (load.*:
    summary.json's "load") and the protocol's counters (counters.*).
Numbers a run does not have are NaN, never 0: a run that is not ok has no numbers at all (as in the figures), a
knob or counter another protocol or experiment has and this one not is NaN. So that the Parquet file and the CSV
read back to the same frame, the table is written with plain types: a missing text is NaN (an empty one too, e.g.
the series of a sweep with a single line), a column with nothing in it is NaN floats, and a flag that some runs
lack (a protocol's option) is 1.0 / 0.0 / NaN.

records(run_dir): one row per transaction of one run (testbed/analysis/results.py read_records: txn_id, type,
type_name, class, start_us, latency_us, attempts, status, client, ...), plus run_id, system, latency_ms and
in_window (started in the measurement window [warmup, duration - cooldown): with status committed, the
population of summary.json's percentiles).

refresh(root) writes it at the end of every run_experiments.py job (beside results/claims.md) and after every
genFigure.py drawing, and removes it when no run folder is left; a run folder's
records files are derived files (testbed/analysis/validate.py DERIVED), never read back in place of the raw ones.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import pandas as pd

from testbed.analysis import figures, results
from testbed.analysis.rundirs import read_json, run_outcome, run_start
from testbed.core import deploy as deploylib, files

PARQUET, CSV = "runs.parquet", "runs.csv"
RECORDS_PARQUET, RECORDS_CSV = "records.parquet", "records.csv"
CLASSES = {"irt": "IRT", "crt": "CRT", "all": "all"}
STATS = ("committed", "throughput_tps", "p50_ms", "p90_ms", "p99_ms", "abort_rate", "given_up", "abandoned")
COLUMNS = (["name", "run_id", "run_dir", "experiment", "system", "series", "x_name", "x", "x_unit", "point_label",
            "point_key", "repeat", "n_repeat", "current", "backend", "shaping", "git_sha", "engine", "kernel",
            "hostname", "start_time", "end_time", "quick", "faults", "status", "reason", "verdict", "no_majority_s",
            "check_notes"]
           + [f"{c}_{s}" for c in CLASSES for s in STATS] + ["busy_pct", "steal_pct", "cpu_seconds"])


def run_dirs(root) -> list[Path]:
    """Every folder below root that holds a meta.json (a run folder; its own subfolders are not searched), sorted."""
    out = []
    for here, dirs, names in os.walk(root):
        if "meta.json" in names:
            out.append(Path(here))
            dirs[:] = []
        else:
            dirs.sort()
    return sorted(out)


def _flat(prefix: str, value, out: dict) -> dict:
    """{prefix.key.subkey: value} of a nested dict; a list becomes its JSON text."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = json.dumps(value) if isinstance(value, (list, tuple)) else value
    return out


def _nan(v):
    return math.nan if v is None else v


def run_row(root: Path, run_dir: Path, meta: dict) -> dict:
    """The table's row of one run folder (see the module doc)."""
    status, reason = run_outcome(run_dir, meta)
    x = meta.get("x") if isinstance(meta.get("x"), dict) else {}
    config = read_json(run_dir / "config.json") or {}
    check = read_json(run_dir / "check.json") or {}
    cpu = meta.get("machine_cpu") if isinstance(meta.get("machine_cpu"), dict) else {}
    row = dict(name=run_dir.parent.relative_to(root).as_posix(), run_id=run_dir.name,
               run_dir=run_dir.relative_to(root).as_posix(), experiment=meta.get("experiment"),
               system=meta.get("system") or (config.get("deploy") or config).get("mode"), series=meta.get("series"),
               x_name=x.get("name"), x=x.get("value"), x_unit=x.get("unit"), point_label=meta.get("point_label"),
               point_key=meta.get("point_key"), repeat=meta.get("repeat"), n_repeat=meta.get("n_repeat"),
               current=False, backend=meta.get("backend"), shaping=meta.get("shaping"), git_sha=meta.get("git_sha"),
               engine=(meta.get("engine") or {}).get("txn-server"), kernel=meta.get("kernel"),
               hostname=meta.get("hostname"), start_time=meta.get("start_time"),
               end_time=meta.get("end_time"), quick=bool(config.get("quick", False)), faults=meta.get("faults"),
               status=status, reason=reason, verdict=check.get("verdict"),
               no_majority_s=(check.get("stats") or {}).get("no_majority_s"),
               check_notes="\n".join(check.get("notes") or []) or None,
               busy_pct=cpu.get("busy_pct"), steal_pct=cpu.get("steal_pct"), cpu_seconds=meta.get("cpu_seconds"))
    summary = (read_json(run_dir / "summary.json") or {}) if status == "ok" else {}
    for c, cls in CLASSES.items():
        stats = (summary.get("classes") or {}).get(cls) or {}
        row.update({f"{c}_{s}": stats.get(s) for s in STATS})
    knobs = config.get("knobs")
    if isinstance(knobs, dict):
        _flat("knobs", knobs, row)
    for part in ("load", "counters"):   # an open-loop run's offered load and what became of it; the protocol's
        if isinstance(summary.get(part), dict):
            _flat(part, summary[part], row)
    row["_start"] = run_start(meta, run_dir)[0]
    return {k: _nan(v) for k, v in row.items()}


def _mark_current(df: pd.DataFrame, root: Path) -> None:
    """current = the runs each experiment's figure draws (figures.select with its sweep.json)."""
    sweep_runs = df[df.point_key.notna()]
    for name, g in sweep_runs.groupby("name"):
        manifest = read_json(root / name / figures.MANIFEST)
        sel = figures.select(g.assign(start=g._start, series=g.series.fillna(""),
                                      repeat=g.repeat.fillna(0).astype(int)), manifest)
        df.loc[sel.index, "current"] = True


def _missing(v) -> bool:
    return v is None or (isinstance(v, str) and v == "") or (isinstance(v, float) and math.isnan(v))


def _plain_column(s: pd.Series) -> pd.Series:
    """One column in a type that a Parquet file and a CSV both give back as it is (see the module doc)."""
    if not (s.dtype == object or pd.api.types.is_string_dtype(s)):
        return s if s.notna().any() else s.astype(float)
    values = [None if _missing(v) else v for v in s]
    present = [v for v in values if v is not None]
    whole = len(present) == len(values)
    if not present:
        return pd.Series(math.nan, index=s.index, dtype=float)
    if all(isinstance(v, bool) for v in present):
        return pd.Series(values, index=s.index, dtype=bool) if whole else pd.Series(
            [math.nan if v is None else float(v) for v in values], index=s.index, dtype=float)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        if whole and all(isinstance(v, int) for v in present):
            return pd.Series(values, index=s.index, dtype="int64")
        return pd.Series([math.nan if v is None else float(v) for v in values], index=s.index, dtype=float)
    return pd.Series([math.nan if v is None else str(v) for v in values], index=s.index, dtype="str")


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({c: _plain_column(df[c]) for c in df.columns}, index=df.index)


def runs(root="results") -> pd.DataFrame:
    """Every run folder below root as one row (see the module doc), oldest first; an empty frame with COLUMNS when
    there is none."""
    root = Path(root)
    rows = []
    for run_dir in run_dirs(root):
        meta = read_json(run_dir / "meta.json")
        if meta is None or meta.get("probe"):   # an RTT self-test measures the network, not transactions
            continue
        rows.append(run_row(root, run_dir, meta))
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.DataFrame(rows)
    df = df.sort_values(["_start", "run_dir"], kind="stable").reset_index(drop=True)
    _mark_current(df, root)
    extra = [c for part in ("knobs.", "load.", "counters.") for c in sorted(df.columns) if c.startswith(part)]
    return _plain(df[COLUMNS + extra])


def write(root="results") -> tuple[Path, Path] | None:
    """root/runs.parquet and root/runs.csv (runs(root)); None when root has no run, and then a table left from
    earlier runs is removed (it would list runs whose folders are gone)."""
    root = Path(root)
    df = runs(root)
    if df.empty:
        for f in (root / PARQUET, root / CSV):
            f.unlink(missing_ok=True)
        return None
    return _write(df, root / PARQUET, root / CSV)


def refresh(root="results") -> str:
    """The one place the table follows the folders (a sweep's end, every genFigure.py drawing): write() it, and say
    so in one line; a table that cannot be written is one warning line, never a failed sweep or drawing."""
    try:
        written = write(root)
    except Exception as e:  # noqa: BLE001 - the figures stand without it (e.g. no pyarrow in an older venv)
        return f"warning: {PARQUET} not written: {type(e).__name__}: {e}".splitlines()[0]
    if written is None:
        return f"no run folder below {root}: no {PARQUET}"
    return f"every run as one table (pandas.read_parquet): {written[0]} (also {written[1].name})"


def _write(df: pd.DataFrame, parquet: Path, csv: Path) -> tuple[Path, Path]:
    """Both files, each written whole or not at all (a reader never sees half of one)."""
    for path, save in ((csv, lambda p: df.to_csv(p, index=False)), (parquet, lambda p: df.to_parquet(p, index=False))):
        with files.replacing(path) as tmp:
            save(tmp)
    return parquet, csv


def records(run_dir) -> pd.DataFrame:
    """One row per transaction of a run (see the module doc). ValueError when its records or deploy.yml cannot be
    read."""
    run_dir = Path(run_dir)
    try:
        df = results.read_records(run_dir)
        w0, w1 = results.window_of_run(run_dir)
    except (OSError, KeyError, TypeError) as e:
        raise ValueError(f"{run_dir}: {type(e).__name__}: {e}".splitlines()[0]) from None
    meta = read_json(run_dir / "meta.json") or {}
    system = meta.get("system") or deploylib.load_yaml(run_dir / "deploy.yml").get("mode")
    df = df.infer_objects()   # a client without records reads as columns of no type, which concat() keeps
    df = df.assign(run_id=run_dir.name, system=system, latency_ms=df.latency_us / 1000.0,
                   in_window=(df.start_us >= w0 * 1e6) & (df.start_us < w1 * 1e6))
    return df.reset_index(drop=True)


def write_records(run_dir) -> tuple[Path, Path]:
    """run_dir/records.parquet and run_dir/records.csv (records(run_dir))."""
    run_dir = Path(run_dir)
    return _write(records(run_dir), run_dir / RECORDS_PARQUET, run_dir / RECORDS_CSV)


def find_run(root, what: str) -> Path:
    """A run folder named as a path, as a path below root (a runs table's run_dir), or by its run id alone (unique
    below root); ValueError otherwise."""
    for p in (Path(what), Path(root) / what):
        if (p / "meta.json").is_file():
            return p
    hits = [d for d in run_dirs(root) if d.name == what]
    if len(hits) == 1:
        return hits[0]
    raise ValueError(f"--records {what}: " + (f"{len(hits)} runs have that id below {root} (give its run_dir)" if hits
                                              else f"no run folder (a folder with a meta.json) there or below {root}"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.analysis.runs_table",
                                 description="Write RESULTS_DIR/runs.parquet and runs.csv: every run of a results "
                                             "folder as one row (pandas.read_parquet / read_csv).")
    ap.add_argument("results", nargs="?", default="results", metavar="RESULTS_DIR",
                    help="the results folder (default results)")
    ap.add_argument("--records", default=None, metavar="RUN_DIR",
                    help="instead: write one run's transactions to RUN_DIR/records.parquet and records.csv (RUN_DIR: "
                         "a path, a path below RESULTS_DIR as the table's run_dir column gives it, or a run id)")
    a = ap.parse_args(argv)
    prog = "runs_table"
    if not Path(a.results).is_dir():
        print(f"{prog}: error: {a.results}: not a folder", file=sys.stderr)
        return 2
    try:
        if a.records is not None:
            parquet, csv = write_records(find_run(a.results, a.records))
        else:
            written = write(a.results)
            if written is None:
                print(f"{prog}: no run folder below {a.results}: nothing written (an older table there removed)")
                return 0
            parquet, csv = written
    except (ValueError, OSError, ImportError) as e:
        print(f"{prog}: error: {e}".splitlines()[0], file=sys.stderr)
        return 2
    print(f"{parquet}  (also {csv.name}; pandas.read_parquet({str(parquet)!r}))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
