import socket

import pytest

from testbed.core import deploy
from testbed.core.deploy import build_deployment

SCHEMA_TOP = {"name", "mode", "regions", "shards_per_region", "replicas", "seed", "link", "workload", "client",
              "protocols", "runtime", "nodes"}


@pytest.mark.parametrize("knobs,needle", [
    (dict(regions=0), "regions=0"), (dict(regions=65), "regions"), (dict(mechanism="tc"), "mechanism"), (dict(shards=0), "shards"),
    (dict(clients_per_shard=0), "clients_per_shard"), (dict(concurrency=0), "concurrency"),
    (dict(zipf=1.5), "zipf"), (dict(scale=0), "scale"), (dict(jitter=-1), "jitter"),
    (dict(inter_rtt=-5), "inter_rtt"), (dict(payment_crt_rate=101), "payment_crt_rate"),
    (dict(payment_crt_rate=-2), "payment_crt_rate"), (dict(mode="paxos"), "mode='paxos'"),
    (dict(workload="ycsb"), "workload"), (dict(protocol_options={"ewma_alpha": 2}), "protocols.dast.ewma_alpha"),
    (dict(protocol_options={"ewma": 0.5}), "protocols.dast.ewma"), (dict(protocol_options=[0.5]), "protocol_options"),
    (dict(duration=3, warmup=2, cooldown=1), "warmup+cooldown"), (dict(regions=2.5), "integer"),
    (dict(base_port=80), "base_port"), (dict(bogus=1), "bogus"), (dict(name="a/b"), "name"),
    (dict(protocol_options={"defer_commutative": 1}), "protocols.dast.defer_commutative"),
    (dict(district="random"), "district='random'"),
])
def test_validation_names_the_knob(knobs, needle):
    with pytest.raises(ValueError, match=None) as e:
        deploy.build_deployment(**knobs)
    assert needle in str(e.value)
    if needle not in ("bogus", "name", "mode='paxos'", "workload", "warmup+cooldown", "mechanism",
                      "protocols.dast.defer_commutative", "protocols.dast.ewma", "protocol_options", "district='random'"):
        assert "[" in str(e.value)  # the allowed range is stated


def test_yaml_shape(tmp_path):
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=2, jitter=3, intra_rtt=4, inter_rtt=80,
                                base_port=23000)
    path = deploy.write_yaml(d, tmp_path / "deploy.yml")
    y = deploy.load_yaml(path)
    assert set(y) <= SCHEMA_TOP and y["mode"] == "dast" and y["replicas"] == 3
    assert y["regions"] == 3 and y["shards_per_region"] == 2
    assert y["link"] == {"mechanism": "app", "jitter_ms": 3.0,
                         "rtt_ms": [[4, 80, 80], [80, 4, 80], [80, 80, 4]]}
    kinds = [n["kind"] for n in y["nodes"]]
    assert kinds.count("replica") == 18 and kinds.count("manager") == 3 and kinds.count("client") == 12
    names = [n["name"] for n in y["nodes"]]
    ports = [n["port"] for n in y["nodes"]]
    assert len(set(names)) == len(names) and len(set(ports)) == len(ports) and min(ports) >= 23000
    for n in y["nodes"]:
        assert n["host"] == "127.0.0.1"
        if n["kind"] == "replica":
            assert n["name"] == f"s{n['region']}.{n['shard']}.{n['replica']}" and 0 <= n["shard"] < 2
        elif n["kind"] == "client":
            assert n["name"].startswith(f"c{n['region']}.{n['shard']}.") and 0 <= n["shard"] < 2
        else:
            assert n["name"] == f"m{n['region']}"
    c = y["client"]
    assert c["n_concurrent"] == 2 and c["warmup_s"] + c["cooldown_s"] < c["duration_s"]


def test_integer_knobs_say_integer():
    with pytest.raises(ValueError, match=r"regions=0: must be an integer in \[1, 64\]"):
        deploy.build_deployment(regions=0)
    with pytest.raises(ValueError, match=r"zipf=2: must be a number in \[0, 1\]"):
        deploy.build_deployment(zipf=2)


