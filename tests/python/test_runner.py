"""The sweep runner (testbed/sweeps/runner.py) and the experiment declarations (testbed/core/experiments.py), against a
fake Backend that writes run folders the way the local backend does, and once against the local backend
driving the fake binaries (tests/python/fake_txn.py)."""
import argparse
import json
import math
import os
import signal
import threading
import time

import pytest
import yaml

from pathlib import Path

from testbed.core import deploy, experiments, protocols
from testbed.analysis import figures, results, rundirs
from testbed.sweeps import runner
from testbed.runs.backend import Backend, LocalBackend
from testbed.core.config import load_exp_config
from testbed.core.runtypes import Interrupted, RunError, RunResult, new_run_dir

from conftest import procs_mentioning, seal_run

HEADER = "txn_id,type,type_name,class,start_us,latency_us,attempts,status\n"


def cfg(**over):
    base = dict(SYSTEMS=["dast"], N_REPEAT=2, DURATION_S=3, WARMUP_S=1, COOLDOWN_S=0.5,
                CONCURRENCY_LEVELS=[1, 2, 4], CLIENT_PROCESS_PER_SHARD=[1], REGIONS=3, SHARDS_PER_REGION=2)
    base.update(over)
    return load_exp_config(base)


class FakeBackend(Backend):
    """Writes a complete run folder per run, as the run lifecycle does (meta.json with status and reason, files.json).
    behaviour(knobs) -> ok | error | inconsistent | nocommit | interrupt."""
    name, mechanism = "fake", "app"

    def __init__(self, behaviour=lambda k: "ok", modes=("dast",), busy=None, latency=None):
        self.behaviour, self.modes, self.calls, self.closed = behaviour, modes, [], False
        self.latency = latency or (lambda k: (10 + k["concurrency"], 150))   # knobs -> (IRT ms, CRT ms)
        self.busy = busy   # knobs -> the host's CPU busy share the run records (the lifecycle measures it)

    def registry(self):
        real = protocols.load()   # the built engine's entries, under the names this fake claims to have built
        return protocols.Registry({m: real.get(m) for m in self.modes}, "fake")

    def deployment(self, **knobs):
        d = deploy.build_deployment(**knobs)
        d["_knobs"] = knobs  # lets run() see the knobs
        return d

    def run(self, deploy_dict, name, out_root="results", config=None, meta_extra=None):
        knobs = deploy_dict.pop("_knobs")
        self.calls.append((knobs["mode"], knobs["concurrency"], knobs["seed"]))
        what = self.behaviour(knobs)
        run_dir = new_run_dir(Path(out_root) / name)
        (run_dir / "clients").mkdir()
        deploy.write_yaml(deploy_dict, run_dir / "deploy.yml")
        rundirs.write_json(run_dir / "config.json", config if config is not None else deploy_dict)
        meta = {"run_id": run_dir.name, "backend": self.name, "shaping": "app",
                "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(meta_extra or {})}
        if self.busy:
            meta["machine_cpu"] = {"busy_pct": self.busy(knobs), "steal_pct": 0.0}

        def finish(status, reason):   # as the lifecycle ends a run: meta.json, then files.json
            meta.update(status=status, reason=reason or None)
            rundirs.write_json(run_dir / "meta.json", meta)
            seal_run(run_dir)

        if what == "error":
            finish("failed", "server s0.0.1 exited with code 6")
            raise RunError("server s0.0.1 exited with code 6", run_dir)
        if what == "interrupt":
            e = Interrupted(signal.SIGINT, run_dir=run_dir)
            finish("interrupted", str(e))
            raise e
        w0 = deploy_dict["client"]["warmup_s"] * 1e6
        irt, crt = self.latency(knobs)
        rows = [] if what == "nocommit" else [
            (i, 0, "NewOrder", "CRT" if i % 4 == 0 else "IRT", int(w0 + i * 1000),
             (crt if i % 4 == 0 else irt) * 1000, 1, "committed") for i in range(100)]
        (run_dir / "clients" / "c0.0.0.records.csv").write_text(
            HEADER + "".join(",".join(map(str, r)) + "\n" for r in rows))
        summary = results.summarize_run(run_dir)
        check = {"exit_code": 1 if what == "inconsistent" else 0,
                 "verdict": "INCONSISTENT (1 violations)" if what == "inconsistent" else "CONSISTENT"}
        rundirs.write_json(run_dir / "check.json", check)
        status, reason = rundirs.verdict(check, summary)
        finish(status, reason)
        return RunResult(run_dir, status, reason, summary, check)

    def close(self):
        self.closed = True


EXP1 = experiments.get("n_clients")


def sweep(tmp_path, backend, c=None, fresh=False):
    logs = []
    s = runner.run_sweep(EXP1, c or cfg(), backend, out_root=tmp_path, fresh=fresh, log=logs.append, tty=False)
    return s, logs


def n_folders(tmp_path):
    return len(list((tmp_path / "n_clients").glob("*/meta.json")))


def test_second_invocation_reuses_ok_runs(tmp_path):
    b = FakeBackend()
    s, _ = sweep(tmp_path, b)
    assert len(b.calls) == 6 and all(o.status == "ok" for o in s.outcomes)       # 3 points x 2 repeats
    assert sorted(b.calls) == sorted(("dast", c, r) for c in (1, 2, 4) for r in (1, 2))  # seed = repeat + 1
    b2 = FakeBackend()
    s2, _ = sweep(tmp_path, b2)
    assert b2.calls == [] and all(o.reused and o.status == "ok" for o in s2.outcomes) and len(s2.outcomes) == 6
    assert n_folders(tmp_path) == 6


def test_failed_runs_are_recorded_and_rerun(tmp_path):
    b = FakeBackend(lambda k: "error" if k["concurrency"] == 2 else "ok")
    s, _ = sweep(tmp_path, b)
    assert len(b.calls) == 6                                                       # the sweep went on
    failed = [o for o in s.outcomes if o.status == "failed"]
    assert [o.task.point.x for o in failed] == [4, 4]                              # x = 1 proc x 2 shards x 2
    assert failed[0].reason == "server s0.0.1 exited with code 6"
    meta = json.loads((failed[0].run_dir / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["reason"] == "server s0.0.1 exited with code 6"
    assert meta["experiment"] == "n_clients" and meta["x"]["value"] == 4

    b2 = FakeBackend()
    s2, _ = sweep(tmp_path, b2)
    assert sorted(b2.calls) == [("dast", 2, 1), ("dast", 2, 2)]                    # only the failed ones
    agg = figures.aggregate(figures.load_runs(tmp_path / "n_clients", 99),
                            json.loads((tmp_path / "n_clients" / "sweep.json").read_text()))
    assert list(agg.status) == ["ok", "ok", "ok"] and list(agg.repeats_ok) == [2, 2, 2]


@pytest.mark.parametrize("what,reason", [("inconsistent", "inconsistent: INCONSISTENT (1 violations)"),
                                         ("nocommit", "no commits in the measurement window")])
def test_bad_verdicts_are_failures(tmp_path, what, reason):
    b = FakeBackend(lambda k: what if k["concurrency"] == 4 else "ok")
    s, _ = sweep(tmp_path, b)
    bad = [o for o in s.outcomes if o.status != "ok"]
    assert len(bad) == 2 and {o.reason for o in bad} == {reason}
    assert rundirs.run_outcome(bad[0].run_dir) == ("failed", reason)
    b2 = FakeBackend()
    sweep(tmp_path, b2)
    assert sorted(b2.calls) == [("dast", 4, 1), ("dast", 4, 2)]


def test_fresh_reruns_everything_and_keeps_old_folders(tmp_path):
    sweep(tmp_path, FakeBackend())
    b = FakeBackend()
    s, _ = sweep(tmp_path, b, fresh=True)
    assert len(b.calls) == 6 and not any(o.reused for o in s.outcomes)
    assert n_folders(tmp_path) == 12
    agg = figures.aggregate(figures.load_runs(tmp_path / "n_clients", 99),
                            json.loads((tmp_path / "n_clients" / "sweep.json").read_text()))
    assert list(agg.repeats_ok) == [2, 2, 2]                                       # not 4: newest per repeat


def test_changed_config_changes_the_key_and_reruns(tmp_path):
    sweep(tmp_path, FakeBackend())
    b = FakeBackend()
    sweep(tmp_path, b, c=cfg(DURATION_S=4))
    assert len(b.calls) == 6


def test_point_key():
    k = dict(mode="dast", workload="tpcc", concurrency=2, regions=3, shards=2, duration=10.0)
    key = runner.point_key("n_clients", "dast", k, "local", "app")
    assert key == runner.point_key("n_clients", "dast", dict(reversed(list(k.items()))), "local", "app")
    assert key == runner.point_key("n_clients", "dast", {**k, "duration": 10}, "local", "app")   # 10 == 10.0
    assert key == runner.point_key("n_clients", "dast", {**k, "seed": 7, "base_port": 30000}, "local", "app")
    assert key == runner.point_key("n_clients", "dast", {**k, "jitter": 0}, "local", "app")      # the default
    assert key == runner.point_key("n_clients", "dast", {**k, "protocol_options": {"ewma_alpha": 0.2}}, "local",
                                   "app")                                                        # the default
    for other in [runner.point_key("n_clients", "dast", {**k, "concurrency": 3}, "local", "app"),
                  runner.point_key("n_clients", "dast", {**k, "zipf": 0.9}, "local", "app"),
                  runner.point_key("n_clients", "dast", {**k, "rtt_ms": [[5, 90, 100], [90, 5, 100],
                                                                           [100, 100, 5]]}, "local", "app"),
                  runner.point_key("crt_ratio", "dast", k, "local", "app"),
                  runner.point_key("n_clients", "dast", {**k, "protocol_options": {"ewma_alpha": 0.5}}, "local",
                                   "app"),
                  runner.point_key("n_clients", "dast", k, "swarm", "app"),
                  runner.point_key("n_clients", "dast", k, "swarm", "netem")]:
        assert other != key


def test_unbuilt_protocols_are_skipped_with_a_message(tmp_path):
    b = FakeBackend(modes=("dast",))
    s, logs = sweep(tmp_path, b, c=cfg(SYSTEMS=["dast", "janus", "tapir", "slog"], N_REPEAT=1))
    assert {c[0] for c in b.calls} == {"dast"} and len(b.calls) == 3
    assert any("skipping janus: not built" in m for m in logs) and any("skipping slog" in m for m in logs)
    m = json.loads((tmp_path / "n_clients" / "sweep.json").read_text())
    assert m["systems"] == {"dast": "run", "janus": "not built", "tapir": "not built", "slog": "not built"}
    assert len(m["points"]) == 3 and m["n_repeat"] == 1 and m["tail_percentile"] == 99


def test_bad_knob_is_rejected_before_anything_runs(tmp_path):
    b = FakeBackend()
    c = cfg()
    bad = experiments.Experiment("n_clients", 1, "t", "x", "x", "", lambda _c: [
        experiments.Point(1, dict(concurrency=1)), experiments.Point(2, dict(concurrency=999))])
    with pytest.raises(ValueError, match="concurrency=999"):
        runner.run_sweep(bad, c, b, out_root=tmp_path, log=lambda *_: None, tty=False)
    assert b.calls == []


def test_interrupt_stops_the_sweep_and_records_the_run_interrupted(tmp_path):
    seen = []
    b = FakeBackend(lambda k: "interrupt" if (seen.append(1) or len(seen)) == 2 else "ok")
    s, _ = sweep(tmp_path, b)
    assert s.interrupted and s.interrupted.exit_code == 130 and len(b.calls) == 2 and len(s.outcomes) == 1
    metas = [json.loads(p.read_text()) for p in (tmp_path / "n_clients").glob("*/meta.json")]
    cut = [m for m in metas if m["status"] != "ok"]
    assert len(cut) == 1 and cut[0]["status"] == "interrupted" and cut[0]["reason"] == "interrupted by SIGINT"
    b2 = FakeBackend()
    sweep(tmp_path, b2)
    assert len(b2.calls) == 5                                                      # resumes, re-runs the cut one


def test_run_experiment_closes_the_backend_and_draws(tmp_path, monkeypatch, capsys):
    b = FakeBackend(lambda k: "error" if k["concurrency"] == 4 else "ok")
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast', 'janus']\nN_REPEAT = 1\nDURATION_S = 3\nWARMUP_S = 1\nCOOLDOWN_S = 0.5\n")
    rc, pdf = runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res")
    out = capsys.readouterr().out
    assert rc == 1 and b.closed and pdf == tmp_path / "res" / "data-n_clients.pdf" and pdf.is_file()
    assert "figure: " + str(pdf) in out and "failed: server s0.0.1 exited with code 6" in out
    assert (tmp_path / "res" / "data-n_clients.png").is_file() and (tmp_path / "res" / "data-n_clients.csv").is_file()


def test_a_busy_host_is_said_at_the_end_of_the_sweep_and_in_the_caption(tmp_path, monkeypatch, capsys):
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast']\nN_REPEAT = 2\nDURATION_S = 3\nWARMUP_S = 1\nCOOLDOWN_S = 0.5\n")
    # one repeat of the top point ran the host 85 % busy: the point is named, with its worst repeat
    b = FakeBackend(busy=lambda k: 85.0 if (k["concurrency"], k["seed"]) == (4, 2) else 30.0)
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    rc, pdf = runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res")
    out = capsys.readouterr().out
    assert rc == 0 and pdf.is_file()
    assert "WARNING: the host's CPU was more than 70 % busy at DAST at x=8 (85 %): the tails there include" in out
    assert "x=4" not in out.split("WARNING")[1]
    runs = figures.load_runs(tmp_path / "res" / "n_clients", 99)
    assert "host CPU busy 30-85 %, above 70 % at x = 8 (tails there include CPU queueing)" in figures.caption(
        runs, None, "w", 2, 99)
    table = figures.point_table(figures.aggregate(runs), 99)
    assert "busy %" in table.splitlines()[0] and "85" in table.splitlines()[-1]

    # below the limit everywhere: no warning
    b2 = FakeBackend(busy=lambda k: 69.9)
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b2)
    runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res2")
    assert "WARNING" not in capsys.readouterr().out


def test_claims_put_every_point_beside_the_papers(tmp_path, monkeypatch, capsys):
    # DAST's IRT tail 10 ms against Janus's 100 (90 % lower), its CRT 150 against 300 at concurrency 1 and 100 at 2
    lat = {("dast", 1): (10, 150), ("dast", 2): (10, 150), ("janus", 1): (100, 300), ("janus", 2): (100, 100)}
    b = FakeBackend(modes=("dast", "janus"), latency=lambda k: lat[(k["mode"], k["concurrency"])])
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast', 'janus']\nN_REPEAT = 1\nDURATION_S = 3\nWARMUP_S = 1\n"
                       "COOLDOWN_S = 0.5\nCONCURRENCY_LEVELS = [1, 2]\n")
    res = tmp_path / "res"
    monkeypatch.chdir(tmp_path)
    a = argparse.Namespace(backend="local", out=str(res), wait=False, config=str(cfgfile), quick=False, fresh=False,
                           seed=None, repeats=None)
    assert runner.run_experiments(["n_clients"], a, [], "run_experiments.py") == 0
    assert f"every experiment's numbers beside the paper's claims: {res / 'claims.md'}" in capsys.readouterr().out
    text = (res / "claims.md").read_text()
    assert "| 2 | Janus | 66.7 | 100.0 | 100.0 | 300.0 | 300.0 |" in text           # x = 2 clients per region
    assert "| Janus | 90.0 / 50.0 | 90.0 / -50.0 |" in text                         # per x: IRT / CRT lower by
    assert "| exp 1 | Janus | 90.0 | -50.0 to 50.0 |" in text
    assert "| the DAST paper (abstract) | all three | 87.9 to 93.2 | 27.7 to 70.4 |" in text
    from testbed.analysis import claims
    assert claims.why("tapir", {"classes": {"all": {"mean_attempts": 2.5}}}) == 1.5
    assert claims.why("slog", {"counters": {"blocked_entries": 5, "batch_entries": 50}}) == 10.0
    assert math.isnan(claims.why("janus", {"counters": {}}))
    assert claims.write(tmp_path / "nothing") is None


def test_seed_knob_and_option(tmp_path, monkeypatch):
    b = FakeBackend()
    s1 = runner.plan(EXP1, cfg(), b, log=lambda *_: None)
    s5 = runner.plan(EXP1, cfg(SEED=5), b, log=lambda *_: None)
    assert [t.knobs["seed"] for t in s1.tasks][:2] == [1, 2] and [t.knobs["seed"] for t in s5.tasks][:2] == [5, 6]
    assert {t.key for t in s1.tasks}.isdisjoint({t.key for t in s5.tasks})   # another seed: other points
    # --seed overrides SEED of the config, and every run records its seed (deploy.yml)
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast']\nN_REPEAT = 2\nDURATION_S = 3\nWARMUP_S = 1\nCOOLDOWN_S = 0.5\n"
                       "CONCURRENCY_LEVELS = [1]\nSEED = 3\n")
    runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res", seed=40)
    assert sorted(c[2] for c in b.calls) == [40, 41]
    seeds = sorted(yaml.safe_load((d / "deploy.yml").read_text())["seed"] for d in (tmp_path / "res" / "n_clients").iterdir()
                   if d.is_dir())
    assert seeds == [40, 41]
    assert runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res", seed=-2)[0] == 2   # one line, no run
    assert len(b.calls) == 2


