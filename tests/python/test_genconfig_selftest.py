"""genConfig (deployment on containers), the self-test maths, and the pure parts of the swarm bring-up."""
import json
import stat

import pytest

from testbed.core import deploy, lock, protocols, rtt
from testbed.cluster import genconfig, swarm
from testbed.runs import selftest
from testbed.core.config import load_exp_config
from testbed.cluster.hosts import Host
from testbed.cluster.placement import plan


def state_for(R=3, N=2, mechanism="app", containers="shard"):
    cfg = load_exp_config({"REGIONS": R, "SHARDS_PER_REGION": N, "SCALABILITY_N_REGIONS": [min(R, 3)],
                           "CONTAINERS": containers})
    cs = plan(cfg, [Host("localhost")])
    return {"mechanism": mechanism, "regions": R, "shards_per_region": N, "container_layout": containers,
            "containers": [dict(name=c.name, ip=c.ip, host=c.host.address, region=c.region, shard=c.shard,
                                role=c.role, **({"replica": c.replica} if c.replica else {})) for c in cs]}


def test_every_process_of_a_shard_runs_in_its_container_with_distinct_ports():
    d = genconfig.deployment(state_for(), mode="dast", regions=3, shards=2, clients_per_shard=2)
    by_name = {n["name"]: n for n in d["nodes"]}
    assert by_name["s0.0.0"]["host"] == "10.55.1.1" and by_name["s0.0.0"]["port"] == 20000
    assert by_name["s2.1.2"]["host"] == "10.55.3.2" and by_name["s2.1.2"]["port"] == 20002
    assert by_name["m1"]["host"] == "10.55.2.1" and by_name["m1"]["port"] == 20100
    assert by_name["c1.1.1"]["host"] == "10.55.2.2" and by_name["c1.1.1"]["port"] == 20201
    pairs = [(n["host"], n["port"]) for n in d["nodes"]]
    assert len(pairs) == len(set(pairs)) == 3 * 2 * 3 + 3 + 3 * 2 * 2
    assert d["link"]["mechanism"] == "app"


@pytest.mark.parametrize("layout", ["container", "split", "node"])
def test_followers_with_containers_of_their_own_run_there_each_in_a_process_of_its_own(layout):
    """CONTAINERS='replica': replica 0, the clients and the role nodes stay in the shard's container, in its processes
    as the layout groups them; each follower runs in its own container, alone in its process (a process never spans
    two containers), so that `docker kill` of its container kills that follower alone."""
    from testbed.runs.lifecycle import engine_processes
    d = genconfig.deployment(state_for(R=3, N=2, containers="replica"), mode="dast", regions=3, shards=2,
                             clients_per_shard=2, processes=layout)
    by_name = {n["name"]: n for n in d["nodes"]}
    assert [(by_name[f"s1.1.{k}"]["host"], by_name[f"s1.1.{k}"]["port"]) for k in (0, 1, 2)] == [
        ("10.55.2.2", 20000), ("10.55.2.130", 20001), ("10.55.2.131", 20002)]
    assert by_name["c1.1.1"]["host"] == "10.55.2.2" and by_name["m1"]["host"] == "10.55.2.1"
    followers = [n for n in d["nodes"] if n["kind"] == "replica" and n["replica"] > 0]
    assert len(followers) == 12 and all("process" not in n for n in followers)
    assert len({n["host"] for n in d["nodes"]}) == 3 * 2 * 3
    servers = engine_processes(d["nodes"], clients=False)
    for p in servers:   # every process in one container
        assert len({by_name[m]["host"] for m in p.get("nodes", [p["name"]])}) == 1, p
    assert {p["name"] for p in servers} >= {n["name"] for n in followers}
    if layout == "container":
        assert by_name["s1.1.0"]["process"] == by_name["c1.1.0"]["process"] == "shard1.1"
    # and a crash of a follower may be scheduled in any layout: it is alone in its process
    d = genconfig.deployment(state_for(R=3, N=1, containers="replica"), mode="dast", regions=3, shards=1,
                             processes=layout, faults="crash:s1.0.1@2", duration=10)
    assert [f["node"] for f in d["faults"] if f["kind"] == "crash"] == ["s1.0.1"]


def test_netem_deployment_tells_the_transport_not_to_delay():
    d = genconfig.deployment(state_for(mechanism="netem"), regions=3, shards=2)
    assert d["link"]["mechanism"] == "netem"


def test_first_k_regions_and_too_many_regions():
    d = genconfig.deployment(state_for(R=4), regions=3, shards=2)
    assert {n["host"].split(".")[2] for n in d["nodes"]} == {"1", "2", "3"}
    with pytest.raises(ValueError, match=r"regions=5 x shards=2: the containers are 4 x 2"):
        genconfig.deployment(state_for(R=4), regions=5, shards=2)