def test_protocol_options_reach_the_deployment_file():
    dast = deploy.build_deployment()["protocols"]["dast"]
    assert dast["defer_commutative"] is True and dast["ewma_alpha"] == 0.2  # every option, defaults filled in
    d = deploy.build_deployment(protocol_options={"ewma_alpha": 0.5, "sync_interval_ms": 20})
    assert d["protocols"] == {"dast": {**dast, "ewma_alpha": 0.5, "sync_interval_ms": 20.0}}
    held = deploy.build_deployment(protocol_options={"defer_commutative": False})
    assert held["protocols"]["dast"]["defer_commutative"] is False


def test_modes_roles_and_min_regions_come_from_the_registry(fake_registry):
    from testbed.core import protocols
    assert protocols.load().names() == ["alpha", "ordered"]
    d = deploy.build_deployment(regions=2, shards=1)
    assert d["mode"] == "alpha"  # the registry's first protocol
    assert [(n["name"], n["region"]) for n in d["nodes"] if n["kind"] == "manager"] == [("m0", 0), ("m1", 1)]
    d = deploy.build_deployment(mode="ordered", regions=5, shards=1)
    assert {n["kind"] for n in d["nodes"]} == {"replica", "order", "client"}
    assert [(n["name"], n["region"]) for n in d["nodes"] if n["kind"] == "order"] == [("o0", 0), ("o1", 1), ("o2", 3)]
    assert d["protocols"] == {"ordered": {}}
    with pytest.raises(ValueError, match=r"regions=2: mode ordered needs regions in \[3, 64\]"):
        deploy.build_deployment(mode="ordered", regions=2)


def test_options_are_the_modes_own(fake_registry):
    d = deploy.build_deployment(protocol_options={"count": 5, "flavour": "spicy"})
    assert d["protocols"]["alpha"] == {"defer_commutative": True, "count": 5, "ratio": 0.5, "flavour": "spicy"}
    with pytest.raises(ValueError, match=r"protocols\.ordered\.count: not an option of ordered \(options: none\)"):
        deploy.build_deployment(mode="ordered", protocol_options={"count": 5})


def test_busy_port_is_skipped():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        if busy > 65000:
            pytest.skip("ephemeral port above the base_port range")
        ports = [n["port"] for n in deploy.build_deployment(regions=1, shards=1, base_port=busy)["nodes"]]
        assert busy not in ports and min(ports) > busy



