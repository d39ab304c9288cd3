"""A container that goes away mid-run is a loss, not a failed run (testbed/runs/swarm_backend.py; docs/nemesis.md,
"Losses"): once the run's servers are READY, a container whose status watcher ends or falls silent and that Docker
says is gone (or, on a host the driver's Docker cannot see, that takes no new connection) has every process of the run
in it seen exited with CONTAINER_GONE, how it went said in one line, and is watched, signalled and copied no more,
while the other containers go on. A container that is alive by Docker's word still fails the run. The driver's SSH is
the fake world of tests/python/test_swarm_run_scope.py; Docker's answers are given here;
tests/python/test_unannounced_docker.py plays it with real containers."""
import re

import pytest
import yaml

from testbed.core.runtypes import RunError
from testbed.runs import lifecycle, swarm_backend as sb

from test_swarm_run_scope import STATE, World, fake_ssh, ip

EXITED = "exited (137) at 2026-11-29T10:00:01"


@pytest.fixture
def world(monkeypatch):
    w = World()
    monkeypatch.setattr(sb, "Ssh", fake_ssh(w))
    return w


def docker_says(monkeypatch, *answers):
    """docker_state answers these, one per call, the last one for good; returns the names it was asked about."""
    asked, left = [], list(answers)

    def state(name, since_unix=0.0, socket_path=None, network=None):
        asked.append(name)
        return left.pop(0) if len(left) > 1 else left[0]
    monkeypatch.setattr(sb, "docker_state", state)
    return asked


def running(runner: sb.SwarmRunner, tmp_path, regions=3):
    """A run past READY in `regions` containers: its status watchers started, a server process in each container
    (its name: srv<region>) and a client process in the first."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    deploy = {"nodes": [{"name": f"n{r}", "host": ip(r)} for r in range(1, regions + 1)], "client": {"duration_s": 5}}
    (run_dir / "deploy.yml").write_text(yaml.safe_dump(deploy))
    runner.prepare(deploy, run_dir / "deploy.yml", run_dir)
    procs = {f"srv{r}": runner.spawn({"name": f"srv{r}", "host": ip(r)}, "server", None, run_dir, "servers", [])
             for r in range(1, regions + 1)}
    procs["cli1"] = runner.spawn({"name": "cli1", "host": ip(1)}, "client", None, run_dir, "clients", [])
    runner._nemesis = Nemesis()
    return run_dir, procs


class Nemesis:
    """The lifecycle's (testbed/runs/nemesis.py), there once every server is READY: from then a loss is recorded."""

    def __init__(self):
        self.lost = set()

    def lost_processes(self):
        return set(self.lost)

    def crashed_processes(self):
        return set()


def end_watcher(runner, world, r):
    """The status watcher of region r's container ends: its channel closes (as when the container is killed)."""
    runner.watches[ip(r)].chan.alive = False


def read(runner):
    runner._last_poll = 0.0
    runner.refresh()


def test_a_container_docker_says_exited_is_lost_and_the_run_goes_on_without_it(tmp_path, world, monkeypatch):
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    run_dir, procs = running(runner, tmp_path)
    asked = docker_says(monkeypatch, EXITED)
    end_watcher(runner, world, 2)
    world.log.clear()
    read(runner)   # no RunError
    assert asked == ["tstscope_r2_s1"]
    assert procs["srv2"].poll() == lifecycle.CONTAINER_GONE and procs["srv1"].poll() is None
    how = procs["srv2"].lost_how()
    assert how == f"its container is gone: tstscope_r2_s1 {EXITED}"
    # what the lifecycle records as the loss's `how`: one line, naming the container and what Docker says
    assert lifecycle.killed_from_outside(procs["srv2"].poll(), how) == how
    assert procs["srv2"].describe_exit() == f"srv2 in tstscope_r2_s1 is lost: {how}"
    assert procs["srv1"].lost_how() is None
    # watched no more (its watcher is not started again), signalled no more, copied no more
    read(runner)
    assert ip(2) not in runner.watches and ("watch" not in {w for i, w in world.log if i == ip(2)})
    runner.signal_all(list(procs.values()), 15)
    procs["srv2"].signal(15)
    assert sorted(i for i, w in world.log if w == "signal") == [ip(1), ip(1), ip(3)]
    runner.collect(run_dir)
    assert sorted(i for i, w in world.log if w == "copy") == [ip(1), ip(3)]
    notes = runner.teardown(run_dir, list(procs.values()))
    assert notes == ["tstscope_r2_s1: not cleaned: it stopped answering (if it still runs, the run's processes there "
                     "may too; `start_containers.py --down` removes them)"]
    assert sorted(i for i, w in world.log if w == "clean") == [ip(1), ip(3)]


