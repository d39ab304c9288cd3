"""The artifact preset (testbed/core/presets.py, run_experiments.py --preset) and the plan of a job (--plan,
testbed/sweeps/runner.py plan_job / render_plan): the preset is the artifact's exp_config.py in this testbed's knob
names and validates, the plan counts its runs as the artifact's sweeps multiply out and prices them with the
runner's own per-run time, an unknown preset is one line, and a plan starts nothing."""
import argparse
import re

import pandas as pd
import pytest

from testbed.cli import experiments as cli
from testbed.core import experiments, lock, presets
from testbed.core.config import load_exp_config
from testbed.sweeps import mainjob, runner

# The artifact's exp_config.py (reference/dast-artifact.md 1.3), written out again here, apart from the preset.
ARTIFACT = dict(CONCURRENCY_LEVELS=[1, 5, 10, 15, 20, 25, 30, 40, 50], CLIENT_PROCESS_PER_SHARD=[1, 2, 3],
                N_REPEAT=5, CRT_RATIOS=[10, 20, 30, 40, 50, 60, 70, 80, 90], zipfs=[0.5, 0.6, 0.7, 0.8, 0.9, 1],
                SCALABILITY_N_REGIONS=[3, 5], ROUBUST_RTT_VAR=[10, 20, 30, 40, 50, 60, 70, 80], trial_s=15,
                N_REGIONS=4, MAX_REGIONS=6, N_SHARD_PER_REGION=2)
ROBUST_HERE = [x for x in ARTIFACT["ROUBUST_RTT_VAR"] if x != 80]   # 80 ms is refused here (the preset's doc)
SYSTEMS = ["alpha", "ordered"]   # the fake registry's (conftest.FAKE_REGISTRY): ordered needs 3 regions
# exp 5's X of 40..70 ms clips more than 2 % of delay samples at 0: config.py warns, as it should
pytestmark = pytest.mark.filterwarnings("ignore:ROBUST_RTT_VAR item=")


def config_file(tmp_path, text=""):
    path = tmp_path / "exp_config.py"
    path.write_text(f"SYSTEMS = {SYSTEMS!r}\n" + text)
    return path


def test_the_preset_is_the_artifacts_exp_config_and_validates():
    knobs = presets.get("artifact").knobs
    cfg = load_exp_config(knobs)                # on its own, as an exp_config.py would be
    assert cfg.concurrency_levels == tuple(ARTIFACT["CONCURRENCY_LEVELS"])
    assert cfg.client_process_per_shard == tuple(ARTIFACT["CLIENT_PROCESS_PER_SHARD"])
    assert cfg.n_repeat == ARTIFACT["N_REPEAT"] and cfg.duration_s == ARTIFACT["trial_s"]
    assert cfg.crt_ratios == tuple(ARTIFACT["CRT_RATIOS"]) and cfg.zipfs == tuple(ARTIFACT["zipfs"])
    assert cfg.scalability_n_regions == tuple(ARTIFACT["SCALABILITY_N_REGIONS"])
    assert cfg.robust_rtt_var == tuple(ROBUST_HERE)
    assert (cfg.regions, cfg.max_regions, cfg.shards_per_region) == (ARTIFACT["N_REGIONS"], ARTIFACT["MAX_REGIONS"],
                                                                     ARTIFACT["N_SHARD_PER_REGION"])
    assert cfg.warmup_s + cfg.cooldown_s < cfg.duration_s
    # why exp 5 stops at 70: the artifact's 80 ms (per direction 56.6 > the 50 ms one-way delay) is refused here
    with pytest.raises(ValueError, match=r"^ROBUST_RTT_VAR item=80: must be in \[0, 70\.7\]"):
        load_exp_config({**knobs, "ROBUST_RTT_VAR": ARTIFACT["ROUBUST_RTT_VAR"]})


def test_the_preset_lies_over_the_file_and_is_validated_with_it(tmp_path, fake_registry):
    path = config_file(tmp_path, "N_REPEAT = 2\nCONCURRENCY_LEVELS = [1]\nFIXED_CONCURRENCY = 7\nSEED = 9\n")
    base = load_exp_config(path)
    cfg = presets.apply(base, "artifact")
    assert cfg.n_repeat == 5 and cfg.concurrency_levels == tuple(ARTIFACT["CONCURRENCY_LEVELS"])   # the preset's
    assert cfg.fixed_concurrency == 7 and cfg.seed == 9 and cfg.systems == tuple(SYSTEMS)          # the file's
    assert presets.apply(base, None) is base
    changed = {k: (old, new) for k, old, new in presets.changes(base, "artifact")}
    assert changed["N_REPEAT"] == (2, 5) and "SHARDS_PER_REGION" not in changed   # the file's 2 already
    # the flags lie over the preset: --repeats wins
    exp1 = experiments.get("n_clients")
    assert runner.sweep_config(exp1, path, "artifact", repeats=1).n_repeat == 1
    # a file whose other settings do not fit the preset's is refused in one line naming the knob
    bad = config_file(tmp_path, "REGIONS = 5\nFAULT_REGION = 5\n")
    with pytest.raises(ValueError, match=r"^FAULT_REGION=5: must be <= REGIONS=4$"):
        presets.apply(load_exp_config(bad), "artifact")


