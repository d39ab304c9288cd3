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


def test_a_replicas_container_is_its_own_where_it_has_one():
    state = {"deployment": "tst", "container_layout": "replica", "containers": [
        dict(name="tst_r1_s1", ip="10.55.1.1", host="localhost", region=1, shard=1, role="shard"),
        dict(name="tst_r1_s1_f1", ip="10.55.1.128", host="localhost", region=1, shard=1, role="follower", replica=1),
        dict(name="tst_r1_s1_f2", ip="10.55.1.129", host="h2", region=1, shard=1, role="follower", replica=2),
        dict(name="tst_driver", ip="10.55.0.240", host="localhost", region=None, shard=None, role="driver")]}
    c = Cluster(state)
    assert [c.replica_container(1, 1, k).name for k in (0, 1, 2)] == ["tst_r1_s1", "tst_r1_s1_f1", "tst_r1_s1_f2"]
    assert c.replica_container(1, 1, 2).host == "h2" and c.replica_container(1, 1, 2).replica == 2
    assert c.replica_container(2, 1, 0) is None
    assert [m.name for m in c.shards] == ["tst_r1_s1"] and c.shard_ips() == {(1, 1): "10.55.1.1"}
    assert [m.name for m in c.engines] == ["tst_r1_s1", "tst_r1_s1_f1", "tst_r1_s1_f2"]
    # a deployment of one container per shard: every replica in its shard's
    assert {Cluster(STATE).replica_container(2, 1, k).name for k in (0, 1, 2)} == {"tst_r2_s1"}
    assert Cluster(STATE).engines == Cluster(STATE).shards