@pytest.mark.parametrize("R, want", [(3, [0, 1, 2]), (4, [0, 1, 2]), (6, [0, 2, 4]), (10, [0, 3, 6])])
def test_a_group_role_spreads_over_regions(R, want):
    # e.g. SLOG's global-order group: 3 members in 3 distinct regions, spread over all R
    assert protocols.Role("order", "o", "group", 3, "").regions(R) == want


def test_role_processes_of_any_protocol_get_their_own_ports_in_their_regions_first_container(fake_registry):
    d = genconfig.deployment(state_for(R=4), mode="ordered", regions=4, shards=2)
    roles = [n for n in d["nodes"] if n["kind"] not in ("replica", "client")]
    assert [(n["name"], n["host"], n["port"]) for n in roles] == [
        ("o0", "10.55.1.1", 20100), ("o1", "10.55.2.1", 20100), ("o2", "10.55.3.1", 20100)]
    d = genconfig.deployment(state_for(R=2), mode="alpha", regions=2, shards=2)
    assert [(n["name"], n["host"], n["port"]) for n in d["nodes"] if n["kind"] == "manager"] == [
        ("m0", "10.55.1.1", 20100), ("m1", "10.55.2.1", 20100)]
    hosts_ports = [(n["host"], n["port"]) for n in d["nodes"]]
    assert len(set(hosts_ports)) == len(hosts_ports)


def test_rtt_matrix_knob_replaces_intra_inter():
    m = [[5, 80, 100], [80, 5, 120], [100, 120, 5]]
    d = deploy.build_deployment(regions=3, shards=1, rtt_ms=m)
    assert d["link"]["rtt_ms"] == [[float(x) for x in row] for row in m]
    with pytest.raises(ValueError, match=r"rtt_ms: must be a 3 x 3 matrix"):
        deploy.build_deployment(regions=3, shards=1, rtt_ms=[[5, 100], [100, 5]])
    with pytest.raises(ValueError, match=r"rtt_ms item=-1: must be a number in \[0, 10000\]"):
        deploy.build_deployment(regions=2, shards=1, rtt_ms=[[5, -1], [100, 5]])


def write_probe(d, node, region, rtts, lost):
    (d / "clients").mkdir(parents=True, exist_ok=True)
    (d / "clients" / f"{node}.probe.json").write_text(json.dumps(
        {"node": node, "region": region, "count": 5, "targets": {},
         "rtt_ms": {str(k): v for k, v in rtts.items()}, "lost": {str(k): v for k, v in lost.items()}}))


def test_probe_matrix_minimum_judged_median_reported(tmp_path):
    write_probe(tmp_path, "c0.0.0", 0, {0: [5.2, 5.9, 5.4], 1: [101.0, 100.2, 150.0]}, {0: 0, 1: 0})
    write_probe(tmp_path, "c1.0.0", 1, {0: [100.9, 100.4], 1: [5.1, 30.0, 31.0]}, {0: 0, 1: 0})
    m = rtt.probe_matrix(tmp_path, 2)
    assert m["rtt_ms"] == [[5.2, 100.2], [100.4, 5.1]]
    assert m["median_ms"] == [[5.4, 101.0], [100.65, 30.0]]
    assert rtt.compare(m, [[5, 100], [100, 5]]) == []
    bad = rtt.compare(m, [[5, 80], [80, 5]])
    assert bad == ["region 1 -> 2: measured 100.2 ms, configured 80 ms (tolerance +-8.0 ms)",
                   "region 2 -> 1: measured 100.4 ms, configured 80 ms (tolerance +-8.0 ms)"]
    # region 2 -> 2: median 30 ms over a 5.1 ms minimum: starved CPU, reported but not a failure
    assert rtt.contention_warnings(m, [[5, 100], [100, 5]]) == [
        "region 2 -> 2: median 30.0 ms vs minimum 5.1 ms"]
    table = rtt.format_matrix(m, [[5, 100], [100, 5]])
    assert "5.2/5" in table and "100.2/100" in table


def test_missing_replies_and_losses_fail(tmp_path):
    write_probe(tmp_path, "c0.0.0", 0, {0: [5.0], 1: []}, {0: 4, 1: 5})
    m = rtt.probe_matrix(tmp_path, 2)
    bad = rtt.compare(m, [[5, 100], [100, 5]])
    assert "region 1 -> 2: no reply (configured 100 ms)" in bad
    assert "region 1 -> 1: 4 of 5 probes lost" in bad
    assert "region 2 -> 1: no reply (configured 100 ms)" in bad


def test_ping_output_parsing_and_matrix():
    out = ("PING 10.55.2.1 (10.55.2.1) 56(84) bytes of data.\n64 bytes from 10.55.2.1: icmp_seq=1 ttl=64 "
           "time=100.3 ms\n64 bytes from 10.55.2.1: icmp_seq=2 ttl=64 time=99.9 ms\n")
    assert rtt.ping_samples(out) == [100.3, 99.9]
    calls = []

    def run_in(region, argv):
        calls.append((region, argv[-1]))
        same = argv[-1].split(".")[2] == str(region)
        return 0, f"time={5.1 if same else 100.2} ms\n" * 3
    m = rtt.ping_matrix(run_in, {1: ["10.55.1.1", "10.55.1.2"], 2: ["10.55.2.1"]}, 2, count=3)
    assert m["rtt_ms"] == [[5.1, 100.2], [100.2, 5.1]]
    assert (1, "10.55.1.2") in calls and (2, "10.55.2.1") in calls  # own region: another container if any
    assert m["lost"] == [[0, 0], [0, 0]]


