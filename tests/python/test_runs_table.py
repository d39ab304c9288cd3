"""Results as data (testbed/analysis/runs_table.py) from fake run folders: every run folder of a results folder is a
row with its knobs as columns and NaN for numbers it does not have, the Parquet file and the CSV read back to the
same frame, one run's records load as one row per transaction, and a sweep writes the table at its end (a failure
to write it is one warning line, not a failed sweep)."""
import argparse
import json
import math

import pandas as pd
import pytest

from testbed.analysis import figures, results, rundirs, runs_table, validate
from testbed.core import lock
from testbed.sweeps import runner

from conftest import seal_run
from test_figures import make_run, manifest, rec
from test_validate import make_run as make_probe_run

KNOBS_A = {"mode": "dast", "name": "n_clients", "regions": 3, "shards": 2, "workload": "tpcc", "concurrency": 1,
           "duration": 10.0, "seed": 1, "rtt_ms": [[5.0, 100.0], [100.0, 5.0]], "faults": None,
           "protocol_options": {"defer_commutative": True}}
KNOBS_B = {**KNOBS_A, "mode": "janus", "concurrency": 4, "workload": "tpca", "zipf": 0.9, "protocol_options": {}}


def sweep_run(root, knobs, **kw):
    """test_figures.make_run with the config.json a sweep writes (its knobs), sealed again as a run ends."""
    d = make_run(root, system=knobs["mode"], **kw)
    rundirs.write_json(d / "config.json", {"experiment": kw.get("exp", "n_clients"), "knobs": knobs,
                                           "exp_config": {"seed": 1}, "quick": False})
    seal_run(d)
    return d


def test_an_ok_run_and_a_failed_run(tmp_path):
    ok = sweep_run(tmp_path, KNOBS_A, key="k1", x=2.0)
    sweep_run(tmp_path, KNOBS_B, key="k2", x=8.0, start="2024-01-01T00:00:05", status="failed",
              error="server died mid-run: s0.0.1 exited with code 6\n...")
    sweep_run(tmp_path, KNOBS_B, key="k3", x=4.0, start="2024-01-01T00:00:09", status="interrupted",
              error="interrupted by SIGINT")
    df = runs_table.runs(tmp_path)
    assert list(df.run_dir) == [f"n_clients/{d}" for d in df.run_id] and len(df) == 3   # oldest first
    good, bad, cut = (df.iloc[i] for i in range(3))
    summary = json.loads((ok / "summary.json").read_text())
    assert (good.status, good.verdict, good.system, good.x, good.point_key, good.backend, good.shaping) == (
        "ok", "CONSISTENT", "dast", 2.0, "k1", "local", "app")
    assert math.isnan(good.reason)
    for c, cls in runs_table.CLASSES.items():
        for s in ("throughput_tps", "p50_ms", "p90_ms", "p99_ms", "committed"):
            assert good[f"{c}_{s}"] == summary["classes"][cls][s]
    assert good.irt_p50_ms == 10.0 and good.crt_p99_ms == 200.0    # records(): IRTs of 10 ms, CRTs of 200 ms
    assert (bad.status, bad.reason) == ("failed", "server died mid-run: s0.0.1 exited with code 6")
    assert (cut.status, cut.reason) == ("interrupted", "interrupted by SIGINT")
    numbers = [f"{c}_{s}" for c in runs_table.CLASSES for s in runs_table.STATS]
    for row in (bad, cut):   # nothing measured: NaN, never 0
        assert all(math.isnan(row[n]) for n in numbers) and math.isnan(row.verdict)
    # a damaged ok run is failed with the reason rundirs gives, and has no numbers either
    (ok / "summary.json").write_text((ok / "summary.json").read_text()[:40])
    again = runs_table.runs(tmp_path).iloc[0]
    assert again.status == "failed" and again.reason.startswith("invalid run folder: summary.json: not valid JSON")
    assert math.isnan(again.all_throughput_tps)


def test_knobs_that_differ_across_runs_become_columns(tmp_path):
    sweep_run(tmp_path, KNOBS_A, key="k1")
    sweep_run(tmp_path, KNOBS_B, key="k2", start="2024-01-01T00:00:05")
    df = runs_table.runs(tmp_path)
    assert list(df["knobs.mode"]) == ["dast", "janus"] and list(df["knobs.concurrency"]) == [1, 4]
    assert list(df["knobs.workload"]) == ["tpcc", "tpca"]
    assert math.isnan(df["knobs.zipf"][0]) and df["knobs.zipf"][1] == 0.9           # only the TPC-A run has it
    d = df["knobs.protocol_options.defer_commutative"]
    assert d[0] == 1.0 and math.isnan(d[1])                                          # a flag one run lacks
    assert json.loads(df["knobs.rtt_ms"][0]) == KNOBS_A["rtt_ms"]                   # a list: its JSON text
    assert df["knobs.faults"].isna().all() and df["knobs.regions"].dtype == "int64"
    knob_cols = [c for c in df.columns if c.startswith("knobs.")]
    assert knob_cols == sorted(knob_cols) and list(df.columns[:len(runs_table.COLUMNS)]) == runs_table.COLUMNS


