"""Container placement: names, addresses, hosts, driver, subnet capacity."""
import dataclasses
from collections import Counter

import pytest

from testbed.core.config import load_exp_config
from testbed.cluster.hosts import Host
from testbed.cluster.placement import host_sequence, plan


def cfg(**knobs):
    knobs.setdefault("SCALABILITY_N_REGIONS", [3])
    return load_exp_config({k.upper(): v for k, v in knobs.items()})


def test_3x2_on_one_host():
    local = Host("localhost")
    cs = plan(cfg(regions=3, shards_per_region=2), [local])
    assert [(c.name, c.ip, c.region, c.shard) for c in cs] == [
        ("edge_r1_s1", "10.55.1.1", 1, 1), ("edge_r1_s2", "10.55.1.2", 1, 2),
        ("edge_r2_s1", "10.55.2.1", 2, 1), ("edge_r2_s2", "10.55.2.2", 2, 2),
        ("edge_r3_s1", "10.55.3.1", 3, 1), ("edge_r3_s2", "10.55.3.2", 3, 2),
        ("edge_driver", "10.55.0.240", 0, 0)]
    assert all(c.host is local for c in cs)
    assert [c.role for c in cs].count("driver") == 1 and cs[-1].role == "driver"


def test_6x4_round_robin_on_3_hosts():
    hosts = [Host("10.0.0.1"), Host("10.0.0.2"), Host("10.0.0.3")]
    cs = plan(cfg(regions=6, shards_per_region=4), hosts)
    shards = [c for c in cs if c.role == "shard"]
    assert len(shards) == 24 and len({c.ip for c in cs}) == 25 and len({c.name for c in cs}) == 25
    assert [c.host.address[-1] for c in shards[:7]] == list("1231231")
    assert Counter(c.host.address for c in shards) == {"10.0.0.1": 8, "10.0.0.2": 8, "10.0.0.3": 8}
    assert shards[-1].name == "edge_r6_s4" and shards[-1].ip == "10.55.6.4"
    # a region's shards land on different hosts when there are enough hosts
    assert len({c.host for c in shards if c.region == 1}) == 3
    assert cs[-1].host == hosts[0]


def test_weighted_by_cpus_when_every_host_gives_cpus():
    hosts = [Host("big", cpus=6), Host("small", cpus=2)]
    cs = [c for c in plan(cfg(regions=4, shards_per_region=4), hosts) if c.role == "shard"]
    assert Counter(c.host.address for c in cs) == {"big": 12, "small": 4}
    seq = [h.address for h in host_sequence(hosts, 4)]
    assert seq.count("small") == 1 and seq.count("big") == 3  # interleaved, not blocked
    # one host without cpus: plain round-robin
    mixed = [Host("big", cpus=6), Host("other")]
    assert [h.address for h in host_sequence(mixed, 4)] == ["big", "other", "big", "other"]


def test_weighted_counts_proportional():
    hosts = [Host("a", cpus=3), Host("b", cpus=2), Host("c", cpus=1)]
    assert Counter(h.address for h in host_sequence(hosts, 60)) == {"a": 30, "b": 20, "c": 10}


def test_other_subnet_prefix():
    cs = plan(cfg(subnet="172.30.0.0/16", driver_ip="172.30.0.9"), [Host("localhost")])
    assert cs[0].ip == "172.30.1.1" and cs[-1].ip == "172.30.0.9"


def test_subnet_too_small():
    with pytest.raises(ValueError, match="SUBNET='10.55.0.0/23'"):
        cfg(subnet="10.55.0.0/23")  # rejected before anything starts
    small = dataclasses.replace(cfg(subnet="10.55.0.0/22"), max_regions=5)  # bypassing validation
    with pytest.raises(ValueError, match=r"SUBNET=10.55.0.0/22: too small for 5 regions \(MAX_REGIONS\) x "
                                         r"SHARDS_PER_REGION=2 "
                                         r"\(10.55.4.1 falls outside\)"):
        plan(small, [Host("localhost")])