def test_repeats_option_adds_repeats_to_a_quick_sweep(tmp_path, monkeypatch):
    b = FakeBackend()
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast']\nCONCURRENCY_LEVELS = [1]\n")
    runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res", quick=True)
    assert [c[2] for c in b.calls] == [1]                                       # --quick: one repeat
    runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res", quick=True, repeats=3)
    assert [c[2] for c in b.calls] == [1, 2, 3]                                 # the first one reused
    m = json.loads((tmp_path / "res" / "n_clients" / "sweep.json").read_text())
    assert m["n_repeat"] == 3 and m["quick"] is True
    assert runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res", quick=True, repeats=0)[0] == 2


def test_run_experiment_rejects_bad_config(tmp_path, capsys):
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("N_REPEAT = 0\n")
    assert runner.run_experiment("tpca", config=cfgfile, out=tmp_path)[0] == 2
    assert "N_REPEAT=0" in capsys.readouterr().err


# ---------------------------------------------------------------- experiment declarations

def test_exp1_x_is_clients_per_region_and_pairs_stay_apart():
    pts = EXP1.points(cfg(CLIENT_PROCESS_PER_SHARD=[1, 2], CONCURRENCY_LEVELS=[2, 4]))
    assert [(p.x, p.knobs["clients_per_shard"], p.knobs["concurrency"]) for p in pts] == [
        (4, 1, 2), (8, 1, 4), (8, 2, 2), (16, 2, 4)]
    assert {p.series for p in pts} == {"1 client proc/shard", "2 client proc/shard"}  # x=8 twice, two lines
    assert [p.series for p in EXP1.points(cfg())] == ["", "", ""]