def test_parquet_and_csv_round_trip_to_the_same_frame(tmp_path):
    sweep_run(tmp_path, KNOBS_A, key="k1")
    sweep_run(tmp_path, KNOBS_B, key="k2", start="2024-01-01T00:00:05", series="2 client proc/shard")
    sweep_run(tmp_path, KNOBS_B, key="k3", start="2024-01-01T00:00:07", status="failed", error="boom")
    make_probe_run(tmp_path / "local", run_id="20261121-231501-cd34")    # a single run (not a sweep's)
    make_probe_run(tmp_path / "selftest", probe=True)                   # an RTT self-test: left out
    parquet, csv = runs_table.write(tmp_path)
    assert (parquet, csv) == (tmp_path / "runs.parquet", tmp_path / "runs.csv")
    frame = runs_table.runs(tmp_path)
    from_parquet, from_csv = pd.read_parquet(parquet), pd.read_csv(csv)
    pd.testing.assert_frame_equal(from_parquet, frame)
    pd.testing.assert_frame_equal(from_csv, frame)
    assert len(frame) == 4 and "selftest" not in set(frame.name)
    single = frame[frame.name == "local/n_clients"].iloc[0]   # its checker finds a violation in the fake dumps
    assert (single.status, single.reason) == ("failed", f"inconsistent: {single.verdict}")
    assert single.verdict.startswith("INCONSISTENT") and math.isnan(single.x) and single["knobs.regions"] == 2
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    # the table's files are no run folder: the sweeps and the figures read the results folder as before
    assert runs_table.runs(tmp_path).equals(frame)
    assert len(figures.load_runs(tmp_path / "n_clients", 99)) == 3 and runs_table.write(tmp_path / "none") is None


def test_current_marks_the_runs_the_figure_draws(tmp_path):
    manifest(tmp_path, "n_clients", [("k1", "dast", 2), ("k2", "dast", 4)])
    sweep_run(tmp_path, KNOBS_A, key="k1", start="2024-01-01T00:00:01")
    sweep_run(tmp_path, KNOBS_A, key="k1", start="2024-01-01T00:00:02")    # a re-run supersedes the first
    sweep_run(tmp_path, KNOBS_A, key="k2", x=4.0, start="2024-01-01T00:00:03")
    sweep_run(tmp_path, KNOBS_A, key="old", x=8.0, start="2024-01-01T00:00:04")   # not a point of the sweep
    df = runs_table.runs(tmp_path)
    assert list(df.current) == [False, True, True, False] and df.current.dtype == bool


def test_the_records_of_a_run_one_row_per_transaction(tmp_path):
    a = [rec(i, "IRT", 1 + i * 0.1, 10 + i % 7) for i in range(90)]        # start 1..9.9 s: window [2, 9)
    b = [rec(100 + i, "CRT", 3 + i * 0.1, 200, status="given_up" if i == 3 else "committed", attempts=1 + (i == 3))
         for i in range(40)]
    d = sweep_run(tmp_path, KNOBS_A, clients={"c0.0.0": a, "c1.0.0": b})
    tx = runs_table.records(d)
    assert len(tx) == len(a) + len(b)
    assert list(tx.columns[:len(results.COLUMNS)]) == results.COLUMNS
    assert {"client", "run_id", "system", "latency_ms", "in_window"} <= set(tx.columns)
    assert set(tx.client) == {"c0.0.0", "c1.0.0"} and set(tx.run_id) == {d.name} and set(tx.system) == {"dast"}
    assert (tx.latency_ms == tx.latency_us / 1000).all()
    assert tx.in_window.sum() == sum(2 <= r[4] / 1e6 < 9 for r in a + b)
    # the committed ones started in the window are the population of summary.json's percentiles
    summary = json.loads((d / "summary.json").read_text())
    irt = tx[tx.in_window & (tx.status == "committed") & (tx["class"] == "IRT")].latency_ms
    assert results.nearest_rank(irt.tolist(), 99) == summary["classes"]["IRT"]["p99_ms"]
    parquet, csv = runs_table.write_records(d)
    assert (parquet.parent, csv.parent) == (d, d)
    pd.testing.assert_frame_equal(pd.read_parquet(parquet), tx)
    pd.testing.assert_frame_equal(pd.read_csv(csv), tx)
    assert validate.validate_run(d) == []               # derived files of the run: its folder still validates
    assert {runs_table.RECORDS_PARQUET, runs_table.RECORDS_CSV} <= set(validate.DERIVED)
    (d / "deploy.yml").unlink()
    with pytest.raises(ValueError, match="deploy.yml"):
        runs_table.records(d)