def test_containers_for_every_region_deployed():
    # REGIONS=3 for most experiments, exp 4 up to 5: five regions of containers, brought up once
    cs = plan(cfg(regions=3, SCALABILITY_N_REGIONS=[3, 5], shards_per_region=1), [Host("localhost")])
    assert [c.name for c in cs] == [f"edge_r{r}_s1" for r in range(1, 6)] + ["edge_driver"]


def test_no_hosts():
    with pytest.raises(ValueError, match="at least one host"):
        plan(cfg(), [])


def test_followers_in_containers_of_their_own():
    """CONTAINERS='replica': each shard's container (replica 0 and its clients) is followed by one per follower, named
    _f<k>, in the upper half of the region's /24 (the tc plans shape by destination /24)."""
    cs = plan(cfg(regions=2, shards_per_region=2, containers="replica", SCALABILITY_N_REGIONS=[2]), [Host("localhost")])
    assert [(c.name, c.ip, c.region, c.shard, c.role, c.replica) for c in cs] == [
        ("edge_r1_s1", "10.55.1.1", 1, 1, "shard", None), ("edge_r1_s1_f1", "10.55.1.128", 1, 1, "follower", 1),
        ("edge_r1_s1_f2", "10.55.1.129", 1, 1, "follower", 2),
        ("edge_r1_s2", "10.55.1.2", 1, 2, "shard", None), ("edge_r1_s2_f1", "10.55.1.130", 1, 2, "follower", 1),
        ("edge_r1_s2_f2", "10.55.1.131", 1, 2, "follower", 2),
        ("edge_r2_s1", "10.55.2.1", 2, 1, "shard", None), ("edge_r2_s1_f1", "10.55.2.128", 2, 1, "follower", 1),
        ("edge_r2_s1_f2", "10.55.2.129", 2, 1, "follower", 2),
        ("edge_r2_s2", "10.55.2.2", 2, 2, "shard", None), ("edge_r2_s2_f1", "10.55.2.130", 2, 2, "follower", 1),
        ("edge_r2_s2_f2", "10.55.2.131", 2, 2, "follower", 2),
        ("edge_driver", "10.55.0.240", 0, 0, "driver", None)]
    # the default: a container per shard, as before
    assert [c.role for c in plan(cfg(regions=2, shards_per_region=2, SCALABILITY_N_REGIONS=[2]), [Host("x")])] == \
        ["shard"] * 4 + ["driver"]


def test_a_shards_containers_land_on_different_hosts_when_there_are_enough():
    hosts = [Host("10.0.0.1"), Host("10.0.0.2"), Host("10.0.0.3")]
    cs = [c for c in plan(cfg(regions=3, shards_per_region=2, containers="replica"), hosts) if c.role != "driver"]
    for r in (1, 2, 3):
        for s in (1, 2):
            assert len({c.host for c in cs if (c.region, c.shard) == (r, s)}) == 3, (r, s)
    assert Counter(c.host.address for c in cs) == {"10.0.0.1": 6, "10.0.0.2": 6, "10.0.0.3": 6}


def test_followers_containers_limit_the_shards_per_region():
    last = plan(cfg(regions=1, shards_per_region=63, containers="replica", SCALABILITY_N_REGIONS=[1]),
                [Host("localhost")])
    assert [c.ip for c in last if c.region == 1][-3:] == ["10.55.1.63", "10.55.1.252", "10.55.1.253"]
    assert len({c.ip for c in last}) == len(last) == 63 * 3 + 1
    with pytest.raises(ValueError, match=r"^SHARDS_PER_REGION=64: must be <= 63 with CONTAINERS='replica' \(a "
                                         r"region's /24 holds its followers' containers from .128, two per shard\)$"):
        cfg(shards_per_region=64, containers="replica")
    wide = dataclasses.replace(cfg(shards_per_region=64), containers="replica")   # bypassing validation
    with pytest.raises(ValueError, match=r"^SHARDS_PER_REGION=64: must be <= 63 with CONTAINERS='replica'"):
        plan(wide, [Host("localhost")])
    assert len(plan(cfg(shards_per_region=239, SCALABILITY_N_REGIONS=[1], regions=1), [Host("x")])) == 240
