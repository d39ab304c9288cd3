"""LocalBackend against the Python fake binaries (tests/python/fake_txn.py): lifecycle, errors, cleanup."""
import hashlib
import json

import pytest

from testbed.analysis import validate
from testbed.core import deploy
from testbed.runs.local import _LIVE, LocalRunner as LocalBackend
from testbed.core.runtypes import RunError

from conftest import procs_mentioning


def small(processes="node"):
    return deploy.build_deployment(regions=2, shards=1, duration=2, warmup=0.5, cooldown=0.5, base_port=24000,
                                   processes=processes)


def backend(fake_bin):
    return LocalBackend(build_dir=fake_bin, ready_timeout_s=20, grace_s=5, margin_s=20, progress=False)


def test_successful_run(fake_bin, tmp_path):
    res = backend(fake_bin).run(small(), "t", out_root=tmp_path / "results")
    run = res.run_dir
    assert run.parent == tmp_path / "results" / "t" and len(run.name.split("-")) == 3
    assert res.consistent and res.check["dumps"] == 6
    assert res.summary["classes"]["IRT"]["p50_ms"] == 20.0 and res.summary["classes"]["CRT"]["p50_ms"] == 150.0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "ok" and meta["shaping"] == "app" and meta["kernel"] and meta["hostname"]
    assert set(meta["processes"]) == {n["name"] for n in small()["nodes"]}
    # which programs ran: their SHA-256, as sha256sum says
    assert meta["engine"] == {p: "sha256:" + hashlib.sha256((fake_bin / p).read_bytes()).hexdigest()
                              for p in ("txn-server", "txn-client")}
    # where the wall time went, phase by phase, in their order
    assert list(meta["phases_s"]) == ["prepare", "servers_ready", "clients", "drain", "collect", "summarize",
                                      "check", "teardown"]
    assert validate.validate_run(run) == []  # as a figure reads it later: meta.json as files.json recorded it
    assert all(v >= 0 for v in meta["phases_s"].values()) and meta["phases_s"]["clients"] > 0
    for f in ("deploy.yml", "config.json", "summary.json", "check.json", "logs/s0.0.0.log", "logs/c1.0.0.log"):
        assert (run / f).is_file(), f
    assert "READY s0.0.0" in (run / "logs/s0.0.0.log").read_text()
    assert procs_mentioning(str(run)) == [] and not _LIVE  # the servers' children were killed too


def test_split_processes_run_one_engine_per_shards_servers_and_one_per_its_clients(fake_bin, tmp_path):
    d = small("split")
    res = backend(fake_bin).run(d, "t", out_root=tmp_path / "results")
    run = res.run_dir
    assert res.consistent and res.check["dumps"] == 6   # every replica of every process dumped
    meta = json.loads((run / "meta.json").read_text())
    assert set(meta["processes"]) == {"srv0.0", "srv1.0", "cli0.0", "cli1.0"}
    argv = meta["processes"]["srv1.0"]["argv"]
    assert argv[argv.index("--process") + 1] == "srv1.0" and "--name" not in argv and "--client-out" not in argv
    assert "READY srv1.0" in (run / "logs/srv1.0.log").read_text()
    assert procs_mentioning(str(run)) == [] and not _LIVE


def test_container_processes_start_their_clients_on_go_and_report_them_done(fake_bin, tmp_path):
    d = small("container")
    res = backend(fake_bin).run(d, "t", out_root=tmp_path / "results")
    run = res.run_dir
    assert res.consistent and res.check["dumps"] == 6
    meta = json.loads((run / "meta.json").read_text())
    assert set(meta["processes"]) == {"shard0.0", "shard1.0"}     # no client process
    argv = meta["processes"]["shard1.0"]["argv"]
    assert argv[argv.index("--client-out") + 1] == str(run / "clients")
    assert (run / "clients" / "c1.0.0.records.csv").is_file() and res.summary["classes"]["IRT"]["p50_ms"] == 20.0
    log = (run / "logs/shard1.0.log").read_text()
    assert "DONE shard1.0" in log   # said once the clients were done: the servers were stopped after it
    assert procs_mentioning(str(run)) == [] and not _LIVE


def test_a_failing_container_process_is_named(fake_bin, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "early:shard1.0")
    with pytest.raises(RunError) as e:
        backend(fake_bin).run(small("container"), "t", out_root=tmp_path)
    assert "shard1.0 exited with code 1" in str(e.value)
    assert procs_mentioning(str(e.value.run_dir)) == [] and not _LIVE


