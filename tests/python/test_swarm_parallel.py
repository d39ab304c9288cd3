"""Bring-up and teardown work in parallel, one worker per host (a docker-py client is not thread-safe: a host's
client is only ever used by its own worker), with the messages of the one-after-the-other code. Fakes of the
docker-py objects only."""
import threading
import time

import pytest
import yaml

from testbed.cluster import swarm
from testbed.cluster.hosts import Host
from testbed.core.config import load_exp_config


# ---------------------------------------------------------------- _per_host

def test_per_host_runs_each_hosts_items_in_order_and_the_hosts_at_once():
    seen, lock = [], threading.Lock()
    all_hosts_at_once = threading.Barrier(3, timeout=10)   # one host after the other: broken after 10 s

    def work(item):
        host, i = item
        with lock:
            seen.append(item)
        if i == 0:
            all_hosts_at_once.wait()
        time.sleep(0.01)
        return i * 10
    items = {h: [(h, i) for i in range(4)] for h in ("a", "b", "c")}
    done = swarm._per_host(items, work)
    assert not all_hosts_at_once.broken
    assert list(done) == ["a", "b", "c"]
    for h in "abc":
        assert done[h] == [((h, i), i * 10) for i in range(4)]
        assert [x for x in seen if x[0] == h] == items[h]
    assert swarm._per_host({}, work) == {}


def test_per_host_hands_back_an_items_exception_and_with_stop_starts_nothing_after_it():
    def work(item):
        if item == "b2":
            raise RuntimeError("boom")
        return item.upper()
    items = {"a": ["a1", "a2"], "b": ["b1", "b2", "b3"]}
    done = swarm._per_host(items, work)
    [(item, err)] = [(i, o) for i, o in swarm._outcomes(done) if isinstance(o, Exception)]
    assert item == "b2" and str(err) == "boom" and swarm._first_error(done) is err
    assert done["b"][0] == ("b1", "B1") and done["b"][2] == ("b3", "B3")   # without stop: the rest still runs

    stop = threading.Event()
    done = swarm._per_host({"b": ["b1", "b2", "b3"]}, work, stop=stop)
    assert [i for i, _ in done["b"]] == ["b1", "b2"] and stop.is_set()
    assert swarm._per_host({"a": ["a1"]}, work, stop=stop) == {"a": []}   # set: nothing starts


@pytest.mark.parametrize("hosts, bound, workers", [(5, 2, 2), (6, 3, None), (40, 32, None)])
def test_per_host_threads_are_bounded(monkeypatch, hosts, bound, workers):
    if workers is None and bound != swarm.HOST_WORKERS:
        monkeypatch.setattr(swarm, "HOST_WORKERS", bound)
    busy, most, lock = [0], [0], threading.Lock()

    def work(item):
        with lock:
            busy[0] += 1
            most[0] = max(most[0], busy[0])
        time.sleep(0.05)
        with lock:
            busy[0] -= 1
        return item
    done = swarm._per_host({h: [h] for h in range(hosts)}, work, workers=workers)
    assert len(swarm._outcomes(done)) == hosts and 1 <= most[0] <= bound


# ---------------------------------------------------------------- connect

class Closable:
    def __init__(self, url):
        self.url, self.closed = url, False

    def close(self):
        self.closed = True


def test_connect_names_the_first_failing_host_in_order_and_closes_the_others(monkeypatch):
    opened = []
    all_hosts_at_once = threading.Barrier(4, timeout=10)   # one host after the other: broken after 10 s

    def open_docker(url, timeout):
        all_hosts_at_once.wait()
        if url == "tcp://h2:2375":
            time.sleep(0.3)     # h3 fails first in time; h2 comes first in hosts.yml
            raise ConnectionError("h2 refused")
        if url == "tcp://h3:2375":
            raise ConnectionError("h3 refused")
        time.sleep(0.3)
        c = Closable(url)
        opened.append(c)
        return c
    monkeypatch.setattr(swarm, "_open_docker", open_docker)
    hosts = [Host(f"h{i}", docker_url=f"tcp://h{i}:2375") for i in range(1, 5)]
    said = []
    with pytest.raises(swarm.SwarmError) as e:
        swarm.connect(hosts, log=said.append)
    assert not all_hosts_at_once.broken
    assert str(e.value) == ("host h2 (tcp://h2:2375): cannot reach Docker: h2 refused; can this machine ssh to h2 "
                            "with a key, and does Docker run there?")
    assert sorted(c.url for c in opened) == ["tcp://h1:2375", "tcp://h4:2375"] and all(c.closed for c in opened)
    assert sorted(said) == [f"connecting to h{i} (tcp://h{i}:2375) ..." for i in range(1, 5)]