def test_a_process_that_exited_before_its_container_went_keeps_its_code(tmp_path, world, monkeypatch):
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    _, procs = running(runner, tmp_path)
    runner.rc["cli1"] = 0    # its clients finished
    docker_says(monkeypatch, "no longer exists")
    end_watcher(runner, world, 1)
    read(runner)
    assert procs["cli1"].poll() == 0 and procs["srv1"].poll() == lifecycle.CONTAINER_GONE
    assert procs["srv1"].lost_how() == "its container is gone: tstscope_r1_s1 no longer exists"


def test_docker_is_asked_again_while_it_has_not_recorded_the_end_yet(tmp_path, world, monkeypatch):
    """A killed container's SSH connection drops a moment before Docker records its end: a first answer of
    `running` is asked again (for GONE_CONFIRM_S) before the container is taken for alive."""
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    _, procs = running(runner, tmp_path)
    asked = docker_says(monkeypatch, "", "", EXITED)
    end_watcher(runner, world, 3)
    read(runner)
    assert len(asked) == 3 and procs["srv3"].poll() == lifecycle.CONTAINER_GONE


@pytest.mark.parametrize("state, said", [
    ("", "although Docker shows it running"),     # its sshd or watcher misbehaves: not taken for dead
    ("is paused", "container tstscope_r2_s1 is paused"),
    ("is running but not attached to the overlay network tstscope_net (disconnected from it; `make up` replaces it)",
     "is running but not attached to the overlay network")])
def test_a_container_alive_by_dockers_word_still_fails_the_run(tmp_path, world, monkeypatch, state, said):
    monkeypatch.setattr(sb, "GONE_CONFIRM_S", 0.2)
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    _, procs = running(runner, tmp_path)
    docker_says(monkeypatch, state)
    end_watcher(runner, world, 2)
    with pytest.raises(RunError, match=said):
        read(runner)
    assert procs["srv2"].poll() is None and runner.lost_containers == {}


def test_of_two_watchers_failed_at_once_the_gone_container_is_lost_and_the_live_one_fails_the_run(tmp_path, world,
                                                                                                    monkeypatch):
    monkeypatch.setattr(sb, "GONE_CONFIRM_S", 0.2)
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    _, procs = running(runner, tmp_path)
    monkeypatch.setattr(sb, "docker_state", lambda name, *a, **k: EXITED if name.endswith("r3_s1") else "is paused")
    end_watcher(runner, world, 2)
    end_watcher(runner, world, 3)
    with pytest.raises(RunError, match="container tstscope_r2_s1 is paused"):
        read(runner)
    assert procs["srv3"].poll() == lifecycle.CONTAINER_GONE and list(runner.lost_containers) == [ip(3)]


def test_before_every_server_is_ready_a_container_gone_fails_the_run(tmp_path, world, monkeypatch):
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    _, procs = running(runner, tmp_path)
    runner._nemesis = None
    docker_says(monkeypatch, EXITED)
    end_watcher(runner, world, 2)
    with pytest.raises(RunError, match=r"^container tstscope_r2_s1 exited \(137\) at 2026-11-29T10:00:01 \(ssh: "):
        read(runner)
    assert runner.lost_containers == {}