def test_other_experiments_sweep_their_knob():
    c = cfg(CRT_RATIOS=[10, 90], ZIPFS=[0.5, 1], SCALABILITY_N_REGIONS=[2, 3], ROBUST_RTT_VAR=[0, 20],
            CONCURRENCY_LEVELS=[1, 8], CLIENT_PROCESS_PER_SHARD=[2, 1], FIXED_CLIENT_PROCESS_PER_SHARD=3,
            FIXED_CONCURRENCY=5, SCALABILITY_CONCURRENCY=2)
    e2, e3, e4, e5 = (experiments.get(f"exp{i}").points(c) for i in (2, 3, 4, 5))
    assert [(p.x, p.knobs["payment_crt_rate"], p.knobs["workload"]) for p in e2] == [(10, 10, "tpcc"), (90, 90, "tpcc")]
    assert [(p.x, p.knobs["zipf"], p.knobs["workload"]) for p in e3] == [(0.5, 0.5, "tpca"), (1, 1.0, "tpca")]
    assert [(p.x, p.base) for p in e4] == [(2, {"regions": 2}), (3, {"regions": 3})]
    assert all(p.knobs["clients_per_shard"] == 3 and p.knobs["concurrency"] == 5 for p in e2 + e3 + e5)
    assert all(p.knobs["clients_per_shard"] == 3 and p.knobs["concurrency"] == 2 for p in e4)  # its own load
    b = FakeBackend()
    s = runner.plan(experiments.get("exp5"), c, b, log=lambda *_: None)
    jit = sorted({t.knobs["jitter"] for t in s.tasks})
    assert jit == [0, round(20 / math.sqrt(2), 6)]                                 # RTT std-dev X -> X/sqrt(2) per way
    s4 = runner.plan(experiments.get("exp4"), c, b, log=lambda *_: None)
    assert sorted({(t.knobs["regions"], len(t.knobs["rtt_ms"])) for t in s4.tasks}) == [(2, 2), (3, 3)]