def test_connect_returns_the_clients_in_hosts_order(monkeypatch):
    monkeypatch.setattr(swarm, "_open_docker", lambda url, timeout: Closable(url))
    hosts = [Host(f"h{i}", docker_url=f"tcp://h{i}:2375") for i in (3, 1, 2)]
    clients = swarm.connect(hosts, log=lambda m: None)
    assert list(clients) == ["h3", "h1", "h2"] and [c.url for c in clients.values()] == [h.url for h in hosts]


# ---------------------------------------------------------------- fakes of a host's Docker, for up() and down()

class FakeCt:
    def __init__(self, name, labels=None, status="running", restarts=0):
        self.name, self.labels, self.status = name, labels or {}, status
        self.attrs = {"RestartCount": restarts, "State": {"ExitCode": 1}}
        self.id = (name.encode().hex() + "0" * 12)[:12]
        self.removed, self.looks = False, 0

    def reload(self):
        self.looks += 1

    def exec_run(self, argv, demux=False):
        return type("R", (), {"exit_code": 0, "output": b""})()

    def put_archive(self, path, data):
        pass

    def logs(self, tail):
        return b"sshd: no hostkeys"

    def remove(self, force=False):
        self.removed = True


class FakeNet:
    def __init__(self, api, name, labels, subnet, options):
        self.api, self.id = api, name
        self.attrs = {"Name": name, "Labels": labels, "IPAM": {"Config": [{"Subnet": subnet}]}, "Options": options}

    def remove(self):
        self.api.nets.remove(self)


class FakeNetworks:
    def __init__(self):
        self.nets = []

    def list(self, names=None, filters=None):
        return [n for n in self.nets if names is None or n.attrs["Name"] in names]

    def create(self, name, **kw):
        net = FakeNet(self, name, kw["labels"], kw["ipam"]["Config"][0]["Subnet"], kw["options"])
        self.nets.append(net)
        return net


class World:
    """What the fake hosts share: the order of events, one failing container name, how long a start takes."""

    def __init__(self, fail=None, start_s=0.0):
        self.events, self.lock, self.fail, self.start_s = [], threading.Lock(), fail, start_s
        self.overlaps = []   # a host's client used by two threads at once

    def note(self, *event):
        with self.lock:
            self.events.append(event)


class FakeContainers:
    def __init__(self, host, world):
        self.host, self.world, self.cts, self.busy = host, world, [], 0

    def run(self, network=None, networking_config=None, **kw):
        self.busy += 1
        if self.busy > 1:
            self.world.overlaps.append(self.host)
        try:
            self.world.note("run", self.host, kw["name"])
            if kw["name"] == self.world.fail:
                self.world.note("fail", self.host, kw["name"])
                raise RuntimeError("network edge_txn not found")
            time.sleep(self.world.start_s)
            ct = FakeCt(kw["name"], kw["labels"])
            ct.attrs["NetworkSettings"] = {"Networks": {network: dict(networking_config[network])}}
            self.cts.append(ct)
            return ct
        finally:
            self.busy -= 1

    def get(self, name):
        raise KeyError(name)

    def list(self, all=False, filters=None):
        key, _, value = filters["label"].partition("=")
        return [c for c in self.cts if not c.removed and c.labels.get(key) == value]


class FakeDocker:
    def __init__(self, host, world):
        self.containers = FakeContainers(host, world)
        self.networks = FakeNetworks()
        self.images = type("Images", (), {"get": lambda _self, name: type("Img", (), {"id": "sha256:abc"})()})()
        self.nodes = type("Nodes", (), {"list": lambda _self: [type("Node", (), {"attrs": {"ID": "n1"}})()]})()
        self.api = type("Api", (), {"_version": "1.43"})()
        self.closed = False

    def info(self):
        return {"Swarm": {"LocalNodeState": "active", "ControlAvailable": True, "NodeID": "n1"}, "NCPU": 2}

    def close(self):
        self.closed = True