def test_ports_given_to_another_live_process_are_not_given_again_until_it_ends(tmp_path, monkeypatch):
    """Two jobs of one machine (parallel test workers, two run_local.py) pick their ports before their engines bind
    them: the second must not get the first's while the first lives, and gets them back once it ended."""
    import subprocess
    import sys
    import textwrap
    monkeypatch.setenv("EDGE_TXN_LOCK_DIR", str(tmp_path))
    other = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys
        from testbed.core import deploy
        print(*deploy.allocate_ports(5, "127.0.0.1", 31000), flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        theirs = [int(p) for p in other.stdout.readline().split()]
        assert len(theirs) == 5
        mine = deploy.allocate_ports(5, "127.0.0.1", 31000)
        assert not set(mine) & set(theirs) and min(mine) > max(theirs)
        assert deploy.allocate_ports(5, "127.0.0.1", 31000) == mine   # a process's own reservation is its own
    finally:
        other.communicate("")
    assert deploy.allocate_ports(5, "127.0.0.1", 31000)[0] == min(theirs)
    (tmp_path / "ports-127.0.0.1.json").write_text("not json")   # a torn file is no reservation, not an error
    assert deploy.allocate_ports(2, "127.0.0.1", 31000)[0] == min(theirs)

def test_cli_protocol_options_are_typed_by_yaml_and_checked_by_the_schema():
    from testbed.cli.run import parse_args
    from testbed.core.options import option_values
    a = parse_args(["--protocol-option", "defer_commutative=false", "--protocol-option", "ewma_alpha=0.5"])
    opts = option_values(a.protocol_options)
    assert opts == {"defer_commutative": False, "ewma_alpha": 0.5}
    assert deploy.build_deployment(protocol_options=opts)["protocols"]["dast"]["defer_commutative"] is False
    with pytest.raises(ValueError, match=r"--protocol-option 'ewma': must be NAME=VALUE"):
        option_values(["ewma"])
    with pytest.raises(ValueError, match=r"protocols\.dast\.ewma_alpha='x': must be a number"):
        deploy.build_deployment(protocol_options=option_values(["ewma_alpha=x"]))


def test_split_processes_group_a_shards_servers_and_its_clients_apart():
    from testbed.runs.lifecycle import engine_processes, engine_target
    d = build_deployment(mode="dast", regions=2, shards=2, clients_per_shard=2, base_port=29000, processes="split")
    procs = dict(deploy.processes(d["nodes"]))
    assert sorted(procs) == ["cli0.0", "cli0.1", "cli1.0", "cli1.1", "srv0.0", "srv0.1", "srv1.0", "srv1.1"]
    assert [n["name"] for n in procs["srv0.0"]] == ["s0.0.0", "s0.0.1", "s0.0.2", "m0"]   # roles: first container
    assert [n["name"] for n in procs["srv1.1"]] == ["s1.1.0", "s1.1.1", "s1.1.2"]
    assert [n["name"] for n in procs["cli1.0"]] == ["c1.0.0", "c1.0.1"]
    servers = engine_processes(d["nodes"], clients=False)
    assert [p["name"] for p in servers] == ["srv0.0", "srv0.1", "srv1.0", "srv1.1"]
    assert engine_target(servers[0]) == ["--process", "srv0.0"] and not servers[0]["clients"]
    alone = build_deployment(mode="dast", regions=2, shards=2, processes="node", base_port=29100)
    assert not any("process" in n for n in alone["nodes"])
    assert engine_target(engine_processes(alone["nodes"], clients=True)[0]) == ["--name", "c0.0.0"]


def test_container_processes_run_all_of_a_shards_nodes_and_a_self_test_splits_its_clients_off():
    from testbed.runs.lifecycle import client_out, engine_processes
    d = build_deployment(mode="dast", regions=2, shards=2, clients_per_shard=2, base_port=29000)
    procs = dict(deploy.processes(d["nodes"]))
    assert sorted(procs) == ["shard0.0", "shard0.1", "shard1.0", "shard1.1"]
    assert [n["name"] for n in procs["shard0.0"]] == ["s0.0.0", "s0.0.1", "s0.0.2", "m0", "c0.0.0", "c0.0.1"]
    assert [n["name"] for n in procs["shard1.1"]] == ["s1.1.0", "s1.1.1", "s1.1.2", "c1.1.0", "c1.1.1"]
    servers = engine_processes(d["nodes"], clients=False)
    assert [p["name"] for p in servers] == list(procs) and all(p["clients"] for p in servers)
    assert engine_processes(d["nodes"], clients=True) == []        # no client process: txn-server runs them
    assert client_out(servers[0], "/r/clients") == ["--client-out", "/r/clients"]
    assert client_out(d["nodes"][0], "/r/clients") == []
    # probers listen on their own ports: a self-test's clients get processes of their own, the servers keep theirs
    split = dict(deploy.processes(deploy.split_clients(d)["nodes"]))
    assert sorted(split) == ["cli0.0", "cli0.1", "cli1.0", "cli1.1", "shard0.0", "shard0.1", "shard1.0", "shard1.1"]
    assert [n["name"] for n in split["shard0.0"]] == ["s0.0.0", "s0.0.1", "s0.0.2", "m0"]
    assert "process" in d["nodes"][-1] and d["nodes"][-1]["process"].startswith("shard")   # a copy: d unchanged


def test_processes_knob_is_checked():
    with pytest.raises(ValueError, match=r"processes='shared': must be one of container, split, node"):
        build_deployment(processes="shared")


def test_delivery_grid_is_written_only_when_not_the_engines_default():
    # the engine's default is 250 us (src/core/config.h): a file without the key is what an older engine reads
    assert "delivery_grid_us" not in build_deployment()["runtime"]
    assert build_deployment(delivery_grid_us=0)["runtime"]["delivery_grid_us"] == 0
    assert build_deployment(delivery_grid_us=1000)["runtime"]["delivery_grid_us"] == 1000
    for bad in (-1, 10_001, 2.5):
        with pytest.raises(ValueError, match=r"delivery_grid_us"):
            build_deployment(delivery_grid_us=bad)
