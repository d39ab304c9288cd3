"""Aggregation and plotting (testbed/analysis/figures.py, genFigure.py) on synthetic run folders."""
import json
import math

import pandas as pd
import pytest

from testbed.core import deploy
from testbed.analysis import figures, results, rundirs

from conftest import seal_run

HEADER = "txn_id,type,type_name,class,start_us,latency_us,attempts,status\n"
WINDOW = dict(duration=10, warmup=2, cooldown=1)    # window [2 s, 9 s)


def rec(i, cls, start_s, lat_ms, status="committed", attempts=1):
    return (i, 0, "NewOrder" if cls == "IRT" else "Payment", cls, int(start_s * 1e6), int(lat_ms * 1000),
            attempts, status)


def records(tput, committed=True, given_up=0):
    """Records whose throughput in WINDOW's 7 s window is tput: IRTs of 10 ms and every sixth a CRT of 200 ms, all
    started and committed in the window (or all given up: committed False), and given_up CRTs given up in it."""
    n = round(tput * 7)
    rows = [rec(i, "CRT" if i % 6 == 5 else "IRT", 3 + i * 5 / n, 200 if i % 6 == 5 else 10,
                status="committed" if committed else "given_up") for i in range(n)]
    return rows + [rec(n + i, "CRT", 4.0, 500, status="given_up", attempts=20) for i in range(given_up)]


def make_run(root, exp="n_clients", system="dast", x=2.0, key="k1", repeat=0, start="2024-01-01T00:00:00",
             status="ok", error=None, check_code=0, clients=None, tput=100.0, committed=None, series="",
             regions=3, jitter=0.0, run_id=None, busy=None, given_up=0, meta_extra=None, client_summary=None,
             deploy_extra=None):
    """A run folder as the runner leaves it, its summary.json derived from its records; clients: {name: [record
    tuples]}, default: records() of tput (committed=0: none committed); client_summary: each client's
    summary.json (an open load's `open_loop`, ...)."""
    run_id = run_id or f"{start.replace(':', '').replace('-', '')}-{system}-{key}-{repeat}"
    d = root / exp / run_id
    (d / "clients").mkdir(parents=True)
    dep = deploy.build_deployment(mode=system.partition("+")[0], regions=regions, shards=2, jitter=jitter, **WINDOW,
                                  **(deploy_extra or {}))   # a variant's ('tapir+backoff') runs its protocol
    deploy.write_yaml(dep, d / "deploy.yml")
    clients = clients if clients is not None else {"c0.0.0": records(tput, committed != 0, given_up)}
    for name, rows in clients.items():
        (d / "clients" / f"{name}.records.csv").write_text(HEADER + "".join(",".join(map(str, r)) + "\n" for r in rows))
        if client_summary is not None:
            (d / "clients" / f"{name}.summary.json").write_text(json.dumps(client_summary))
    meta = {"run_id": run_id, "name": exp, "backend": "local", "shaping": "app", "start_time": start,
            "status": status, "experiment": exp, "system": system,
            "x": {"name": "clients_per_region", "value": x, "unit": "clients"}, "series": series,
            "repeat": repeat, "point_key": key}
    if error:
        meta["error"] = error
    if busy is not None:
        meta["machine_cpu"] = {"busy_pct": busy, "steal_pct": 0.1}
    meta.update(meta_extra or {})
    (d / "meta.json").write_text(json.dumps(meta))
    if status == "ok":
        results.summarize_run(d)
        (d / "check.json").write_text(json.dumps({"exit_code": check_code, "verdict": "CONSISTENT" if check_code == 0
                                                  else "INCONSISTENT (2 violations)"}))
    seal_run(d)
    return d


def manifest(root, exp, points, systems=None, n_repeat=1, tail=99):
    m = {"experiment": exp, "title": "Exp 1: test", "x": {"name": "clients_per_region", "label": "clients per region",
                                                           "unit": "clients"},
         "systems": systems or {"dast": "run"}, "n_repeat": n_repeat, "tail_percentile": tail,
         "points": [dict(key=k, system=s, x=x, series="") for k, s, x in points]}
    (root / exp).mkdir(parents=True, exist_ok=True)
    (root / exp / figures.MANIFEST).write_text(json.dumps(m))
    return m


