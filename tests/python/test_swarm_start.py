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