def test_on_a_host_whose_docker_the_driver_cannot_see_the_ssh_failure_decides(tmp_path, world, monkeypatch):
    """A container on another host: gone when its watcher failed and its address takes no new connection (the host
    down or cut off); one whose address answers (refusing or accepting) may be alive, and fails the run."""
    state = {**STATE, "containers": [dict(c, host="10.0.0.7") if c.get("region") == 2 else c
                                     for c in STATE["containers"]]}
    runner = sb.SwarmRunner(state, tmp_path / "key", progress=False)
    _, procs = running(runner, tmp_path)
    asked = docker_says(monkeypatch, "no longer exists")   # this host's Docker knows nothing of it: not asked
    probed = []
    monkeypatch.setattr(sb, "no_answer", lambda a, port, timeout: probed.append((a, port)) or None)
    end_watcher(runner, world, 2)
    with pytest.raises(RunError, match=r"container tstscope_r2_s1 \(10.9.2.1, on host 10.0.0.7\) stopped answering"):
        read(runner)
    assert probed == [(ip(2), 22)] and asked == []
    monkeypatch.setattr(sb, "no_answer", lambda a, port, timeout: "timed out after 3s")
    read(runner)
    assert procs["srv2"].poll() == lifecycle.CONTAINER_GONE and asked == []
    assert procs["srv2"].lost_how() == (
        "its container is gone: tstscope_r2_s1 (10.9.2.1, on host 10.0.0.7) stopped answering over SSH (status "
        "watcher ended) and takes no new connection (timed out after 3s): the host may be down or cut off")


def test_no_answer_tells_an_address_that_refuses_from_one_that_is_not_there(monkeypatch):
    import errno
    import socket
    with socket.socket() as s:   # a port nothing listens on: refused, the address lives
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert sb.no_answer("127.0.0.1", port, 1) is None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert sb.no_answer("127.0.0.1", s.getsockname()[1], 1) is None
    # an address nothing answers at (only loopback is ever connected to here: the kernel's answers are played)
    for err, said in [(TimeoutError(), "timed out after 0.5s"),
                      (OSError(errno.EHOSTUNREACH, "No route to host"), "No route to host")]:
        monkeypatch.setattr(socket, "create_connection", lambda addr, timeout, err=err: (_ for _ in ()).throw(err))
        assert sb.no_answer("127.0.0.1", 22, 0.5) == said


class NoStop:
    """The lifecycle's stop request, never made (testbed/core/interrupts.py)."""
    requested = False

    def check(self):
        pass

    def sleep(self, s):
        pass


def test_a_run_that_fails_after_a_loss_still_copies_what_the_live_containers_recorded(tmp_path, world, monkeypatch):
    """The lifecycle's salvage of a run that failed while its clients ran (here: a shard left without its majority)
    on the swarm: the live processes are stopped and the files of every container but the lost one copied, and the
    failure is raised marked salvaged. (A method of the swarm backend's own once shadowed the lifecycle's and made
    this a TypeError.)"""
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    run_dir, procs = running(runner, tmp_path)
    docker_says(monkeypatch, EXITED)
    end_watcher(runner, world, 2)
    read(runner)
    runner._nemesis.lost.add("srv2")           # recorded by the lifecycle
    runner.rc.update(srv1=0, srv3=0, cli1=0)   # as they exit when stopped
    world.log.clear()
    failure = RunError("shard 1 lost its majority (...)")
    servers = [procs["srv1"], procs["srv2"], procs["srv3"]]
    with pytest.raises(RunError) as e:
        runner._salvage(failure, servers, [procs["cli1"]], run_dir, NoStop())
    assert e.value is failure and failure.salvaged
    assert sorted(i for i, w in world.log if w == "copy") == [ip(1), ip(3)]
    assert runner.teardown(run_dir, list(procs.values()))[0].startswith("tstscope_r2_s1: not cleaned")


def test_a_shards_container_lost_is_one_loss_of_its_replicas_said_once(tmp_path):
    """In the default layout one process runs a shard's 3 replicas (and its clients) in the shard's container: its
    loss leaves the shard no majority, and the reason says the three replicas, when and how once."""
    from testbed.core import deploy as deploylib
    from testbed.runs.local import LocalRunner
    from testbed.runs.nemesis import Nemesis as RealNemesis
    d = deploylib.build_deployment(mode="janus", regions=2, shards=1, base_port=29300)
    runner = LocalRunner(progress=False)
    runner._nemesis = RealNemesis(d, tmp_path, [])
    runner._nemesis.start_clock()
    how = f"its container is gone: tst_r2_s1 {EXITED}"
    runner._nemesis.lost("shard1.0", how)
    why = runner._majority_lost(d)
    assert re.fullmatch(r"shard 1 lost its majority \(0 of 3 replicas live: s1\.0\.0, s1\.0\.1, s1\.0\.2 lost at "
                        rf"t=\d+\.\d\ds \({re.escape(how)}\)\): no protocol here can go on without it", why), why