HOSTS = [Host(f"h{i}", docker_url=f"tcp://h{i}:2375") for i in (1, 2, 3)]


def cfg3():
    return load_exp_config({"REGIONS": 3, "SHARDS_PER_REGION": 3, "SCALABILITY_N_REGIONS": [3], "SHAPING": "app"})


@pytest.fixture
def world(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGE_TXN_LOCK_DIR", str(tmp_path / "lock"))
    w = World()
    w.clients = {h.address: FakeDocker(h.address, w) for h in HOSTS}
    monkeypatch.setattr(swarm, "connect", lambda hosts, **kw: dict(w.clients))
    w.paths = dict(state_dir=tmp_path / "state", containers_yml=tmp_path / "containers.yml")
    return w


def spec_order(cfg, host):
    """The names of a host's containers in the order up() starts them."""
    from testbed.cluster.placement import plan
    return [c.name for c in plan(cfg, HOSTS) if c.host.address == host]


# ---------------------------------------------------------------- up(): the start phase

def test_a_failed_start_names_it_and_no_host_starts_another(world):
    cfg = cfg3()
    world.fail, world.start_s = "edge_r2_s2", 0.2   # h2's second container; h1 and h3 are slower to start theirs
    with pytest.raises(swarm.SwarmError) as e:
        swarm.up(cfg, HOSTS, log=lambda m: None, **world.paths)
    assert str(e.value) == "cannot start edge_r2_s2 (10.55.2.2) on h2: network edge_txn not found"
    runs = {h.address: [name for kind, host, name in world.events if kind == "run" and host == h.address]
            for h in HOSTS}
    for h in HOSTS:   # each host's starts in order, and not past the failure
        assert runs[h.address] == spec_order(cfg, h.address)[:len(runs[h.address])]
    assert runs["h2"] == ["edge_r1_s2", "edge_r2_s2"]
    failed_at = world.events.index(("fail", "h2", "edge_r2_s2"))
    assert [ev for ev in world.events[failed_at + 1:] if ev[0] == "run"] == []
    assert world.overlaps == []
    # up()'s cleanup: everything it started is removed, and so are the network and the key it made
    for c in world.clients.values():
        assert c.containers.cts and all(ct.removed for ct in c.containers.cts) and c.closed
    assert world.clients["h1"].networks.nets == [] and not (world.paths["state_dir"] / "id_ed25519").exists()


def test_up_starts_every_host_in_order_and_says_where_the_time_went(world):
    cfg = cfg3()
    world.start_s = 0.02
    state = swarm.up(cfg, HOSTS, log=lambda m: None, **world.paths)
    for h in HOSTS:
        assert [n for kind, host, n in world.events if kind == "run" and host == h.address] == \
            spec_order(cfg, h.address)
    # the canaries (one per host) before any other container
    assert {n for _, _, n in world.events[:3]} == {"edge_r1_s1", "edge_r1_s2", "edge_r1_s3"}
    assert world.overlaps == []
    phases = state["bring_up_phases_s"]
    assert list(phases) == ["connect", "checks", "start", "wait_up", "reach", "shaping"]
    assert all(isinstance(s, float) and s >= 0 for s in phases.values())
    assert sum(phases.values()) <= state["bring_up_s"] + 0.06   # rounding
    assert yaml.safe_load(world.paths["containers_yml"].read_text())["bring_up_phases_s"] == phases
    # again: everything kept (the health checks run per host), nothing started
    world.events.clear()
    again = swarm.up(cfg, HOSTS, log=lambda m: None, **world.paths)
    assert world.events == [] and [c["id"] for c in again["containers"]] == [c["id"] for c in state["containers"]]


# ---------------------------------------------------------------- _wait_up

def test_wait_up_reports_a_death_by_name_and_returns_when_all_are_up(monkeypatch):
    monkeypatch.setattr(swarm, "_sshd_up", lambda ct: ct.status == "running")
    cts = {f"c{i}": FakeCt(f"c{i}") for i in range(6)}
    host_of = {f"c{i}": f"h{i % 3}" for i in range(6)}
    swarm._wait_up(cts, 5, host_of=host_of)
    assert all(ct.looks == 1 for ct in cts.values())

    cts["c4"] = FakeCt("c4", status="restarting", restarts=1)
    with pytest.raises(swarm.SwarmError, match=r"(?s)^container c4 died during bring-up \(exit code 1\).*no hostkeys"):
        swarm._wait_up(cts, 60, host_of=host_of)

    cts["c4"] = FakeCt("c4", status="created")
    with pytest.raises(swarm.SwarmError, match=r"^containers not up after 0.5s: c4$"):
        swarm._wait_up(cts, 0.5, host_of=host_of)


def test_wait_up_looks_at_the_hosts_at_once(monkeypatch):
    host_of = {f"c{i}": f"h{i % 3}" for i in range(6)}
    firsts, lock = set(), threading.Lock()
    all_hosts_at_once = threading.Barrier(3, timeout=10)   # one host after the other: broken after 10 s

    def sshd_up(ct):
        with lock:
            first = host_of[ct.name] not in firsts
            firsts.add(host_of[ct.name])
        if first:
            all_hosts_at_once.wait()
        return True
    monkeypatch.setattr(swarm, "_sshd_up", sshd_up)
    cts = {f"c{i}": FakeCt(f"c{i}") for i in range(6)}
    swarm._wait_up(cts, 15, host_of=host_of)
    assert not all_hosts_at_once.broken and firsts == {"h0", "h1", "h2"}


# ---------------------------------------------------------------- down() and stop_engines()

def labelled(world, names, **kw):
    for host, name in names:
        world.clients[host].containers.cts.append(FakeCt(name, {swarm.LABEL: "edge"}, **kw))


def test_down_removes_every_container_on_every_host(world):
    names = [(f"h{i % 3 + 1}", f"edge_c{i}") for i in range(7)]
    labelled(world, names)
    world.clients["h2"].containers.cts.append(FakeCt("other", {swarm.LABEL: "someone-else"}))
    threads = {}

    def remove(ct, host):
        threads.setdefault(host, set()).add(threading.current_thread().name)
        ct.removed = True
    for host, c in world.clients.items():
        for ct in c.containers.cts:
            ct.remove = lambda force=False, ct=ct, host=host: remove(ct, host)
    r = swarm.down(cfg3(), HOSTS, log=lambda m: None, **world.paths)
    assert r["containers_removed"] == 7 and r["swarm_left"] is False and isinstance(r["down_s"], float)
    assert [ct.name for c in world.clients.values() for ct in c.containers.cts if not ct.removed] == ["other"]
    assert sorted(threads) == ["h1", "h2", "h3"] and all(len(t) == 1 for t in threads.values())
    assert all(c.closed for c in world.clients.values())


def test_stop_engines_sweeps_the_running_shards_of_every_host(world):
    labelled(world, [("h1", "edge_r1_s1"), ("h2", "edge_r1_s2"), ("h3", "edge_r1_s3"), ("h1", "edge_driver")])
    labelled(world, [("h3", "edge_r2_s3")], status="exited")
    swept = []
    for c in world.clients.values():
        for ct in c.containers.cts:
            def exec_run(argv, demux=False, ct=ct):
                swept.append(ct.name)
                n = b"0" if ct.name == "edge_r1_s3" else b"2"
                return type("R", (), {"exit_code": 0, "output": n})()
            ct.exec_run = exec_run
    state = {"deployment": "edge", "containers": [
        {"name": n, "role": "shard"} for n in ("edge_r1_s1", "edge_r1_s2", "edge_r1_s3", "edge_r2_s3")]
        + [{"name": "edge_driver", "role": "driver"}]}
    assert swarm.stop_engines(HOSTS, state) == {"edge_r1_s1": 2, "edge_r1_s2": 2}
    assert sorted(swept) == ["edge_r1_s1", "edge_r1_s2", "edge_r1_s3"]
