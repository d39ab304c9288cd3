import socket

import pytest

from testbed import deploy

SCHEMA_TOP = {"name", "mode", "regions", "shards_per_region", "replicas", "seed", "link", "workload", "client",
              "dast", "runtime", "nodes"}


@pytest.mark.parametrize("knobs,needle", [
    (dict(regions=0), "regions=0"), (dict(regions=65), "regions"), (dict(mechanism="tc"), "mechanism"), (dict(shards=0), "shards"),
    (dict(clients_per_shard=0), "clients_per_shard"), (dict(concurrency=0), "concurrency"),
    (dict(zipf=1.5), "zipf"), (dict(scale=0), "scale"), (dict(jitter=-1), "jitter"),
    (dict(inter_rtt=-5), "inter_rtt"), (dict(payment_crt_rate=101), "payment_crt_rate"),
    (dict(payment_crt_rate=-2), "payment_crt_rate"), (dict(mode="paxos"), "mode='paxos'"),
    (dict(workload="ycsb"), "workload"), (dict(mode="slog", regions=2), "slog"),
    (dict(duration=3, warmup=2, cooldown=1), "warmup+cooldown"), (dict(regions=2.5), "integer"),
    (dict(base_port=80), "base_port"), (dict(bogus=1), "bogus"), (dict(name="a/b"), "name"),
    (dict(defer_commutative=1), "defer_commutative"), (dict(district="random"), "district='random'"),
])
def test_validation_names_the_knob(knobs, needle):
    with pytest.raises(ValueError, match=None) as e:
        deploy.build_deployment(**knobs)
    assert needle in str(e.value)
    if needle not in ("bogus", "name", "mode='paxos'", "workload", "slog", "warmup+cooldown", "mechanism",
                      "defer_commutative", "district='random'"):
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


def test_dast_options_reach_the_deployment_file():
    assert deploy.build_deployment()["dast"] == {"defer_commutative": True}
    assert deploy.build_deployment(defer_commutative=False)["dast"] == {"defer_commutative": False}
    assert "dast" not in deploy.build_deployment(mode="janus")


def test_no_managers_for_janus():
    kinds = {n["kind"] for n in deploy.build_deployment(mode="janus")["nodes"]}
    assert kinds == {"replica", "client"}


def test_busy_port_is_skipped():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        if busy > 65000:
            pytest.skip("ephemeral port above the base_port range")
        ports = [n["port"] for n in deploy.build_deployment(regions=1, shards=1, base_port=busy)["nodes"]]
        assert busy not in ports and min(ports) > busy


def test_exp_config_and_cli_reach_the_dast_options():
    from testbed.backend import base_knobs
    from testbed.cli import parse_args
    from testbed.config import load_exp_config
    held = deploy.build_deployment(**base_knobs(load_exp_config({"DAST_DEFER_COMMUTATIVE": False})))
    assert held["dast"] == {"defer_commutative": False}
    assert deploy.build_deployment(**base_knobs(load_exp_config({})))["dast"] == {"defer_commutative": True}
    assert parse_args(["--hold-input-waits"]).defer_commutative is False
    assert parse_args([]).defer_commutative is True
