"""Open-loop load (docs/workloads.md): its knobs and their checks, the deployment fields they become, and the
summary's offered, achieved and shed load."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from testbed.analysis import histories, results
from testbed.cli import run as runcli
from testbed.core import config, deploy
from testbed.sweeps import runner

ENGINE = Path(os.environ.get("TXN_SERVER") or REPO / "build" / "txn-server")
HEADER = "txn_id,type,type_name,class,start_us,latency_us,attempts,status,outputs,session,sent_us\n"


# ---- knobs: one line naming the knob and its range -------------------------------------------------------------

@pytest.mark.parametrize("knobs, message", [
    (dict(rate=0), "rate=0: must be a number in (0, 1000000]"),
    (dict(rate=-5), "rate=-5: must be a number in (0, 1000000]"),
    (dict(rate=2e6), "rate=2000000.0: must be a number in (0, 1000000]"),
    (dict(rate="fast"), "rate='fast': must be a number in (0, 1000000]"),
    (dict(rate=float("nan")), "rate=nan: must be a number in (0, 1000000]"),
    (dict(rate=10, rate_per="shard"), "rate_per='shard': must be one of total, region"),
    (dict(rate=10, max_outstanding=0), "max_outstanding=0: must be an integer in [1, 10000000]"),
    (dict(rate=10, max_outstanding=2.5), "max_outstanding=2.5: must be an integer in [1, 10000000]"),
    (dict(rate=1e-300), "rate=1e-300: less than one arrival expected in the 10 s run (rate x duration < 1)"),
    (dict(rate=0.05, duration=10), "rate=0.05: less than one arrival expected in the 10 s run (rate x duration < 1)"),
])
def test_run_knobs_are_checked(knobs, message):
    with pytest.raises(ValueError) as e:
        deploy.validate(**knobs)
    assert str(e.value) == message


@pytest.mark.parametrize("setting, message", [
    ({"OPEN_LOOP_RATE": 0}, "OPEN_LOOP_RATE=0: must be a number in (0, 1000000]"),
    ({"OPEN_LOOP_RATE": "100"}, "OPEN_LOOP_RATE='100': must be a number in (0, 1000000]"),
    ({"OPEN_LOOP_RATE_PER": "zone"}, "OPEN_LOOP_RATE_PER='zone': must be one of total, region"),
    ({"OPEN_LOOP_MAX_OUTSTANDING": 0}, "OPEN_LOOP_MAX_OUTSTANDING=0: must be an integer in [1, 10000000]"),
])
def test_exp_config_knobs_are_checked(setting, message):
    with pytest.raises(ValueError) as e:
        config.load_exp_config(setting)
    assert str(e.value) == message


def test_closed_loop_is_the_default_everywhere():
    cfg = config.load_exp_config({})
    assert cfg.open_loop_rate is None and cfg.open_loop_rate_per == "total" and cfg.open_loop_max_outstanding == 1000
    assert config.load_exp_config(REPO / "exp_config.py").open_loop_rate is None
    assert deploy.DEFAULTS["rate"] is None
    assert runcli.parse_args([]).rate is None


def test_run_local_refuses_a_bad_rate_in_one_line(capsys):
    assert runcli.main(["--rate", "-5"]) == 2
    err = capsys.readouterr().err
    assert err == "run_local: error: rate=-5.0: must be a number in (0, 1000000]\n"
    assert runcli.main(["--rate", "10", "--rate-per", "region", "--max-outstanding", "0"]) == 2
    assert capsys.readouterr().err == "run_local: error: max_outstanding=0: must be an integer in [1, 10000000]\n"
    with pytest.raises(SystemExit):   # argparse's own line for a word it does not know
        runcli.parse_args(["--rate", "10", "--rate-per", "shard"])
    capsys.readouterr()
    # what shapes an open load, without one: refused, not silently dropped
    for flag in (["--max-outstanding", "50"], ["--rate-per=region"]):
        assert runcli.main(flag) == 2
        assert capsys.readouterr().err == (f"run_local: error: {flag[0].split('=')[0]} shapes an open load: give "
                                           "--rate too (without it the load is a closed loop, which has no arrivals "
                                           "to bound)\n")
    a = runcli.parse_args(["--rate", "120", "--rate-per", "region", "--max-outstanding", "50"])
    assert (a.rate, a.rate_per, a.max_outstanding) == (120.0, "region", 50)


# ---- the deployment file ------------------------------------------------------------------------------------------

def test_the_rate_is_split_over_the_client_processes():
    """The engine gets each client process's rate: a total over all of them, a region's over the region's."""
    total = deploy.build_deployment(regions=3, shards=2, clients_per_shard=2, rate=120, max_outstanding=40)
    assert total["client"]["rate_tps"] == pytest.approx(120 / 12) and total["client"]["max_outstanding"] == 40
    region = deploy.build_deployment(regions=3, shards=2, clients_per_shard=2, rate=120, rate_per="region")
    assert region["client"]["rate_tps"] == pytest.approx(120 / 4) and region["client"]["max_outstanding"] == 1000
    assert deploy.load_of(total) == {"mode": "open", "concurrency": 2, "offered_tps": 120.0,
                                     "offered_tps_per_region": 40.0, "rate_tps_per_client": 10.0,
                                     "max_outstanding": 40}
    assert deploy.load_of(region)["offered_tps"] == 360.0 and deploy.load_of(region)["offered_tps_per_region"] == 120
    assert deploy.client_rate(100, "total", 3, 2, 1) == pytest.approx(100 / 6)