def test_quick_preset():
    c = cfg(CONCURRENCY_LEVELS=[1, 5, 10, 15, 20, 25, 30, 40, 50], CLIENT_PROCESS_PER_SHARD=[2, 3],
            CRT_RATIOS=[10, 20, 30, 40, 50, 60, 70, 80, 90], N_REPEAT=5, DURATION_S=60, SCALABILITY_N_REGIONS=[3])
    q = experiments.quick_config(c)
    assert q.concurrency_levels == (1, 20, 50) and q.crt_ratios == (10, 50, 90)
    assert q.client_process_per_shard == (2,) and q.n_repeat == 1 and q.duration_s == 14 and q.warmup_s == 3
    assert q.duration_s - q.warmup_s - q.cooldown_s == 10  # a 10 s measurement window
    assert len(EXP1.points(q)) == 3
    assert experiments.quick_config(c, experiments.get("exp4")).scalability_n_regions == (2, 3)


# ---------------------------------------------------------------- with the local backend and fake binaries

def test_with_local_backend_fake_binaries_and_ctrl_c(fake_bin, tmp_path):
    class Local(LocalBackend):
        def deployment(self, **knobs):
            return super().deployment(**{**knobs, "base_port": 25000})
    b = Local(build_dir=fake_bin, progress=False, ready_timeout_s=20, grace_s=5, margin_s=20)
    b.registry = protocols.load   # the fake binaries do not answer --list-modes: the built engine's registry
    c = cfg(N_REPEAT=1, DURATION_S=2, WARMUP_S=0.5, COOLDOWN_S=0.5, CONCURRENCY_LEVELS=[1, 2], REGIONS=2,
            SHARDS_PER_REGION=1, SCALABILITY_N_REGIONS=[2])
    s, _ = sweep(tmp_path, b, c=c)
    assert [o.status for o in s.outcomes] == ["ok", "ok"]
    fig = figures.draw("n_clients", root=tmp_path)
    assert list(fig.table.irt_p50_ms_median) == [20.0, 20.0] and list(fig.table.crt_p50_ms_median) == [150.0, 150.0]

    # Ctrl-C in the middle of a run: the sweep stops, the run is recorded as interrupted, no process is left
    before = set((tmp_path / "n_clients").iterdir())

    def ctrl_c():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            new = [d for d in (tmp_path / "n_clients").iterdir() if d not in before]
            # both regions' clients started: in their shard's process (it says GO) or in their own (c*.log)
            logs = list((new[0] / "logs").glob("*.log")) if new else []
            started = [f for f in logs if f.name.startswith("c") or "GO " in f.read_text(errors="replace")]
            if len(started) == 2:
                time.sleep(0.3)
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)
    timer = threading.Thread(target=ctrl_c)
    timer.start()
    s2, _ = sweep(tmp_path, b, c=c, fresh=True)
    timer.join()
    assert s2.interrupted and s2.outcomes == []
    newest = max((tmp_path / "n_clients").glob("*/meta.json"), key=lambda p: p.stat().st_mtime)
    meta = json.loads(newest.read_text())
    assert meta["status"] == "interrupted" and meta["reason"] == "interrupted by SIGINT"
    assert procs_mentioning(str(tmp_path)) == []