def test_cpu_limit_auto_and_fixed():
    assert swarm.cpu_limit(load_exp_config({}), 2, 7) is None  # default: no quota
    cfg = load_exp_config({"CONTAINER_CPUS": "auto"})
    assert swarm.cpu_limit(cfg, host_cpus=2, on_host=7) == 0.57
    assert swarm.cpu_limit(cfg, host_cpus=2, on_host=40) == 0.5
    assert swarm.cpu_limit(cfg, host_cpus=2, on_host=1) == 2.0
    assert swarm.cpu_limit(load_exp_config({"CONTAINER_CPUS": 1.5}), 2, 7) == 1.5
    assert swarm.cpu_limit(load_exp_config({"CONTAINER_CPUS": None}), 2, 7) is None
    with pytest.raises(ValueError, match=r"CONTAINER_CPUS=0: must be a number in \[0.1, 1024\]"):
        load_exp_config({"CONTAINER_CPUS": 0})


def test_container_specs_static_ip_caps_labels_and_no_key_material(tmp_path):
    cfg = load_exp_config({"CONTAINER_CPUS": "auto", "SCALABILITY_N_REGIONS": [3]})
    cs = plan(cfg, [Host("localhost")])
    specs = swarm.specs(cfg, cs, "ssh-ed25519 AAAA test", "dep1", {"localhost": 2}, repo=tmp_path)
    assert len(specs) == 7
    s = specs[0]
    assert s.container.ip == "10.55.1.1" and s.kwargs["name"] == "edge_r1_s1"
    assert s.kwargs["cap_add"] == ["NET_ADMIN"] and s.kwargs["nano_cpus"] == int(0.57e9)
    assert s.kwargs["labels"][swarm.LABEL] == "dep1" and s.kwargs["labels"]["edge-txn.region"] == "1"
    assert s.kwargs["environment"]["EDGE_TXN_AUTHORIZED_KEYS"] == "ssh-ed25519 AAAA test"
    drv = specs[-1]
    assert drv.container.ip == "10.55.0.240" and drv.kwargs["volumes"] == {
        str(tmp_path): {"bind": swarm.DRIVER_MOUNT, "mode": "rw"},
        "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},    # names a dead container's state
        str(lock.lock_dir()): {"bind": "/run/lock/edge-txn", "mode": "rw"}}       # one job per deployment
    # a changed knob changes the digest (bring-up replaces the container); the same inputs keep it
    again = swarm.specs(cfg, cs, "ssh-ed25519 AAAA test", "dep1", {"localhost": 2}, repo=tmp_path)
    other = swarm.specs(cfg, cs, "ssh-ed25519 BBBB test", "dep1", {"localhost": 2}, repo=tmp_path)
    assert [x.digest for x in again] == [x.digest for x in specs]
    assert all(a.digest != b.digest for a, b in zip(specs, other))
    # an image rebuilt under the same tag (a new id) replaces the containers too
    v1 = swarm.specs(cfg, cs, "ssh-ed25519 AAAA test", "dep1", {"localhost": 2}, repo=tmp_path,
                     image_ids={"localhost": "sha256:1111"})
    v2 = swarm.specs(cfg, cs, "ssh-ed25519 AAAA test", "dep1", {"localhost": 2}, repo=tmp_path,
                     image_ids={"localhost": "sha256:2222"})
    assert all(a.digest != b.digest for a, b in zip(v1, v2))
    assert v1[0].kwargs["image"] == v2[0].kwargs["image"] == cfg.image_name


def test_keypair_is_private_reused_and_openssh(tmp_path):
    priv, pub = swarm.keypair(tmp_path / "k")
    assert pub.startswith("ssh-ed25519 ") and stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert priv.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert swarm.keypair(tmp_path / "k") == (priv, pub)
    import paramiko
    assert paramiko.Ed25519Key.from_private_key_file(str(priv)).get_base64() == pub.split()[1]


def test_state_file_errors(tmp_path):
    assert swarm.load_state(tmp_path / "none.yml") is None
    (tmp_path / "bad.yml").write_text("containers: [\n")
    with pytest.raises(swarm.SwarmError, match="not valid YAML"):
        swarm.load_state(tmp_path / "bad.yml")
    (tmp_path / "other.yml").write_text("a: 1\n")
    with pytest.raises(swarm.SwarmError, match="not a containers.yml"):
        swarm.load_state(tmp_path / "other.yml")
