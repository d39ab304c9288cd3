"""A swarm run watches, signals, copies and cleans exactly the containers it uses, whatever ran before it on the same
backend (issue 48: after a 10-region run, a 3-region run started status watchers in the other regions' containers,
where its watch.sh was never written, and failed on the first one that ended). The driver's SSH is replaced by a
fake world of containers whose status watcher runs only where the run wrote it, as the real `bash <rdir>/watch.sh`
does; tests/python/test_scalability_docker.py plays the same on real containers."""
from pathlib import Path

import pytest
import yaml

from testbed.core.runtypes import RunError
from testbed.runs import swarm_backend as sb

REGIONS = 4


def ip(r):
    return f"10.9.{r}.1"


STATE = {"deployment": "tstscope", "network": "tstscope_net",
         "containers": [{"name": "tstscope_driver", "ip": "10.9.0.240", "host": "localhost", "role": "driver"}]
         + [{"name": f"tstscope_r{r}_s1", "ip": ip(r), "host": "localhost", "role": "shard", "region": r, "shard": 1}
            for r in range(1, REGIONS + 1)]}


class World:
    """The containers: which run folder holds a watch.sh in each, and every command the driver sent."""

    def __init__(self):
        self.watch_sh: dict[str, str] = {}     # ip -> the run folder whose watch.sh it holds
        self.log: list[tuple[str, str]] = []   # (ip, what)


class Chan:
    """A status watcher's channel: a heartbeat while its script exists, ended at once where it does not."""

    def __init__(self, alive: bool):
        self.alive, self.closed, self.sent = alive, False, False

    def recv_ready(self):
        return self.alive and not self.sent

    def recv(self, n):
        self.sent = True
        return b"END\n"

    def exit_status_ready(self):
        return not self.alive

    def close(self):
        self.closed = True


def fake_ssh(world: World):
    class FakeSsh:
        def __init__(self, ip, key_path, timeout=None):
            self.ip, self.sessions = ip, 0
            world.log.append((ip, "connect"))

        def sh(self, cmd, timeout=None):
            self.sessions += 1
            if "cat > " in cmd and "watch.sh" in cmd:
                world.watch_sh[self.ip] = cmd.split("mkdir -p ")[1].split("/logs")[0]
                world.log.append((self.ip, "setup"))
            elif "rm -rf" in cmd:
                world.watch_sh.pop(self.ip, None)
                world.log.append((self.ip, "clean"))
            elif "load_start" in cmd:
                world.log.append((self.ip, "load_start"))
            elif "setsid" in cmd:   # a process started (RemoteProc)
                world.log.append((self.ip, "spawn"))
                return 0, "started"
            elif "pkill -" in cmd:   # a signal to a process (RemoteProc.signal)
                world.log.append((self.ip, "signal"))
            return 0, ""

        def stream(self, cmd, timeout=None):
            self.sessions += 1
            rdir = cmd.split("bash ")[1].rsplit("/watch.sh", 1)[0]
            world.log.append((self.ip, "watch"))
            return Chan(world.watch_sh.get(self.ip) == rdir)

        def put(self, local, remote, timeout=30):
            self.sessions += 1

        def get_tree(self, remote_dir, local_dir, timeout=60):
            self.sessions += 1
            world.log.append((self.ip, "copy"))
            return 0

        def close(self):
            world.log.append((self.ip, "close"))

    return FakeSsh


@pytest.fixture
def world(monkeypatch):
    """The fake containers, reached by the driver's Ssh; Docker is not asked about them."""
    w = World()
    monkeypatch.setattr(sb, "Ssh", fake_ssh(w))
    monkeypatch.setattr(sb, "docker_state", lambda *a, **k: None)
    return w


def deploy_of(regions: int) -> dict:
    return {"nodes": [{"name": f"n{r}", "host": ip(r)} for r in range(1, regions + 1)],
            "client": {"duration_s": 5}}


def one_run(runner: sb.SwarmRunner, world: World, regions: int, tmp_path: Path, n: int, fail: bool = False):
    """prepare, a round of status reads, load start, then collect (or not: a failed run) and teardown; returns the
    containers each step touched."""
    run_dir = tmp_path / f"run{n}"
    run_dir.mkdir()
    cfg = run_dir / "deploy.yml"
    cfg.write_text(yaml.safe_dump(deploy_of(regions)))
    world.log.clear()
    runner.prepare(deploy_of(regions), cfg, run_dir)
    runner._last_poll = 0.0
    runner.refresh()
    runner.publish_load_start(run_dir, "0")
    if not fail:
        runner.collect(run_dir)
    notes = runner.teardown(run_dir, [])
    touched = {what: sorted({i for i, w in world.log if w == what}) for what in
               ("setup", "watch", "load_start", "copy", "clean")}
    return touched, notes, runner.driver_overhead()