def test_what_a_protocol_needs_comes_from_the_registry(fake_registry):
    b = FakeBackend(modes=("alpha", "ordered"))
    with pytest.raises(ValueError, match=r"^REGIONS=2: ordered needs at least 3 regions; raise REGIONS or drop "):
        runner.plan(EXP1, cfg(REGIONS=2, SCALABILITY_N_REGIONS=[2], SYSTEMS=["alpha", "ordered"]), b,
                    log=lambda *_: None)
    logs = []
    s = runner.plan(experiments.get("exp4"), cfg(SYSTEMS=["alpha", "ordered"], SCALABILITY_N_REGIONS=[2, 3],
                                                 N_REPEAT=1), b, log=logs.append)
    assert "skipping ordered at 2 regions: ordered needs at least 3 regions" in logs
    assert runner.manifest(s, cfg(), b, quick=False)["skipped_points"] == \
        {"ordered": {"x": [2], "reason": "needs at least 3 regions"}}  # the figure's caption says so
    assert sorted((t.system, t.knobs["regions"]) for t in s.tasks) == [("alpha", 2), ("alpha", 3), ("ordered", 3)]
    with pytest.raises(ValueError, match=r"protocols\.alpha\.count=9: must be an integer in \[1, 5\]"):
        runner.plan(EXP1, cfg(SYSTEMS=["alpha"], PROTOCOL_OPTIONS={"alpha": {"count": 9}}), b, log=lambda *_: None)
    s = runner.plan(EXP1, cfg(SYSTEMS=[], PROTOCOL_OPTIONS={"alpha": {"count": 4}}), b, log=lambda *_: None)
    assert {t.system for t in s.tasks} == {"alpha", "ordered"}           # no SYSTEMS: every built protocol
    assert {t.knobs["protocol_options"].get("count") for t in s.tasks if t.system == "alpha"} == {4}


