"""A container start whose API answer times out (Docker slow to attach the first container to an overlay) is looked
up by name rather than reported as a failed bring-up; a timeout for a container that was never created is still the
error. Fakes of the docker-py objects only."""
import pytest
import requests

from testbed.cluster import swarm


class FakeCt:
    def __init__(self, status):
        self.status, self.started = status, False

    def start(self):
        self.started, self.status = True, "running"


class FakeContainers:
    def __init__(self, run_error=None, existing=None):
        self.run_error, self.existing = run_error, existing or {}

    def run(self, **kw):
        if self.run_error:
            raise self.run_error
        return FakeCt("running")

    def get(self, name):
        if name not in self.existing:
            raise KeyError(name)
        return self.existing[name]


class FakeClient:
    def __init__(self, containers):
        self.containers = containers
        self.api = type("Api", (), {"_version": "1.43"})()


class FakeSpec:
    def __init__(self, name):
        self.container = type("C", (), {"name": name, "ip": "10.55.1.1"})()
        self.kwargs = {"name": name, "image": "edge-txn:latest"}


TIMEOUT = requests.exceptions.ReadTimeout("UnixHTTPConnectionPool(host='localhost', port=None): Read timed out. "
                                          "(read timeout=20)")


@pytest.mark.parametrize("status", ["running", "created"])
def test_start_that_timed_out_is_found_by_name(status):
    ct = FakeCt(status)
    client = FakeClient(FakeContainers(run_error=TIMEOUT, existing={"edge_r1_s1": ct}))
    assert swarm._start(client, FakeSpec("edge_r1_s1"), "edge_txn") is ct
    assert ct.started == (status == "created")  # only a created-but-not-started one is started here


def test_start_that_timed_out_before_create_is_the_error():
    client = FakeClient(FakeContainers(run_error=TIMEOUT))
    with pytest.raises(requests.exceptions.ReadTimeout, match="Read timed out"):
        swarm._start(client, FakeSpec("edge_r1_s1"), "edge_txn")


def test_other_start_errors_are_not_retried():
    client = FakeClient(FakeContainers(run_error=RuntimeError("network edge_txn not found"),
                                       existing={"edge_r1_s1": FakeCt("running")}))
    with pytest.raises(RuntimeError, match="not found"):
        swarm._start(client, FakeSpec("edge_r1_s1"), "edge_txn")


def test_api_timeout_is_longer_than_a_slow_overlay_attach():
    assert swarm.DOCKER_API_TIMEOUT_S >= 120


# ---------------------------------------------------------------- whose deployment; what a kept container needs

class Listed:
    """A listed container: labels, attrs."""
    def __init__(self, name, labels, attrs=None):
        self.name, self.labels, self.attrs = name, labels, attrs or {}


class Lister:
    def __init__(self, cts, name="host-a"):
        self.cts, self._name = cts, name
        self.containers = self

    def list(self, all=False, filters=None):
        return self.cts

    def info(self):
        return {"Name": self._name}


def test_owner_is_the_drivers_label_or_for_an_older_driver_its_mount(tmp_path):
    me = swarm.checkout_id(tmp_path)
    shard = Listed("edge_r1_s1", {swarm.LABEL: "edge", "edge-txn.role": "shard"})
    driver = Listed("edge_driver", {swarm.LABEL: "edge", "edge-txn.role": "driver", swarm.OWNER_LABEL: "m:/work/A"})
    assert swarm.owner_of({"localhost": Lister([shard, driver])}, "edge") == "m:/work/A"
    old = Listed("edge_driver", {swarm.LABEL: "edge", "edge-txn.role": "driver"},
                 {"Mounts": [{"Destination": swarm.DRIVER_MOUNT, "Source": "/work/B"}]})
    assert swarm.owner_of({"localhost": Lister([old])}, "edge") == "host-a:/work/B"
    assert swarm.owner_of({"localhost": Lister([shard])}, "edge") is None

    swarm.check_owner({"localhost": Lister([shard])}, "edge", tmp_path)          # nothing up: fine
    mine = Listed("edge_driver", {swarm.LABEL: "edge", "edge-txn.role": "driver", swarm.OWNER_LABEL: me})
    swarm.check_owner({"localhost": Lister([mine])}, "edge", tmp_path)           # ours: fine
    with pytest.raises(swarm.SwarmError, match=r"^deployment 'edge' belongs to another checkout, m:/work/A .*"
                       r"`start_containers.py --take-over --down`$"):
        swarm.check_owner({"localhost": Lister([driver])}, "edge", tmp_path, removing=True)
    said = []
    swarm.check_owner({"localhost": Lister([driver])}, "edge", tmp_path, take_over=True, log=said.append)
    assert said == ["taking over deployment 'edge' of m:/work/A: its containers are replaced; that checkout's "
                    "containers.yml no longer describes what runs"]


def test_every_container_carries_its_checkout():
    from testbed.cluster.hosts import Host
    from testbed.cluster.placement import plan
    from testbed.core.config import load_exp_config
    cfg = load_exp_config({"REGIONS": 2, "SHARDS_PER_REGION": 1, "SCALABILITY_N_REGIONS": [2]})
    hosts = [Host("localhost")]
    for s in swarm.specs(cfg, plan(cfg, hosts), "ssh-ed25519 AAAA t", "edge", {"localhost": 2}):
        assert s.kwargs["labels"][swarm.OWNER_LABEL] == swarm.checkout_id()


class Inspected:
    def __init__(self, networks, sshd=True):
        self.attrs = {"NetworkSettings": {"Networks": networks}}
        self.sshd = sshd

    def exec_run(self, argv, demux=False):
        return type("R", (), {"exit_code": 0 if self.sshd else 1, "output": b""})()


@pytest.mark.parametrize("networks, sshd, problem", [
    ({"edge_txn": {"IPAMConfig": {"IPv4Address": "10.55.1.1"}, "IPAddress": "10.55.1.1"}}, True, None),
    ({"bridge": {"IPAddress": "172.17.0.2"}}, True,
     "is not attached to the overlay network edge_txn (disconnected)"),
    ({"edge_txn": {"IPAMConfig": None, "IPAddress": "10.55.1.9"}}, True, "has address 10.55.1.9 on edge_txn, not 10.55.1.1"),
    ({"edge_txn": {"IPAMConfig": {"IPv4Address": "10.55.1.1"}}}, False, "runs no sshd"),
])
def test_a_kept_container_must_be_on_the_overlay_at_its_address_with_sshd(networks, sshd, problem):
    assert swarm.health_problem(Inspected(networks, sshd), "edge_txn", "10.55.1.1") == problem