def test_median_and_spread_over_repeats(tmp_path):
    for r, tput in enumerate([100.0, 300.0, 200.0, 250.0, 50.0]):
        make_run(tmp_path, repeat=r, tput=tput, start=f"2024-01-01T00:00:0{r}")
    agg = figures.aggregate(figures.load_runs(tmp_path / "n_clients", 99))
    row = agg.iloc[0]
    assert len(agg) == 1 and row.repeats_ok == 5 and row.status == "ok"
    assert (row.throughput_tps_median, row.throughput_tps_min, row.throughput_tps_max) == (200.0, 50.0, 300.0)
    assert row.irt_p50_ms_median == 10.0 and row.crt_tail_ms_median == 200.0


@pytest.mark.parametrize("tail,want", [(99, 1097.0), (95, 1089.0), (50, 100.0)])
def test_tail_is_nearest_rank_over_pooled_raw_records(tmp_path, tail, want):
    # two clients: 1..100 ms and 1000..1099 ms; pooled nearest-rank p99 over 200 values = rank 198 = 1097 ms
    # (averaging per-client p99s would give (99 + 1098) / 2 = 598.5)
    a = [rec(i, "IRT", 3 + i * 0.01, 1 + i) for i in range(100)]
    b = [rec(200 + i, "IRT", 3 + i * 0.01, 1000 + i) for i in range(100)]
    noise = [rec(900, "IRT", 1.0, 99999),                  # started in the warm-up: out
             rec(901, "IRT", 9.5, 99999),                  # started in the cool-down: out
             rec(902, "IRT", 4.0, 99999, status="given_up", attempts=20)]  # not committed: out
    make_run(tmp_path, clients={"c0.0.0": a + noise, "c1.0.0": b})
    runs = figures.load_runs(tmp_path / "n_clients", tail)
    assert runs.irt_tail_ms.iloc[0] == want
    assert runs.irt_p50_ms.iloc[0] == 100.0           # rank 100 of 200
    assert math.isnan(runs.crt_p50_ms.iloc[0])        # no CRT sample: a gap, not a zero


def test_class_percentiles_agree_with_summary(tmp_path):
    rows = [rec(i, "IRT" if i % 3 else "CRT", 2 + i * 0.02, (i * 37) % 211 + 1) for i in range(300)]
    d = make_run(tmp_path, clients={"c0.0.0": rows})
    s = results.summarize_run(d, write=False)
    pct = results.class_percentiles(d, (50, 90, 99))
    for cls in ("IRT", "CRT", "all"):
        assert pct[cls][50] == s["classes"][cls]["p50_ms"]
        assert pct[cls][99] == s["classes"][cls]["p99_ms"]


def test_failed_point_is_a_failure_not_a_zero(tmp_path):
    manifest(tmp_path, "n_clients", [("k1", "dast", 2), ("k2", "dast", 4), ("k3", "dast", 8)])
    make_run(tmp_path, x=2, key="k1")
    make_run(tmp_path, x=4, key="k2", status="failed", error="server died mid-run: s0.0.1 exited with code 6\n...")
    make_run(tmp_path, x=8, key="k3", check_code=1)                    # checker says INCONSISTENT
    agg = figures.aggregate(figures.load_runs(tmp_path / "n_clients", 99),
                            json.loads((tmp_path / "n_clients" / figures.MANIFEST).read_text()))
    by_x = agg.set_index("x")
    assert list(by_x.status) == ["ok", "failed", "failed"]
    assert by_x.loc[4.0, "reasons"] == "server died mid-run: s0.0.1 exited with code 6"
    assert by_x.loc[8.0, "reasons"].startswith("inconsistent")
    assert math.isnan(by_x.loc[4.0, "throughput_tps_median"]) and math.isnan(by_x.loc[8.0, "irt_p50_ms_median"])

    fig = figures.draw("n_clients", root=tmp_path)
    csv = pd.read_csv(fig.csv)
    failed = csv[csv.status == "failed"]
    assert len(failed) == 2 * 5 and failed["median"].isna().all()          # no zeros in the data either
    # and in the figure: the line has NaN at the failed x, and an 'x' marker sits on the axis
    f = figures.build_figure(fig.table, figures.select(figures.load_runs(tmp_path / "n_clients", 99), None),
                             title="t", x_label="x", systems=["dast"], no_data_reason={}, tail=99, caption_text="")
    ax = f.axes[0]
    data = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-" and ln.get_marker() == "s"]
    assert len(data) == 1
    ys = dict(zip(data[0].get_xdata(), data[0].get_ydata()))
    assert ys[2.0] == 100.0 and math.isnan(ys[4.0]) and math.isnan(ys[8.0])
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert len(crosses) == 1 and sorted(crosses[0].get_xdata()) == [4.0, 8.0]


