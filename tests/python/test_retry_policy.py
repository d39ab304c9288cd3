"""How an aborted attempt is retried (issue 51; docs/workloads.md, "Retries"): at once, the artifact's way and the
default, or after a randomized exponential backoff as TAPIR's authors' benchmark clients do. The knobs, their
checks, the deployment fields and the sweep keys they become, and the figure's caption."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from testbed.analysis import figures
from testbed.cli import run as runcli
from testbed.core import config, deploy
from testbed.sweeps import runner

ENGINE = Path(os.environ.get("TXN_SERVER") or REPO / "build" / "txn-server")


def test_retries_go_at_once_by_default_and_the_file_says_nothing_of_a_backoff():
    d = deploy.build_deployment()
    assert "retry_backoff_ms" not in d["client"] and "retry_backoff_max_ms" not in d["client"]
    assert config.load_exp_config(REPO / "exp_config.py").retry_backoff_ms == 0
    d = deploy.build_deployment(retry_backoff=5, retry_backoff_max=800)
    assert (d["client"]["retry_backoff_ms"], d["client"]["retry_backoff_max_ms"]) == (5.0, 800.0)


@pytest.mark.parametrize("knobs, message", [
    (dict(retry_backoff=-1), "retry_backoff=-1: must be a number in [0, 60000]"),
    (dict(retry_backoff=10, retry_backoff_max=5), "retry_backoff_max=5: must be >= retry_backoff=10 (ms)"),
    (dict(retry_backoff_max=700000), "retry_backoff_max=700000: must be a number in [0, 600000]"),
])
def test_bad_retry_knobs_are_one_line(knobs, message):
    with pytest.raises(ValueError) as e:
        deploy.validate(**knobs)
    assert str(e.value) == message


def test_exp_config_checks_its_retry_settings():
    with pytest.raises(ValueError, match=r"^RETRY_BACKOFF_MAX_MS=1: must be >= RETRY_BACKOFF_MS=5$"):
        config.load_exp_config({"RETRY_BACKOFF_MS": 5, "RETRY_BACKOFF_MAX_MS": 1})
    with pytest.raises(ValueError, match=r"^RETRY_BACKOFF_MS=-2: must be a number in \[0, 60000\]$"):
        config.load_exp_config({"RETRY_BACKOFF_MS": -2})


def test_run_local_refuses_a_cap_without_a_backoff(capsys):
    assert runcli.main(["--retry-backoff-max", "50"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("run_local: error: --retry-backoff-max caps a retry backoff: give --retry-backoff too")
    assert len(err.splitlines()) == 1


def test_a_sweep_points_key_is_unchanged_while_retries_go_at_once():
    key = runner.point_key("n_clients", "tapir", {}, "local", "app")
    assert runner.point_key("n_clients", "tapir", {"retry_backoff": 0, "retry_backoff_max": 50}, "local", "app") == key
    backoff = runner.point_key("n_clients", "tapir", {"retry_backoff": 2}, "local", "app")
    assert backoff != key
    assert runner.point_key("n_clients", "tapir", {"retry_backoff": 2, "retry_backoff_max": 50}, "local", "app") \
        != backoff


@pytest.mark.skipif(not ENGINE.exists(), reason="txn-server not built")
def test_the_engine_reads_and_checks_the_retry_fields(tmp_path):
    d = deploy.build_deployment(retry_backoff=5, retry_backoff_max=100)
    p = deploy.write_yaml(d, tmp_path / "deploy.yml")
    r = subprocess.run([str(ENGINE), "--config", str(p), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d["client"]["retry_backoff_max_ms"] = 1.0
    deploy.write_yaml(d, p)
    r = subprocess.run([str(ENGINE), "--config", str(p), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "client.retry_backoff_max_ms: 1 out of range [client.retry_backoff_ms, 600000]" in r.stderr, r.stderr


def test_the_caption_says_how_aborts_were_retried(tmp_path):
    from test_figures import make_run
    make_run(tmp_path, x=2, key="a")
    cap = figures.caption(figures.load_runs(tmp_path / "n_clients", 99), None, "TPC-C", 1, 99)
    assert "aborted attempts retried at once (the artifact's)" in cap
    make_run(tmp_path, system="tapir", x=2, key="b", deploy_extra=dict(retry_backoff=5, retry_backoff_max=320))
    cap = figures.caption(figures.load_runs(tmp_path / "n_clients", 99), None, "TPC-C", 1, 99)
    assert "aborted attempts retried after a randomized exponential backoff from 5 ms, at most 320 ms" in cap, cap
    assert "aborted attempts retried at once (the artifact's)" in cap