def test_an_unknown_preset_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(mainjob, "choose", lambda *a, **k: pytest.fail("a job was started"))
    for argv in (["--preset", "artifacts"], ["--preset", "artifacts", "--plan", "--all"]):
        assert cli.main(argv + ["--config", str(config_file(tmp_path)), "--out", str(tmp_path / "res")]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err.splitlines() == ["run_experiments: error: --preset 'artifacts': must be one of artifact, smoke"]
    with pytest.raises(ValueError, match=r"^--preset 'x': must be one of artifact, smoke$"):
        presets.get("x")
    assert not (tmp_path / "res").exists()


def independent_count(n_systems: int, fault_kinds: int) -> dict:
    """Runs per experiment, multiplied out from the artifact's sweeps above (every protocol in every experiment)."""
    r = ARTIFACT["N_REPEAT"]
    exp1_points = len(ARTIFACT["CLIENT_PROCESS_PER_SHARD"]) * len(ARTIFACT["CONCURRENCY_LEVELS"])
    return {"n_clients": n_systems * exp1_points * r,
            "crt_ratio": n_systems * len(ARTIFACT["CRT_RATIOS"]) * r,
            "tpca": n_systems * len(ARTIFACT["zipfs"]) * r,
            "scalability": n_systems * len(ARTIFACT["SCALABILITY_N_REGIONS"]) * r,
            "robust": n_systems * len(ROBUST_HERE) * r,
            "faults": n_systems * fault_kinds * r}


def plan_rows(out: str) -> dict:
    """experiment name -> (points, repeats, runs, per-run seconds, estimate) from the printed plan."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"exp\d (\w+)\s+.*?\s(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+) s\s+([\d:]+)$", line)
        if m:
            rows[m[1]] = (int(m[2]), int(m[3]), int(m[4]), float(m[5]), m[6])
    return rows


def test_the_plan_counts_the_artifacts_runs(tmp_path, fake_registry, monkeypatch, capsys):
    monkeypatch.setattr(mainjob, "choose", lambda *a, **k: pytest.fail("a job was started"))
    path = config_file(tmp_path)
    assert cli.main(["--preset", "artifact", "--all", "--plan", "--config", str(path),
                     "--out", str(tmp_path / "res")]) == 0
    out = capsys.readouterr().out
    want = independent_count(len(SYSTEMS), len(load_exp_config(path).fault_kinds))
    rows = plan_rows(out)
    assert {name: row[2] for name, row in rows.items()} == want
    assert rows["n_clients"][:2] == (3 * 9, 5) and rows["robust"][:2] == (7, 5)
    total = sum(want.values())
    assert re.search(rf"^total\s+{total}\s", out, re.M) and f"{total} runs, about " in out
    assert "preset artifact: " in out and "  N_REPEAT = 5  (the file: 3)" in out
    # the plan is what the sweeps would run: the same tasks as plan() gives for each experiment
    plans = runner.plan_job(list(experiments.EXPERIMENTS), path, "artifact", log=lambda *_: None)
    assert {pl.experiment.name: pl.runs for pl in plans} == want


def test_the_estimate_is_the_runners_per_run_time(tmp_path, fake_registry, monkeypatch, capsys):
    monkeypatch.setattr(runner, "EST_STARTUP_S", 100)
    path = config_file(tmp_path)
    plans = runner.plan_job(["n_clients", "faults"], path, "artifact", log=lambda *_: None)
    for pl in plans:
        assert pl.run_s == runner.run_length(pl.sweep, pl.cfg) + 100 == runner.run_estimate(pl.sweep, pl.cfg)
        # the runner's own ETA before any run is timed says the same
        assert runner.Progress(pl.runs, runner.run_estimate(pl.sweep, pl.cfg), tty=False).eta() == pl.estimate_s
    cfg = load_exp_config(path)
    exp6_length = cfg.fault_at_s + cfg.fault_for_s + cfg.fault_after_s
    assert [pl.run_s for pl in plans] == [ARTIFACT["trial_s"] + 100, exp6_length + 100]
    a = argparse.Namespace(config=str(path), seed=None, quick=False, repeats=None, backend="local", out=str(tmp_path),
                           wait=False, fresh=False, preset="artifact", plan=True)
    assert runner.run_experiments(["n_clients", "faults"], a, [], "run_experiments.py") == 0
    rows = plan_rows(capsys.readouterr().out)
    n1, n6 = rows["n_clients"][2], rows["faults"][2]
    assert rows["n_clients"][3] == 115 and rows["faults"][3] == exp6_length + 100
    assert rows["n_clients"][4] == runner._hms(n1 * 115) and rows["faults"][4] == runner._hms(n6 * (exp6_length + 100))


def test_plan_starts_nothing(tmp_path, fake_registry, monkeypatch, capsys):
    def started(*a, **k):
        pytest.fail("--plan started something")
    for target, name in ((mainjob, "choose"), (mainjob, "run_in_driver"), (runner, "open_backend"), (runner, "job"),
                         (runner, "run_sweep")):
        monkeypatch.setattr(target, name, started)
    monkeypatch.setenv(lock.ENV_DIR, str(tmp_path / "locks"))
    res = tmp_path / "res"
    for backend in ("auto", "local", "swarm"):
        assert cli.main(["--preset", "artifact", "--only", "exp1,exp4", "--plan", "--backend", backend,
                         "--config", str(config_file(tmp_path)), "--out", str(res)]) == 0
        assert "exp4 scalability" in capsys.readouterr().out
    assert not res.exists() and not (tmp_path / "locks").exists()
    # a plan that would be refused is one line and exit 2, still starting nothing
    assert cli.main(["--plan", "--config", str(config_file(tmp_path, "N_REPEAT = 0\n")), "--out", str(res)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == ["experiments/exp1_n_clients.py: error: N_REPEAT=0: must be an integer "
                                              "in [1, 100]"]


def test_the_preset_reaches_the_job_and_the_bring_up(tmp_path, fake_registry, monkeypatch, capsys):
    seen, run_in_driver = {}, mainjob.run_in_driver
    monkeypatch.setattr(mainjob, "choose", lambda kind: "swarm-via-driver")
    monkeypatch.setattr(mainjob, "run_in_driver", lambda script, argv, config, wait=False, preset=None:
                        seen.update(argv=argv, preset=preset) or 0)
    path = config_file(tmp_path)
    argv = ["--preset", "artifact", "--config", str(path)]
    assert cli.main(argv) == 0
    assert seen == {"argv": argv, "preset": "artifact"}       # the job in the driver gets --preset too
    assert "preset artifact: " in capsys.readouterr().out       # and the plan was printed before anything started
    # the containers brought up are the preset's: a file that only the preset makes invalid is refused before
    monkeypatch.setattr(mainjob, "load_hosts", lambda: pytest.fail("hosts read"))
    bad = config_file(tmp_path, "REGIONS = 5\nFAULT_REGION = 5\n")
    with pytest.raises(ValueError, match="FAULT_REGION=5: must be <= REGIONS=4"):
        run_in_driver("run_experiments.py", [], bad, preset="artifact")


def test_a_sweep_under_the_preset_runs_its_points(tmp_path, monkeypatch, capsys):
    from test_runner import FakeBackend
    b = FakeBackend()
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    monkeypatch.setenv(lock.ENV_DIR, str(tmp_path / "locks"))
    path = tmp_path / "exp_config.py"
    path.write_text("SYSTEMS = ['dast']\n")
    # --quick thins the preset's sweep (3 of its 9 concurrencies, its first process count, one repeat)
    assert cli.main(["--preset", "artifact", "--quick", "--backend", "local", "--config", str(path),
                     "--out", str(tmp_path / "res")]) == 0
    out = capsys.readouterr().out
    assert "== Exp 1: load (clients per region): experiments/exp1_n_clients.py --preset artifact --quick" in out
    assert sorted(c[1] for c in b.calls) == [1, 20, 50]
    df = pd.read_parquet(tmp_path / "res" / "runs.parquet")
    assert set(df["knobs.regions"]) == {4} and set(df["knobs.shards"]) == {2} and (df.status == "ok").all()


def test_smoke_runs_every_experiment_once_on_the_files_deployment(tmp_path, fake_registry):
    """The smoke preset keeps the file's deployment (regions, the regions deployed, shards: on the swarm, the
    containers `make main` brought up), takes each sweep's last point, exp 4's first and last region counts (up then
    down on one backend, as `make main-all`), exp 6's partition and pause; every experiment plans its runs."""
    path = config_file(tmp_path, "SCALABILITY_N_REGIONS = [3, 5, 7]\nCRT_RATIOS = [10, 30, 60]\n"
                                 "FAULT_KINDS = ['none', 'pause', 'clock', 'partition']\n")
    base = load_exp_config(path)
    cfg = presets.apply(base, "smoke")
    assert (cfg.regions, cfg.max_regions, cfg.shards_per_region) == (base.regions, base.max_regions,
                                                                     base.shards_per_region)
    assert cfg.concurrency_levels == base.concurrency_levels[-1:] and cfg.crt_ratios == (60,)
    assert cfg.zipfs == base.zipfs[-1:] and cfg.robust_rtt_var == base.robust_rtt_var[-1:]
    assert cfg.scalability_n_regions == (3, 7) and cfg.fault_kinds == ("pause", "partition")
    assert cfg.n_repeat == 1 and cfg.duration_s < base.duration_s
    plans = runner.plan_job(list(experiments.EXPERIMENTS), path, "smoke", log=lambda *_: None)
    points = {pl.experiment.name: pl.points for pl in plans}
    assert points == {"n_clients": 1, "crt_ratio": 1, "tpca": 1, "scalability": 2, "robust": 1, "faults": 2}
    # one region count configured: exp 4 runs it alone
    one = presets.apply(load_exp_config(config_file(tmp_path, "SCALABILITY_N_REGIONS = [3]\n")), "smoke")
    assert one.scalability_n_regions == (3,)