def test_partial_point_uses_ok_repeats(tmp_path):
    make_run(tmp_path, repeat=0, tput=100.0)
    make_run(tmp_path, repeat=1, status="failed", error="clients still running after 70s")
    make_run(tmp_path, repeat=2, tput=300.0)
    row = figures.aggregate(figures.load_runs(tmp_path / "n_clients", 99)).iloc[0]
    assert row.status == "partial" and (row.repeats_ok, row.repeats_failed) == (2, 1)
    assert row.throughput_tps_median == 200.0


def test_missing_point_and_protocol_without_data(tmp_path):
    manifest(tmp_path, "n_clients", [("k1", "dast", 2), ("k2", "dast", 4), ("k3", "dast", 8)],
             systems={"dast": "run", "janus": "not built", "tapir": "not built"})
    make_run(tmp_path, x=2, key="k1")
    make_run(tmp_path, x=4, key="k2")
    fig = figures.draw("n_clients", root=tmp_path)
    assert fig.pdf.name == "data-n_clients.pdf" and fig.pdf.stat().st_size > 1000
    assert fig.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = pd.read_csv(fig.csv)
    assert len(csv) == 3 * 5                                           # 3 points x 5 metrics
    assert set(csv.metric) == {"throughput_tps", "irt_p50_ms", "irt_p99_ms", "crt_p50_ms", "crt_p99_ms"}
    assert set(csv[csv.x == 8].status) == {"not run"} and csv[csv.x == 8]["median"].isna().all()
    assert csv[(csv.x == 2) & (csv.metric == "crt_p99_ms")]["median"].iloc[0] == 200.0
    f = figures.build_figure(fig.table, pd.DataFrame(), title="t", x_label="x",
                             systems=["dast", "janus", "tapir"],
                             no_data_reason={"janus": "not built", "tapir": "not built"}, tail=99, caption_text="")
    legend = [t.get_text() for ax in f.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert legend == ["DAST", "Janus (no data: not built)", "Tapir (no data: not built)"]


def test_latest_run_of_a_repeat_wins_and_other_configs_are_ignored(tmp_path):
    manifest(tmp_path, "n_clients", [("k1", "dast", 2)])
    make_run(tmp_path, key="k1", status="failed", error="boom", start="2024-01-01T00:00:00")
    make_run(tmp_path, key="k1", tput=111.0, start="2024-01-01T00:01:00")          # the re-run
    make_run(tmp_path, key="k1", repeat=3, tput=999.0, start="2024-01-01T00:02:00")  # beyond N_REPEAT=1
    make_run(tmp_path, key="old", tput=555.0, start="2024-01-01T00:03:00")          # another configuration
    row = figures.aggregate(figures.load_runs(tmp_path / "n_clients", 99),
                            json.loads((tmp_path / "n_clients" / figures.MANIFEST).read_text())).iloc[0]
    assert (row.status, row.repeats_ok, row.repeats_failed, row.throughput_tps_median) == ("ok", 1, 0, 111.0)


def test_without_manifest_the_newest_configuration_of_a_point_wins(tmp_path):
    make_run(tmp_path, key="a", tput=1.0, start="2024-01-01T00:00:00")
    make_run(tmp_path, key="b", tput=2.0, start="2024-01-01T00:01:00")
    agg = figures.aggregate(figures.load_runs(tmp_path / "n_clients", 99))
    assert len(agg) == 1 and agg.throughput_tps_median.iloc[0] == 2.0


def test_no_commits_is_a_failure(tmp_path):
    make_run(tmp_path, committed=0)
    assert figures.load_runs(tmp_path / "n_clients", 99).status.iloc[0] == "failed"
    assert rundirs.run_outcome(next((tmp_path / "n_clients").iterdir()))[1] == "no commits in the measurement window"


def test_caption_names_scale_rtt_mechanism_and_swept_values(tmp_path):
    make_run(tmp_path, exp="robust", x=0, key="a", jitter=0.0)
    make_run(tmp_path, exp="robust", x=20, key="b", jitter=20 / math.sqrt(2))
    runs = figures.load_runs(tmp_path / "robust", 99)
    cap = figures.caption(runs, None, "TPC-C", 1, 99)
    for part in ("3 regions x 2 shards x 3 replicas", "scale 0.01", "RTT 5 ms intra-region, 100 ms cross-region",
                 "RTT std-dev swept 0/20 ms", "shaping app (local backend)", "runs 10 s, measured 2-9 s",
                 "1 repeat/point", "tail = p99"):
        assert part in cap, part


def test_caption_says_where_the_cpu_was_saturated(tmp_path):
    make_run(tmp_path, x=2, key="a", busy=45.0)
    make_run(tmp_path, x=8, key="b", busy=91.5)
    cap = figures.caption(figures.load_runs(tmp_path / "n_clients", 99), None, "TPC-C", 1, 99)
    assert "host CPU busy 45-92 %, above 70 % at x = 8 (tails there include CPU queueing)" in cap
    make_run(tmp_path, exp="tpca", x=0.5, key="c", busy=40.0)
    cap = figures.caption(figures.load_runs(tmp_path / "tpca", 99), None, "TPC-A", 1, 99)
    assert "host CPU busy 40 %" in cap and "above" not in cap


def test_caption_counts_transactions_given_up_after_the_retry_limit(tmp_path):
    make_run(tmp_path, x=2, key="a")
    cap = figures.caption(figures.load_runs(tmp_path / "n_clients", 99), None, "TPC-C", 1, 99)
    assert "given up" not in cap
    make_run(tmp_path, system="tapir", x=2, key="b", given_up=3)
    make_run(tmp_path, system="tapir", x=4, key="c", given_up=4)
    cap = figures.caption(figures.load_runs(tmp_path / "n_clients", 99), None, "TPC-C", 1, 99)
    assert "given up after the retry limit (started in the window, not in the latencies): Tapir 7" in cap


def test_an_open_load_not_kept_up_with_is_named_in_the_caption_the_table_and_the_claims(tmp_path):
    """Shed or unsent arrivals and transactions abandoned at the drain are said beside the numbers, as host busy is:
    the caption, the point table's warning (the sweep's log) and claims.md name the point and the share."""
    from testbed.analysis import claims
    make_run(tmp_path, x=2, key="a")
    rows = records(100) + [rec(9000 + i, "IRT", 9.5, 1000, status="abandoned") for i in range(2)]
    d = make_run(tmp_path, x=8, key="b", clients={"c0.0.0": rows}, client_summary={
        "window_start_s": 2.0, "window_end_s": 9.0, "n_records": len(rows),
        "open_loop": {"rate_tps": 500.0, "max_outstanding": 100, "arrivals": 1000, "shed": 250, "unsent": 50}})
    summary = results.summarize_run(d, write=False)
    assert summary["load"]["kept_up_pct"] == 70.0 and summary["classes"]["all"]["abandoned"] == 2
    assert "warning: the offered load was not kept up with: 25.0 % of 1000 arrivals shed (client.max_outstanding), " \
           "50 never sent" in results.format_table(summary)
    runs = figures.load_runs(tmp_path / "n_clients", 99)
    cap = figures.caption(runs, None, "TPC-C", 1, 99)
    assert "open load NOT kept up with (arrivals shed or never sent): DAST at x = 8 (30.0 %)" in cap
    assert "abandoned in flight at the drain (outcome unknown, in no latency): DAST 2" in cap
    agg = figures.aggregate(runs)
    assert figures.unkept_points(agg) == ["DAST at x=8 (30.0 %)"]
    md = claims.render({"n_clients": claims.points(tmp_path, "n_clients", 99)})
    assert "Open load NOT kept up with (the share of arrivals shed or never sent; the latencies are of what was run): " \
           "DAST at x=8 (30.0 %)." in md


def test_caption_says_which_points_a_protocol_was_not_run_at_by_rule(tmp_path):
    make_run(tmp_path, exp="scalability", x=3, key="a")
    runs = figures.load_runs(tmp_path / "scalability", 99)
    assert "not run" not in figures.caption(runs, {"skipped_points": {}}, "TPC-C", 1, 99)
    cap = figures.caption(runs, {"skipped_points": {"slog": {"x": [1, 2], "reason": "needs at least 3 regions"}}},
                          "TPC-C", 1, 99)
    assert "SLOG not run at x = 1, 2 (needs at least 3 regions)" in cap


def test_empty_experiment_is_an_error_and_writes_nothing(tmp_path):
    with pytest.raises(figures.NoRuns, match=r"^no runs of tpca under .*/tpca/ \(run experiments/exp3_tpca.py first\)$"):
        figures.draw("tpca", root=tmp_path, tail=99)
    assert list(tmp_path.iterdir()) == []


def test_genfigure_drawfig(tmp_path):
    import genFigure
    make_run(tmp_path, exp="crt_ratio", x=10, key="a")
    pdf = genFigure.drawFig("exp2", results=tmp_path, tail=95)
    assert pdf == tmp_path / "data-crt_ratio.pdf" and pdf.is_file()
    assert "irt_p95_ms" in set(pd.read_csv(tmp_path / "data-crt_ratio.csv").metric)