@pytest.mark.parametrize("damage", ["truncate summary.json", "truncate records", "drop last record line",
                                    "remove a dump"])
def test_a_damaged_ok_run_is_failed_with_the_reason_and_run_again(tmp_path, damage):
    sweep(tmp_path, FakeBackend())
    run = sorted((tmp_path / "n_clients").glob("*/meta.json"))[0].parent
    csv = run / "clients" / "c0.0.0.records.csv"
    if damage == "truncate summary.json":
        (run / "summary.json").write_text((run / "summary.json").read_text()[:40])
    elif damage == "truncate records":
        csv.write_bytes(csv.read_bytes()[:-7])
    elif damage == "drop last record line":
        csv.write_text("".join(csv.read_text().splitlines(keepends=True)[:-1]))
    else:
        (run / "servers" / "s0.0.0.state.json").unlink()
    status, reason = rundirs.run_outcome(run)
    assert status == "failed" and reason.startswith("invalid run folder: "), reason
    b = FakeBackend()
    sweep(tmp_path, b)
    assert len(b.calls) == 1                                              # only the damaged one runs again
    agg = figures.aggregate(figures.load_runs(tmp_path / "n_clients", 99),
                            json.loads((tmp_path / "n_clients" / "sweep.json").read_text()))
    assert list(agg.status) == ["ok", "ok", "ok"]