def test_the_command_line(tmp_path, capsys):
    d = sweep_run(tmp_path, KNOBS_A, key="k1")
    assert runs_table.main([str(tmp_path)]) == 0
    assert (tmp_path / "runs.parquet").is_file() and (tmp_path / "runs.csv").is_file()
    assert "runs.parquet" in capsys.readouterr().out
    rel = pd.read_parquet(tmp_path / "runs.parquet").run_dir[0]      # the table names the run to load
    for what in (rel, d.name, str(d)):
        (d / "records.parquet").unlink(missing_ok=True)
        assert runs_table.main([str(tmp_path), "--records", what]) == 0
        assert (d / "records.parquet").is_file() and (d / "records.csv").is_file()
    capsys.readouterr()
    assert runs_table.main([str(tmp_path), "--records", "nope"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"runs_table: error: --records nope: no run folder (a folder with a meta.json) there or below {tmp_path}"]
    assert runs_table.main([str(tmp_path / "missing")]) == 2
    assert runs_table.main([str(tmp_path / "n_clients" / d.name / "clients")]) == 0   # no run below: nothing
    assert "nothing written" in capsys.readouterr().out


def job_args(tmp_path, cfgfile):
    return argparse.Namespace(backend="local", out=str(tmp_path / "res"), wait=False, config=str(cfgfile), quick=False,
                              fresh=False, seed=None, repeats=None)


@pytest.fixture
def fake_sweep(tmp_path, monkeypatch):
    from test_runner import FakeBackend
    b = FakeBackend(lambda k: "error" if k["concurrency"] == 2 else "ok")
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    monkeypatch.setenv(lock.ENV_DIR, str(tmp_path / "locks"))
    monkeypatch.chdir(tmp_path)
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast']\nN_REPEAT = 1\nDURATION_S = 3\nWARMUP_S = 1\nCOOLDOWN_S = 0.5\n"
                       "CONCURRENCY_LEVELS = [1, 2]\n")
    return job_args(tmp_path, cfgfile)


def test_a_sweep_writes_the_table_at_its_end(tmp_path, fake_sweep, capsys):
    assert runner.run_experiments(["n_clients"], fake_sweep, [], "run_experiments.py") == 1   # one run failed
    res = tmp_path / "res"
    out = capsys.readouterr().out
    assert f"every run as one table (pandas.read_parquet): {res / 'runs.parquet'} (also runs.csv)" in out
    df = pd.read_parquet(res / "runs.parquet")
    assert sorted(zip(df["knobs.concurrency"], df.status)) == [(1, "ok"), (2, "failed")]
    assert df.current.all() and (df.experiment == "n_clients").all()


def test_a_table_that_cannot_be_written_is_one_warning_line(tmp_path, fake_sweep, monkeypatch, capsys):
    def fail(root):
        raise ImportError("Unable to find a usable engine; tried using: 'pyarrow'.\nA suitable version ...")
    monkeypatch.setattr(runs_table, "write", fail)
    assert runner.run_experiments(["n_clients"], fake_sweep, [], "run_experiments.py") == 1   # as without it
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "runs.parquet" in line] == [
        "warning: runs.parquet not written: ImportError: Unable to find a usable engine; tried using: 'pyarrow'."]
    assert (tmp_path / "res" / "claims.md").is_file() and (tmp_path / "res" / "data-n_clients.pdf").is_file()


def test_the_table_follows_the_folders_after_every_drawing_and_when_they_are_gone(tmp_path, capsys):
    """A doctored folder is failed in the table as soon as a figure is drawn (genFigure.py, whatever it drew), and a
    results folder left without runs keeps no table listing them."""
    from testbed.cli import figures as figures_cli
    from test_figures import manifest
    manifest(tmp_path, "n_clients", [("k1", "dast", 2)])
    d = sweep_run(tmp_path, KNOBS_A, key="k1", x=2.0)
    assert runs_table.write(tmp_path) is not None
    assert pd.read_parquet(tmp_path / "runs.parquet").status.tolist() == ["ok"]
    (d / "summary.json").write_text("{")
    assert figures_cli.main(["n_clients", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"every run as one table (pandas.read_parquet): {tmp_path / 'runs.parquet'}" in out
    for table in (pd.read_parquet(tmp_path / "runs.parquet"), pd.read_csv(tmp_path / "runs.csv")):
        assert table.status.tolist() == ["failed"] and table.reason[0].startswith("invalid run folder: summary.json")
    import shutil
    shutil.rmtree(tmp_path / "n_clients")
    assert runs_table.main([str(tmp_path)]) == 0
    assert "nothing written (an older table there removed)" in capsys.readouterr().out
    assert not (tmp_path / "runs.parquet").exists() and not (tmp_path / "runs.csv").exists()
