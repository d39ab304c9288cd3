"""testbed/cluster/cluster.py: a deployment's containers.yml as objects."""
import pytest

from testbed.cluster.cluster import Cluster

STATE = {"deployment": "tst", "containers": [
    dict(name="tst_r1_s1", ip="10.55.1.1", host="localhost", region=1, shard=1, role="shard", id="a"),
    dict(name="tst_r2_s1", ip="10.55.2.1", host="10.0.0.6", region=2, shard=1, role="shard", id="b"),
    dict(name="tst_driver", ip="10.55.0.240", host="localhost", region=None, shard=None, role="driver", id="c")]}


def test_members_roles_and_addresses():
    c = Cluster(STATE)
    assert c.deployment == "tst"
    assert c.driver.name == "tst_driver" and c.driver.host == "localhost"
    assert [m.name for m in c.shards] == ["tst_r1_s1", "tst_r2_s1"]
    assert c.shard_ips() == {(1, 1): "10.55.1.1", (2, 1): "10.55.2.1"}
    assert c.by_ip()["10.55.2.1"].host == "10.0.0.6"
    assert Cluster({"containers": []}).deployment == "edge"


def test_a_deployment_without_driver_is_named():
    with pytest.raises(ValueError, match="deployment tst: no driver container"):
        Cluster({**STATE, "containers": STATE["containers"][:2]}).driver
