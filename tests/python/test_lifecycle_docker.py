"""The run lifecycle under faults, on a one-node swarm of the tests' own (issue 11): a container killed mid-run,
the driver stopped mid-run, Ctrl-C / SIGTERM / SIGHUP on the host job and Ctrl-C on `docker exec -it`, a killed wrapper
shell, leftovers of an earlier run, a second job on a busy deployment. Each test bounds the time until the job
ended, checks what was recorded, that nothing is left running in any container, and (where the fault broke the
deployment) that the next bring-up repairs it and its run is CONSISTENT."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from testbed.cluster import swarm
from testbed.core.config import load_exp_config

from conftest import REPO, docker_client, signals_as_from_a_terminal
from one_node_deployment import LOCAL, OneNodeDeployment, finish, meta_of

DOCKER = docker_client()
pytestmark = [pytest.mark.docker, pytest.mark.skipif(
    DOCKER is None, reason="no Docker daemon answers at DOCKER_HOST or unix:///var/run/docker.sock")]

D = OneNodeDeployment("tstlife", 232)
DEPLOYMENT, DRIVER, SHARDS, KNOBS, CFG_FILE, OUT = D.name, D.driver, D.shards, D.knobs, D.cfg_file, D.out
in_container, engines_left, host_run, wait_clients_running, by_hand = (
    D.in_container, D.engines_left, D.host_run, D.wait_clients_running, D.by_hand)


@pytest.fixture(scope="module")
def dep(image):
    yield from D.brought_up()


def next_run_is_consistent(dep, name: str) -> None:
    """Bring-up repairs whatever the fault broke; a run on it is CONSISTENT and leaves nothing behind."""
    swarm.up(dep, LOCAL, log=print)
    rc, out, _ = finish(host_run(name, duration=5), within=120)
    assert rc == 0 and "checker: CONSISTENT" in out, out
    assert engines_left() == {}


def test_a_shard_container_killed_mid_run_takes_its_majority_the_run_fails_saying_so_and_keeps_the_rest(dep):
    """In the default layout a shard's container holds its 3 replicas (and its clients): killed, it is a loss
    (docs/nemesis.md, "Losses") of all of them at once, so the run fails at once naming the shard and the container
    Docker says exited, and still stops the live processes, copies what they recorded and checks it; nothing is left
    running, and the next bring-up repairs the deployment. (A follower's container of its own killed, which the run
    rides out: tests/python/test_unannounced_docker.py.)"""
    p = host_run("kill")
    run = wait_clients_running("kill", p=p)
    DOCKER.containers.get(SHARDS[-1]).kill()
    rc, out, took = finish(p, within=60)
    print(f"{out}\nended {took:.1f}s after the kill")
    assert rc == 1 and took < 30, out
    meta = meta_of(run)
    assert meta["status"] == "failed", meta
    assert meta["reason"].startswith("shard 1 lost its majority (0 of 3 replicas live: s1.0.0, s1.0.1, s1.0.2 lost at "
                                     "t="), meta["reason"]   # one loss: their process, with its container
    assert meta["reason"].count(f"(its container is gone: {SHARDS[-1]} exited (137) at ") == 1, meta["reason"]
    assert "what the live processes recorded checks " in meta["reason"], meta["reason"]
    lost = [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines() if '"lost"' in x]
    assert [e["process"] for e in lost] == ["shard1.0"] and "s1.0.2" in lost[0]["nodes"], lost
    # what the live container's processes recorded is there, summarized and checked
    for n in ("s0.0.0", "s0.0.1", "s0.0.2"):
        assert (run / "servers" / f"{n}.state.json").is_file(), n
    assert (run / "clients" / "c0.0.0.records.csv").stat().st_size > 0
    assert json.loads((run / "check.json").read_text())["verdict"] and (run / "summary.json").is_file()
    assert engines_left() == {}
    next_run_is_consistent(dep, "kill-after")


def test_driver_stopped_mid_run_is_named_and_its_processes_stopped(dep):
    p = host_run("drv")
    run = wait_clients_running("drv", p=p)
    DOCKER.containers.get(DRIVER).stop(timeout=2)
    rc, out, took = finish(p, within=40)
    assert rc != 0 and took < 20, out
    assert f"the driver container {DRIVER} exited" in out and "stopped engine processes the job left behind" in out
    assert f"its run {run.relative_to(REPO)} recorded as failed" in out, out   # by the host: the job could not
    meta = meta_of(run)
    assert meta["status"] == "failed" and meta["reason"].startswith(f"cut off: the driver container {DRIVER} exited")
    from testbed.analysis.rundirs import run_outcome
    assert run_outcome(run)[0] == "failed" and "cut off" in run_outcome(run)[1]
    assert engines_left() == {}
    next_run_is_consistent(dep, "drv-after")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signal_on_the_host_job_stops_everything(dep, sig, code):
    p = host_run(f"sig{int(sig)}")
    run = wait_clients_running(f"sig{int(sig)}", p=p)
    os.killpg(p.pid, sig)             # as the terminal does: the whole foreground process group
    rc, out, took = finish(p, within=30)
    # within seconds: no salvage of the records (a stop asked for is not a failure to keep them through, which cost a
    # SIGTERM per client process in its container before: 10.1 s once in CI), teardown and the copy of their files
    assert rc == code and took < 15, out
    assert "keeping what every live process recorded" not in out, out
    meta = meta_of(run)
    assert meta["status"] == "interrupted" and meta["reason"].startswith(f"interrupted by {sig.name}"), meta
    assert engines_left() == {}


def test_ctrl_c_on_docker_exec_it_stops_the_run_in_the_driver(dep):
    import pty
    import threading
    terminal, tty = pty.openpty()
    p = subprocess.Popen(by_hand("dexec", tty=True), stdin=tty, stdout=tty, stderr=tty, start_new_session=True)
    os.close(tty)
    shown = []

    def read():                       # the terminal shows what the job prints (and it never blocks on a full pty)
        while True:
            try:
                shown.append(os.read(terminal, 4096))
            except OSError:
                return
    threading.Thread(target=read, daemon=True).start()
    run = wait_clients_running("dexec", p=p)
    os.write(terminal, b"\x03")       # Ctrl-C typed: the container's terminal sends the job SIGINT
    assert p.wait(timeout=30) == 130, b"".join(shown).decode(errors="replace")
    os.close(terminal)
    meta = meta_of(run)
    assert meta["status"] == "interrupted" and meta["reason"].startswith("interrupted by SIGINT"), meta
    assert engines_left() == {}


def test_a_second_job_is_refused_naming_the_holder_and_waits_with_wait(dep):
    first = host_run("hold", duration=8)
    wait_clients_running("hold", p=first)
    rc, out, took = finish(host_run("second", duration=3), within=30)
    assert rc == 2 and took < 10 and "is busy" in out and "run_local.py" in out and "pid" in out, out
    waiting = host_run("waited", "--wait", duration=3)
    rc1, out1, _ = finish(first, within=60)
    rc2, out2, _ = finish(waiting, within=120)
    assert rc1 == 0 and rc2 == 0 and "waiting for" in out2 and "checker: CONSISTENT" in out2, out2
    assert engines_left() == {}


def test_a_killed_wrapper_shell_fails_the_run_naming_it(dep):
    p = host_run("wrap")
    run = wait_clients_running("wrap", p=p)
    in_container(SHARDS[0], "kill -9 $(cat /tmp/edge-run/*/logs/shard0.0.wpid)")   # the container's server process
    rc, out, took = finish(p, within=30)
    assert rc == 1 and took < 10, out
    assert meta_of(run)["reason"].startswith(f"shard0.0 in {SHARDS[0]}: its wrapper shell is gone"), meta_of(run)
    assert engines_left() == {}


def test_leftovers_of_an_earlier_run_are_stopped_and_said(dep):
    # an engine process no run owns (its job died without cleaning up): `txn-server` that just sleeps
    in_container(SHARDS[0], "cp /bin/sleep /tmp/txn-server; mkdir -p /tmp/edge-run/old-run; "
                            "setsid /tmp/txn-server 300 > /dev/null 2>&1 &")
    assert in_container(SHARDS[0], "pgrep -x txn-server").strip()
    rc, out, _ = finish(host_run("clean", duration=4), within=120)
    assert rc == 0 and "checker: CONSISTENT" in out, out
    assert f"{SHARDS[0]}: stopped 1 engine process(es) an earlier run left behind" in out, out
    assert engines_left() == {}


def test_sweep_on_the_host_shows_progress_and_ctrl_c_is_not_reused(dep):
    p = subprocess.Popen([sys.executable, "run_experiments.py", "--config", str(CFG_FILE), "--out", str(OUT)],
                         cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True, preexec_fn=signals_as_from_a_terminal)
    run = wait_clients_running("n_clients", timeout=120, p=p)
    time.sleep(5)                     # a progress line of the run itself
    os.killpg(p.pid, signal.SIGINT)
    t0 = time.monotonic()             # the run stops, is recorded and leaves no engine process within 10 s ...
    while (meta_of(run)["status"] == "running" or engines_left(jobs=False)) and time.monotonic() - t0 < 20:
        time.sleep(0.2)
    assert time.monotonic() - t0 < 10 and meta_of(run)["status"] == "interrupted"
    rc, out, _ = finish(p, within=60)  # ... then the job draws what it has (its python in the driver starts
    assert rc == 130, out              # matplotlib anew: seconds on a loaded machine) and ends with 130
    assert engines_left() == {}
    assert "[1/1] dast" in out and "ETA" in out and "s elapsed" in out     # progress comes through the pipe
    rc, out, _ = finish(subprocess.Popen([sys.executable, "run_experiments.py", "--config", str(CFG_FILE), "--out",
                                          str(OUT)], cwd=REPO, text=True, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT), within=240)
    assert rc == 0 and "reused ok run" not in out and "1 of 1 runs done (0 reused, 0 failed)" in out, out


def test_a_changed_subnet_with_the_deployment_up_says_tear_down_first_and_changes_nothing(dep):
    before = sorted((c.name, c.id) for c in DOCKER.containers.list(filters={"label": f"{swarm.LABEL}={DEPLOYMENT}"}))
    changed = load_exp_config({**KNOBS, "SUBNET": "10.233.0.0/16", "DRIVER_IP": "10.233.0.240"})
    with pytest.raises(swarm.SwarmError) as e:
        swarm.up(changed, LOCAL, log=print)
    msg = str(e.value)
    assert msg.startswith(f"SUBNET changed from 10.232.0.0/16 to 10.233.0.0/16 while deployment {DEPLOYMENT} is up")
    assert "make down" in msg and "\n" not in msg
    after = sorted((c.name, c.id) for c in DOCKER.containers.list(filters={"label": f"{swarm.LABEL}={DEPLOYMENT}"}))
    assert after == before and len(DOCKER.networks.list(names=["tstlife_net"])) == 1