def test_a_local_sweep_refuses_while_another_writes_the_same_results(tmp_path, monkeypatch, capsys):
    from testbed.core import lock
    monkeypatch.setenv(lock.ENV_DIR, str(tmp_path / "locks"))
    import argparse
    a = argparse.Namespace(backend="local", config=None, quick=True, fresh=False, out=str(tmp_path), wait=False)
    with lock.JobLock(lock.local_lock_name(tmp_path), "run_experiments.py --quick").acquire():
        assert runner.run_experiments(["n_clients"], a, [], "run_experiments.py") == 2
    err = capsys.readouterr().err
    assert "this results folder is busy: `run_experiments.py --quick`" in err


# ---------------------------------------------------------------- what is reused or drawn is the run's own

def edit_json(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def copy_check_of_the_ok_run(run):
    other = next(d for d in run.parent.iterdir() if d.is_dir() and d != run)
    (run / "check.json").write_text((other / "check.json").read_text())


@pytest.mark.parametrize("target,doctor,reason", [
    ("ok", lambda run: edit_json(run / "summary.json", lambda s: s["classes"]["all"].update(throughput_tps=999.0)),
     "summary.json: classes.all.throughput_tps 999.0, the records give 66.66666666666667"),
    ("inconsistent", copy_check_of_the_ok_run, "check.json: the verdict of run "),
    ("inconsistent", lambda run: edit_json(run / "check.json", lambda c: c.update(verdict="CONSISTENT", exit_code=0)),
     "check.json: changed since the run (sha256 differs from files.json; edited?)"),
    ("ok", lambda run: edit_json(run / "meta.json", lambda m: m["x"].update(value=8)),
     "meta.json: x.value 8, files.json recorded 2 when the run ended"),
    ("ok", lambda run: edit_json(run / "meta.json", lambda m: m.update(system="janus")),
     'meta.json: system "janus", files.json recorded "dast" when the run ended'),
], ids=["summary-throughput-999", "check-copied-from-an-ok-run", "check-verdict-edited", "meta-x", "meta-system"])
def test_a_doctored_run_is_not_reused_nor_drawn_and_says_why(tmp_path, capsys, target, doctor, reason):
    """Issue 29, finding 2: a parseable but wrong derived file makes a failed run: run again, never drawn."""
    c = cfg(CONCURRENCY_LEVELS=[1], N_REPEAT=2)
    sweep(tmp_path, FakeBackend(lambda k: "inconsistent" if k["seed"] == 1 else "ok"), c=c)
    runs = {json.loads((d / "meta.json").read_text())["repeat"]: d for d in (tmp_path / "n_clients").glob("*-*")}
    run = runs[0] if target == "inconsistent" else runs[1]
    assert rundirs.run_outcome(runs[0])[0] == "failed" and rundirs.run_outcome(runs[1]) == ("ok", "")
    doctor(run)
    if target == "inconsistent":   # and its meta.json says ok (its status is the outcome's, which is re-derived)
        edit_json(run / "meta.json", lambda m: m.update(status="ok", reason=None))
    status, why = rundirs.run_outcome(run)
    assert status == "failed" and why.startswith(f"invalid run folder: {reason}"), why
    # never drawn: the figure has it failed, with the reason, and no number of it
    drawn = figures.load_runs(tmp_path / "n_clients", 99).set_index("run_id")
    assert drawn.loc[run.name, "status"] == "failed" and drawn.loc[run.name, "reason"] == why
    assert math.isnan(drawn.loc[run.name, "throughput_tps"])
    # not reused: the next sweep runs it again, saying why (repeat 0, inconsistent, runs again anyway)
    capsys.readouterr()
    b = FakeBackend()
    s, _ = sweep(tmp_path, b, c=c)
    assert sorted(k[2] for k in b.calls) == ([1] if target == "inconsistent" else [1, 2])
    assert f"    running it again: its last run {run.name} failed ({why})\n" in capsys.readouterr().err
    assert all(o.status == "ok" for o in s.outcomes) and sum(o.reused for o in s.outcomes) == (target == "inconsistent")


def test_an_untouched_run_is_reused_and_drawn(tmp_path):
    sweep(tmp_path, FakeBackend(), c=cfg(CONCURRENCY_LEVELS=[1], N_REPEAT=1))
    run = next((tmp_path / "n_clients").glob("*-*"))
    assert rundirs.run_outcome(run) == ("ok", "")
    b = FakeBackend()
    s, logs = sweep(tmp_path, b, c=cfg(CONCURRENCY_LEVELS=[1], N_REPEAT=1))
    assert b.calls == [] and s.outcomes[0].reused and not any("running it again" in line for line in logs)


# ---------------------------------------------------------------- a protocol name that is no protocol

def test_a_typo_in_systems_is_refused_before_anything_and_sweep_json_stays(tmp_path, monkeypatch, capsys):
    """Issue 29, finding 3: SYSTEMS = ['dast', 'janis'] was "not built" and the figure drawn without it, exit 0;
    with only the typo sweep.json was rewritten with zero points."""
    b = FakeBackend(modes=("dast", "janus"))
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast']\nN_REPEAT = 1\nDURATION_S = 3\nWARMUP_S = 1\nCOOLDOWN_S = 0.5\n"
                       "CONCURRENCY_LEVELS = [1]\n")
    assert runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res")[0] == 0
    manifest = (tmp_path / "res" / "n_clients" / "sweep.json").read_text()
    calls = list(b.calls)
    capsys.readouterr()
    for systems in ("['dast', 'janis']", "['janis']"):
        cfgfile.write_text(cfgfile.read_text().replace("SYSTEMS = ['dast']", f"SYSTEMS = {systems}"))
        assert runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res") == (2, None)
        err = capsys.readouterr().err
        assert err.splitlines() == ["experiments/exp1_n_clients.py: error: SYSTEMS item 'janis': not a protocol (did "
                                    "you mean janus?); protocols: dast, janus, tapir, slog"]
        assert b.calls == calls and (tmp_path / "res" / "n_clients" / "sweep.json").read_text() == manifest
        cfgfile.write_text(cfgfile.read_text().replace(f"SYSTEMS = {systems}", "SYSTEMS = ['dast']"))