def test_a_closed_loop_deployment_file_is_unchanged():
    """No rate: no open-loop field in the file (an engine from before open loop reads it as it did)."""
    d = deploy.build_deployment(max_outstanding=7, rate_per="region")
    assert set(d["client"]) == {"n_concurrent", "duration_s", "warmup_s", "cooldown_s", "drain_timeout_s",
                                "retry_limit"}
    assert deploy.load_of(d) == {"mode": "closed", "concurrency": 2}


def test_a_sweep_points_key_is_unchanged_without_a_rate():
    """Points measured before open loop existed keep their keys (and resume): its knobs count only with a rate."""
    key = runner.point_key("n_clients", "dast", {}, "local", "app")
    assert runner.point_key("n_clients", "dast", {"rate_per": "region", "max_outstanding": 5}, "local", "app") == key
    open_key = runner.point_key("n_clients", "dast", {"rate": 100}, "local", "app")
    assert open_key != key
    assert runner.point_key("n_clients", "dast", {"rate": 100, "rate_per": "region"}, "local", "app") != open_key


@pytest.mark.slow
def test_the_engine_reads_the_open_loop_fields(tmp_path):
    if not ENGINE.exists():
        pytest.skip("txn-server not built")
    d = deploy.build_deployment(rate=1_000_000, max_outstanding=10_000_000)
    p = deploy.write_yaml(d, tmp_path / "deploy.yml")
    r = subprocess.run([str(ENGINE), "--config", str(p), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d["client"]["rate_tps"] = -1
    deploy.write_yaml(d, p)
    r = subprocess.run([str(ENGINE), "--config", str(p), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert "client.rate_tps: -1 out of range [0, 1000000]" in r.stderr and len(r.stderr.splitlines()) == 1


# ---- the summary --------------------------------------------------------------------------------------------------

def open_loop_run(tmp_path, rows_by_client: dict, open_loop: dict | None):
    """A run folder: deploy.yml, each client's records and its summary.json (with the engine's open_loop section
    when open_loop is given: the same for every client)."""
    d = deploy.build_deployment(regions=1, shards=1, clients_per_shard=len(rows_by_client), duration=10, warmup=2,
                                cooldown=1, **({"rate": 20} if open_loop else {}))
    deploy.write_yaml(d, tmp_path / "deploy.yml")
    (tmp_path / "clients").mkdir()
    for name, rows in rows_by_client.items():
        (tmp_path / "clients" / f"{name}.records.csv").write_text(
            HEADER + "".join(",".join(map(str, r)) + "\n" for r in rows))
        summ = {"node": name, "window_start_s": 2.0, "window_end_s": 9.0, "n_records": len(rows)}
        if open_loop:
            summ["open_loop"] = open_loop
        (tmp_path / "clients" / f"{name}.summary.json").write_text(json.dumps(summ))
    return tmp_path


def row(i, start_s, latency_ms, wait_ms=0, status="committed"):
    start = int(start_s * 1e6)
    return (i, 0, "NewOrder", "IRT", start, int(latency_ms * 1000), 1, status, "", 0, start + int(wait_ms * 1000))


def test_the_summary_says_offered_achieved_and_shed(tmp_path):
    ol = {"rate_tps": 10.0, "max_outstanding": 4, "arrivals": 100, "shed": 30, "unsent": 2, "arrivals_in_window": 70,
          "shed_in_window": 21, "unsent_in_window": 1, "max_queued": 3}
    rows = {f"c0.0.{k}": [row(k * 100 + i, 2 + i * 0.25, 50) for i in range(20)] for k in range(2)}
    s = results.summarize_run(open_loop_run(tmp_path, rows, ol))
    load = s["load"]
    assert load["mode"] == "open" and load["clients"] == 2
    assert load["offered_tps"] == 20.0
    assert load["arrival_tps"] == pytest.approx(2 * 70 / 7)
    assert load["achieved_tps"] == s["throughput_tps"] == pytest.approx(40 / 7)
    assert (load["arrivals"], load["shed"], load["unsent"]) == (200, 60, 4)
    assert (load["arrivals_in_window"], load["shed_in_window"], load["unsent_in_window"]) == (140, 42, 2)
    assert load["max_queued"] == 3 and load["max_outstanding"] == 4
    assert json.loads((tmp_path / "summary.json").read_text()) == s
    table = results.format_table(s)
    assert "open loop: offered 20.0 txn/s, arrived 20.0/s in the window, achieved 5.7/s" in table
    assert "shed 60 of 200 arrivals (42 in the window; max_outstanding 4 per client), unsent at the drain " \
           "timeout 4" in table


def test_a_closed_loop_summary_has_no_load_section(tmp_path):
    s = results.summarize_run(open_loop_run(tmp_path, {"c0.0.0": [row(1, 3, 10)]}, None))
    assert "load" not in s and "open loop" not in results.format_table(s)


def test_latency_counts_from_the_intended_start(tmp_path):
    """start_us is the arrival and latency_us runs from it: a transaction that waited 900 ms for a coordinator
    shows 900 ms more, whatever its service took."""
    rows = [row(1, 3, 1000, wait_ms=900), row(2, 3.1, 100)]
    s = results.summarize_run(open_loop_run(tmp_path, {"c0.0.0": rows}, {"rate_tps": 20.0}))
    assert s["classes"]["all"]["p99_ms"] == 1000.0 and s["classes"]["all"]["p50_ms"] == 100.0


def test_the_checker_orders_by_the_send_and_the_answer(tmp_path):
    """Real-time and session order take a transaction's issue from sent_us (its send, after its wait) and its answer
    from start_us + latency_us; records from before sent_us issue at start_us."""
    p = tmp_path / "c.records.csv"
    p.write_text(HEADER + "7,0,NewOrder,IRT,1000,5000,1,committed,,0,3500\n")
    times = {}
    histories.read_record_outputs(p, times=times, sessions={})
    assert times == {7: (3500, 6000)}
    p.write_text("txn_id,type,type_name,class,start_us,latency_us,attempts,status,outputs,session\n"
                 "7,0,NewOrder,IRT,1000,5000,1,committed,,0\n")
    times = {}
    histories.read_record_outputs(p, times=times, sessions={})
    assert times == {7: (1000, 6000)}


# ---- exp 1 by offered load (EXP1_OFFERED_RATES) -------------------------------------------------------------------

def test_exp1_sweeps_offered_rates_when_they_are_set():
    from testbed.core import experiments
    exp = experiments.get("exp1")
    closed = exp.points(config.load_exp_config({}))
    assert [p.x for p in closed] == [2, 4, 8] and all("rate" not in p.knobs for p in closed)
    assert exp.axis(closed[0]) == (exp.x_name, exp.x_label, exp.x_unit)
    cfg = config.load_exp_config({"EXP1_OFFERED_RATES": [50, 100.5, 400], "CONCURRENCY_LEVELS": [1, 8, 2]})
    pts = exp.points(cfg)
    assert [p.x for p in pts] == [50, 100.5, 400]
    assert all(p.knobs["rate"] == p.x and p.knobs["rate_per"] == "total" and p.knobs["concurrency"] == 8
               for p in pts)
    assert exp.axis(pts[0]) == experiments.OFFERED_AXIS
    assert experiments.quick_config(cfg, exp).exp1_offered_rates == (50, 100.5, 400)
    assert len(experiments.quick_config(config.load_exp_config({"EXP1_OFFERED_RATES": [1, 2, 3, 4, 5]}), exp)
               .exp1_offered_rates) == 3
    with pytest.raises(ValueError) as e:
        config.load_exp_config({"EXP1_OFFERED_RATES": [10, 0]})
    assert str(e.value) == "EXP1_OFFERED_RATES item=0: must be a number in (0, 1000000]"


def test_a_sweep_by_offered_load_records_its_axis(fake_registry):
    """sweep.json's x (what the figure labels its axis with) and each run's meta x are the offered load."""
    from testbed.core import experiments, protocols

    class Backend:
        name, mechanism = "local", "app"

        def registry(self):
            return protocols.load()
    cfg = config.load_exp_config({"EXP1_OFFERED_RATES": [50, 100], "SYSTEMS": ["alpha"], "N_REPEAT": 1})
    sweep = runner.plan(experiments.get("exp1"), cfg, Backend(), log=lambda *_: None)
    assert [t.knobs["rate"] for t in sweep.tasks] == [50.0, 100.0]
    x = runner.manifest(sweep, cfg, Backend(), quick=False)["x"]
    assert (x["name"], x["label"], x["unit"]) == experiments.OFFERED_AXIS


def test_every_experiment_runs_open_loop_when_open_loop_rate_is_set():
    from testbed.runs.backend import base_knobs
    assert not {"rate", "rate_per", "max_outstanding"} & set(base_knobs(config.load_exp_config({})))
    cfg = config.load_exp_config({"OPEN_LOOP_RATE": 30, "OPEN_LOOP_RATE_PER": "region",
                                  "OPEN_LOOP_MAX_OUTSTANDING": 64})
    k = base_knobs(cfg)
    assert (k["rate"], k["rate_per"], k["max_outstanding"]) == (30, "region", 64)
    d = deploy.build_deployment(mode="dast", **k)
    assert d["client"]["rate_tps"] == pytest.approx(30 / 2) and d["client"]["max_outstanding"] == 64


# ---- overload: told from a broken protocol (docs/checker.md) -------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(not ENGINE.exists(), reason="txn-server not built")
def test_an_overloaded_open_load_says_so_and_stays_consistent(tmp_path):
    """The most the rate allows, a 1 s drain: every coordinator is still busy when the drain runs out, arrivals wait
    unsent. Those in flight are abandoned (outcome unknown): counted, noted in one line, checked as possibly
    committed (the ones that executed take part in atomicity, the replay and the anomaly check), no violation."""
    from testbed.runs.local import LocalRunner
    d = deploy.build_deployment(regions=2, shards=1, clients_per_shard=1, concurrency=2, duration=3, warmup=0.5,
                                cooldown=0.5, workload="append", rate=1_000_000, max_outstanding=300,
                                drain_timeout=1, base_port=27400)
    res = LocalRunner(build_dir=ENGINE.parent, progress=False).run(d, "overload", out_root=tmp_path)
    check = res.check
    assert check["verdict"] == "CONSISTENT", check["violations"][:5]
    assert check["overloaded"] is True and check["abandoned_at_drain"] == 4, check   # 2 clients x 2 coordinators
    note = next(n for n in check["notes"] if n.startswith("could not keep up with the offered load: "))
    assert "arrival(s) shed (client.max_outstanding)" in note and "arrival(s) never sent" in note, note
    assert "4 transaction(s) abandoned in flight at the drain" in note, note
    assert check["checks"]["anomalies"]["verdict"] == "pass" and check["checks"]["replay"]["verdict"] == "pass"
    assert check["stats"]["abandoned"] == 4 and check["stats"]["abandoned_executed"] > 0, check["stats"]
    assert res.summary["classes"]["all"]["abandoned"] == 4
    assert 0 < res.summary["load"]["kept_up_pct"] < 1
    table = results.format_table(res.summary)
    assert "warning: the offered load was not kept up with: " in table and "% of" in table