@pytest.mark.parametrize("sequence", [(4, 3, 4, 2), (2, 4, 1, 3)])
def test_a_run_touches_only_its_own_containers_whatever_ran_before(tmp_path, world, sequence):
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    for n, regions in enumerate(sequence):
        touched, notes, cost = one_run(runner, world, regions, tmp_path, n)
        mine = [ip(r) for r in range(1, regions + 1)]
        assert touched == {"setup": mine, "watch": mine, "load_start": mine, "copy": mine, "clean": mine}, regions
        assert notes == [] and cost["containers"] == regions
    # a connection is made once per container for the backend's life, and closed with it
    connects = [i for i, w in world.log if w == "connect"]
    runner.close()
    assert connects == [] and sorted(i for i, w in world.log if w == "close") == [ip(r) for r in range(1, 5)]


def test_a_failed_run_salvages_and_names_only_its_own_containers(tmp_path, world):
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    one_run(runner, world, 4, tmp_path, 0)
    touched, notes, _ = one_run(runner, world, 2, tmp_path, 1, fail=True)
    assert touched["copy"] == [ip(1), ip(2)] and touched["clean"] == [ip(1), ip(2)] and notes == []


def test_a_container_of_the_run_whose_watcher_ends_still_fails_it(tmp_path, world):
    """The scope is not a blind spot: a watcher of the run's own container that ends is the run's failure."""
    runner = sb.SwarmRunner(STATE, tmp_path / "key", progress=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "deploy.yml").write_text("x: 1\n")
    runner.prepare(deploy_of(3), run_dir / "deploy.yml", run_dir)
    world.watch_sh.pop(ip(2))
    runner.watches.pop(ip(2)).close()      # its watcher restarts, finds no watch.sh and ends
    runner._last_poll = 0.0
    with pytest.raises(RunError, match=r"tstscope_r2_s1 .*status watcher ended"):
        runner.refresh()
    notes = runner.teardown(run_dir, [])
    assert notes[0].startswith("tstscope_r2_s1: not cleaned")


def test_netem_jitter_is_set_in_the_runs_containers_only_and_restored_where_changed(tmp_path, world, monkeypatch):
    """Exp 5 under netem re-installs the tc plans with its jitter: in the containers of the run, never in a region it
    does not use (which may be down: it cannot fail the run), and close() restores the deployment's jitter exactly
    where a run changed it."""
    monkeypatch.setattr(sb, "tc_plan_for", lambda cfg, region, jitter_ms: [f"jitter {jitter_ms}"])
    monkeypatch.setattr(sb, "to_shell", lambda plan: plan[0] + "\n")
    sent = []   # (container, the jitter of the tc script it got)
    b = sb.SwarmBackend.__new__(sb.SwarmBackend)
    b.state, b.mechanism, b.cfg, b.applied_jitter = {**STATE, "jitter_ms": 0}, "netem", None, {}
    b.cluster = sb.Cluster(b.state)
    b.runner = sb.SwarmRunner(b.state, tmp_path / "key", progress=False)
    b._shard_conn = lambda ip_: type("C", (), {"sh": lambda self, cmd, timeout=None: (
        sent.append((ip_, cmd.split("\n")[1])) or (0, ""))})()
    three, four = {ip(r) for r in (1, 2, 3)}, {ip(r) for r in (1, 2, 3, 4)}
    b._apply_jitter(10.0, three)
    assert sorted(sent) == [(ip(r), "jitter 10.0") for r in (1, 2, 3)]
    sent.clear()
    b._apply_jitter(10.0, four)                # only the container that carries another jitter
    assert sent == [(ip(4), "jitter 10.0")]
    sent.clear()
    b._apply_jitter(0, {ip(1)})                # back to the deployment's in one
    assert sent == [(ip(1), "jitter 0")]
    sent.clear()
    b.close()                                  # the others restored, nothing else touched
    assert sorted(sent) == [(ip(r), "jitter 0") for r in (2, 3, 4)] and b.applied_jitter == {}