def test_a_real_protocol_not_built_is_skipped_and_none_built_is_nothing_to_run(tmp_path, monkeypatch, capsys):
    b = FakeBackend(modes=("dast",))
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast', 'janus']\nN_REPEAT = 1\nDURATION_S = 3\nWARMUP_S = 1\nCOOLDOWN_S = 0.5\n"
                       "CONCURRENCY_LEVELS = [1]\n")
    assert runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res")[0] == 0     # as before: janus skipped
    assert "skipping janus: not built (txn-server --list-modes lists: dast)" in capsys.readouterr().out
    manifest = (tmp_path / "res" / "n_clients" / "sweep.json").read_text()
    assert json.loads(manifest)["systems"] == {"dast": "run", "janus": "not built"}
    cfgfile.write_text(cfgfile.read_text().replace("['dast', 'janus']", "['janus', 'slog']"))
    assert runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res") == (2, None)
    assert capsys.readouterr().err.splitlines() == [
        "experiments/exp1_n_clients.py: error: nothing to run: no protocol of SYSTEMS (janus, slog) is built "
        "(txn-server --list-modes lists: dast); `make build` builds the engine"]
    assert (tmp_path / "res" / "n_clients" / "sweep.json").read_text() == manifest and len(b.calls) == 1


def test_a_typo_in_a_protocol_name_on_the_command_line_is_refused(capsys):
    from testbed.cli import run as cli_run
    for backend in ("local", "swarm"):   # before a swarm job would be handed to the driver
        assert cli_run.main(["--mode", "janis", "--backend", backend]) == 2
        assert capsys.readouterr().err.splitlines() == [
            "run_local: error: mode='janis': not a protocol (did you mean janus?); protocols: dast, janus, tapir, slog"]


def test_a_typo_through_the_command_line_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from testbed.core import lock
    monkeypatch.setenv(lock.ENV_DIR, str(tmp_path / "locks"))
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast', 'janis']\n")
    monkeypatch.chdir(tmp_path)
    a = argparse.Namespace(backend="local", out=str(tmp_path / "res"), wait=False, config=str(cfgfile), quick=True,
                           fresh=False, seed=None, repeats=None)
    assert runner.run_experiments(["n_clients", "tpca"], a, [], "run_experiments.py") == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == ["experiments/exp1_n_clients.py: error: SYSTEMS item 'janis': not a protocol (did you "
                                "mean janus?); protocols: dast, janus, tapir, slog"]
    assert "figure" not in out and not (tmp_path / "res" / "claims.md").exists()


def test_a_run_folder_is_never_shared_by_two_runs_of_one_second(tmp_path, monkeypatch):
    """Run ids are the second and 4 random hex digits: when the digits repeat within a second, the second run gets
    a folder of its own (it used to write into the first one's)."""
    from testbed.core import runtypes
    digits = iter(["abcd", "abcd", "abcd", "ef01"])
    monkeypatch.setattr(runtypes.secrets, "token_hex", lambda n: next(digits))
    monkeypatch.setattr(runtypes.time, "strftime", lambda fmt: "20261126-120000")
    first, second = new_run_dir(tmp_path / "x"), new_run_dir(tmp_path / "x")
    assert first.name == "20261126-120000-abcd" and second.name == "20261126-120000-ef01"
    assert first.is_dir() and second.is_dir()
