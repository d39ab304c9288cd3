"""The multi-host swarm, exercised for real on one machine (issue 18): two extra Docker daemons, each in a network
namespace of its own, join this machine's swarm (testbed/cluster/rehearsal.py); start_containers.py spreads the
shards over the three hosts, the overlay crosses them, the driver on the manager reaches the workers, the RTT
self-test passes, every built protocol's run is CONSISTENT, losing a host mid-run fails the run cleanly and says
which host, and --down leaves nothing on any host. The same job as `make rehearsal`."""
import os
import shutil

import pytest

from conftest import docker_client
from testbed.cluster import rehearsal
from testbed.sweeps.rehearse import ok, rehearse, summary

DOCKER = docker_client()
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.skipif(
    DOCKER is None or os.geteuid() != 0 or not shutil.which("dockerd"),
    reason="needs a Docker daemon, root (network namespaces, a second dockerd) and dockerd")]


def test_a_three_host_swarm_on_one_machine(image):
    why = rehearsal.busy()
    if why:  # .ci/run rehearses before `make main` brings its deployment up (make rehearsal)
        pytest.skip(why)
    swarm_before = (DOCKER.info().get("Swarm") or {}).get("LocalNodeState")
    gwbridge_before = DOCKER.networks.list(names=["docker_gwbridge"]) != []
    facts = rehearse(n_hosts=2, duration=10, deployment="tstreh", image=image, subnet_b=58)
    print(summary(facts))
    s = facts["steps"]
    assert s["bring_up"]["rc"] == 0 and s["bring_up"]["self_test"], summary(facts)
    assert sorted(s["containers_per_host"].values()) == [2, 2, 3]   # 6 shards by cpus, the driver on the manager
    assert facts["runs"] and all(r["verdict"] == "CONSISTENT" for r in facts["runs"].values()), summary(facts)
    loss = s["host_loss"]
    assert loss["rc"] == 1 and f"on host {loss['host']}" in loss["reason"], summary(facts)
    assert s["down"]["left"] == [] and s["rehearsal_down_left"] == [], summary(facts)
    assert ok(facts)
    assert not rehearsal.STATE.exists()
    assert (DOCKER.info().get("Swarm") or {}).get("LocalNodeState") == swarm_before
    assert (DOCKER.networks.list(names=["docker_gwbridge"]) != []) == gwbridge_before   # Docker made it for the swarm