@pytest.mark.parametrize("fail,needle", [("early:s1.0.2", "s1.0.2 exited with code 1"),
                                         ("die:m0", "died mid-run: m0")])
def test_failing_server_is_named_and_everything_stops(fake_bin, tmp_path, monkeypatch, fail, needle):
    monkeypatch.setenv("FAKE_FAIL", fail)
    with pytest.raises(RunError) as e:
        backend(fake_bin).run(small(), "t", out_root=tmp_path)
    assert needle in str(e.value)
    if fail.startswith("early"):
        assert "fake failure of s1.0.2" in str(e.value)  # tail of its log
    run = e.value.run_dir
    assert json.loads((run / "meta.json").read_text())["status"] == "failed"
    assert procs_mentioning(str(run)) == [] and not _LIVE


def test_missing_binary(tmp_path):
    with pytest.raises(RunError, match="missing or not executable"):
        LocalBackend(build_dir=tmp_path, progress=False).run(small(), "t", out_root=tmp_path)


# ---------------------------------------------------------------- the launcher stopped from outside

def launch(fake_bin, out, *extra):
    import subprocess
    import sys
    from conftest import REPO, signals_as_from_a_terminal
    return subprocess.Popen([sys.executable, "run_local.py", "--build-dir", str(fake_bin), "--out", str(out),
                             "--regions", "2", "--shards", "1", "--duration", "30", "--warmup", "1", "--cooldown",
                             "1", "--base-port", "24100", "--processes", "split", *extra], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=signals_as_from_a_terminal)


def clients_started(out, timeout=30):
    import time
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        runs = list(out.glob("local/*/logs/c*.log"))
        if len(runs) == 2:
            time.sleep(0.5)
            return runs[0].parents[1]
        time.sleep(0.1)
    raise AssertionError("the run did not get going")


@pytest.mark.parametrize("sig,code", [("SIGHUP", 129), ("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_to_run_local_stops_the_run_and_leaves_no_process(fake_bin, tmp_path, sig, code):
    import os
    import signal
    import time
    p = launch(fake_bin, tmp_path)
    run = clients_started(tmp_path)
    os.killpg(p.pid, getattr(signal, sig))    # a closed terminal sends SIGHUP to the whole session
    t0 = time.monotonic()
    out, _ = p.communicate(timeout=30)
    assert p.returncode == code and time.monotonic() - t0 < 10, out
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "interrupted" and meta["reason"] == f"interrupted by {sig}"
    assert procs_mentioning(str(run)) == []


def test_a_killed_launcher_takes_its_processes_with_it(fake_bin, tmp_path):
    import os
    import signal
    import time
    p = launch(fake_bin, tmp_path)
    run = clients_started(tmp_path)
    assert len(procs_mentioning(str(run))) >= 4       # 2 server processes (3 replicas and a manager each), 2 client
                                                      # processes (+ the fakes' children)
    os.kill(p.pid, signal.SIGKILL)                    # nothing of ours runs: the kernel's parent-death signal acts
    p.communicate(timeout=10)
    t0 = time.monotonic()
    while procs_mentioning(str(run)) and time.monotonic() - t0 < 5:
        time.sleep(0.1)
    assert procs_mentioning(str(run)) == []
    # the cut-off folder says so, and counts as failed
    from testbed.analysis.rundirs import run_outcome
    assert run_outcome(run) == ("failed", "cut off: its job ended without recording an outcome (killed, or still "
                                          "running)")


def test_engines_an_earlier_launcher_left_are_stopped_before_a_run(fake_bin, tmp_path, capsys):
    import subprocess
    import time
    from testbed.runs.local import orphaned_engines
    # an orphan: a txn-server (the fake) whose deployment file lies under the results folder, parent gone
    orphan_dir = tmp_path / "results" / "old" / "run1"
    orphan_dir.mkdir(parents=True)
    deploy.write_yaml(small(), orphan_dir / "deploy.yml")
    subprocess.Popen(["sh", "-c", f"{fake_bin}/txn-server --config {orphan_dir}/deploy.yml --name s0.0.0 "
                                  f"--out {orphan_dir} > /dev/null 2>&1 &"]).wait()
    t0 = time.monotonic()
    while not orphaned_engines(tmp_path / "results") and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert len(orphaned_engines(tmp_path / "results")) == 1
    b = LocalBackend(build_dir=fake_bin, ready_timeout_s=20, grace_s=5, margin_s=20, progress=True)
    res = b.run(small(), "t", out_root=tmp_path / "results")
    assert res.ok and orphaned_engines(tmp_path / "results") == []
    assert "stopped 1 engine process(es) an earlier run left behind" in capsys.readouterr().err
