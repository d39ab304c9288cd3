"""Docker-backed integration test of the swarm testbed (issue 3): image build on this registry-less machine,
bring-up of R=3 x N=2 on a one-node swarm, idempotence, the RTT self-test, a short DAST run driven from inside the
driver container with its results copied back to results/, and a teardown that leaves nothing behind. Plus the
bad-input cases that need a Docker daemon. Skipped only where no Docker daemon answers."""
import json
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.cluster import swarm
from testbed.core.config import load_exp_config
from testbed.cluster.hosts import Host, parse_hosts
from testbed.runs.selftest import swarm_self_test

from conftest import IMAGE, REPO, docker_client

DEPLOYMENT = "tstswarm"         # the tests' own deployment: names, network and subnet no user deployment has
NETWORK = "tstswarm_net"
LOCAL = [Host("localhost")]


DOCKER = docker_client()
pytestmark = [pytest.mark.docker, pytest.mark.skipif(
    DOCKER is None, reason="no Docker daemon answers at DOCKER_HOST or unix:///var/run/docker.sock")]


def swarm_state():
    return (DOCKER.info().get("Swarm") or {}).get("LocalNodeState")


def labelled(deployment=DEPLOYMENT):
    return DOCKER.containers.list(all=True, filters={"label": f"{swarm.LABEL}={deployment}"})


def cfg_of(**over):
    base = {"IMAGE_NAME": IMAGE, "DEPLOYMENT": DEPLOYMENT, "NETWORK_NAME": NETWORK, "SUBNET": "10.231.0.0/16",
            "DRIVER_IP": "10.231.0.240", "SHAPING": "auto", "CONTAINER_CPUS": 1.5, "SCALABILITY_N_REGIONS": [3]}
    return load_exp_config({**base, **over})


@pytest.fixture
def clean(tmp_path):
    """State files in tmp_path. Afterwards whatever a failed test left is removed (tests assert their own
    teardown), and the swarm is as before."""
    before = swarm_state()
    if labelled():
        pytest.fail(f"containers of {DEPLOYMENT} exist before the test; remove them: "
                    f"docker rm -f $(docker ps -aq --filter label={swarm.LABEL}={DEPLOYMENT})")
    yield dict(state_dir=tmp_path / "state", containers_yml=tmp_path / "containers.yml")
    for c in labelled():
        c.remove(force=True)
    assert swarm._remove_network(DOCKER, NETWORK, DEPLOYMENT) is None   # waits until it has left this node
    if before != "active" and swarm_state() == "active":
        DOCKER.swarm.leave(force=True)


def test_bring_up_self_test_run_from_driver_and_teardown(image, clean):
    cfg = cfg_of()
    swarm_before = swarm_state()
    gwbridge_before = bool(DOCKER.networks.list(names=["docker_gwbridge"]))
    state = swarm.up(cfg, LOCAL, deployment=DEPLOYMENT, log=print, **clean)

    # --- the plan, as Docker sees it
    names = sorted(c["name"] for c in state["containers"])
    assert names == sorted([f"tstswarm_r{r}_s{s}" for r in (1, 2, 3) for s in (1, 2)] + ["tstswarm_driver"])
    by_name = {c.name: c for c in labelled()}
    assert sorted(by_name) == names
    for c in state["containers"]:
        ct = by_name[c["name"]]
        assert ct.status == "running"
        net = ct.attrs["NetworkSettings"]["Networks"][NETWORK]
        assert net["IPAddress"] == c["ip"]
        assert "NET_ADMIN" in ct.attrs["HostConfig"]["CapAdd"]
        assert ct.attrs["HostConfig"]["NanoCpus"] == 1_500_000_000
    assert by_name["tstswarm_r2_s1"].attrs["NetworkSettings"]["Networks"][NETWORK]["IPAddress"] == "10.231.2.1"
    mounts = by_name["tstswarm_driver"].attrs["Mounts"]
    assert any(m["Destination"] == swarm.DRIVER_MOUNT and Path(m["Source"]) == REPO for m in mounts)
    overlay = DOCKER.networks.get(NETWORK)
    assert overlay.attrs["Driver"] == "overlay" and overlay.attrs["Attachable"]
    assert overlay.attrs["IPAM"]["Config"][0]["Subnet"] == "10.231.0.0/16"
    assert overlay.attrs["Options"].get("com.docker.network.driver.mtu") == "1450"
    assert swarm_state() == "active"
    # no key baked in the image: the key is this deployment's, generated now
    pub = (clean["state_dir"] / "id_ed25519.pub").read_text().split()[1]
    rc, keys = swarm.exec_run(by_name["tstswarm_r1_s1"], ["cat", "/root/.ssh/authorized_keys"])
    assert rc == 0 and pub in keys and len(keys.strip().splitlines()) == 1
    # shaping: netem where the kernel has it, else app, recorded
    assert state["mechanism"] in ("netem", "app") and state["mechanism_detail"]
    assert yaml.safe_load(clean["containers_yml"].read_text())["mechanism"] == state["mechanism"]

    # --- idempotent: a second up() keeps every container, adds none
    ids = {c["name"]: c["id"] for c in state["containers"]}
    state2 = swarm.up(cfg, LOCAL, deployment=DEPLOYMENT, log=print, **clean)
    assert {c["name"]: c["id"] for c in state2["containers"]} == ids
    assert len(labelled()) == 7 and len(DOCKER.networks.list(names=[NETWORK])) == 1

    # --- RTT self-test from inside the containers
    lines = []
    assert swarm_self_test(cfg, state2, log=lines.append), "\n".join(lines)
    assert any("PASS" in x for x in lines), lines

    # --- a short DAST run driven from the driver; results land in the checkout's results/
    name = f"_it-swarm-{secrets.token_hex(3)}"
    try:
        p = subprocess.run(["docker", "exec", "tstswarm_driver", "python", "-m", "testbed.cli", "--backend", "swarm",
                            "--duration", "6", "--warmup", "1", "--cooldown", "1", "--concurrency", "1",
                            "--name", name, "--out", "results"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        runs = list((REPO / "results" / name).iterdir())
        assert len(runs) == 1
        run = runs[0]
        summary = json.loads((run / "summary.json").read_text())
        assert summary["classes"]["IRT"]["committed"] > 0 and summary["classes"]["CRT"]["committed"] > 0
        assert json.loads((run / "check.json").read_text())["verdict"] == "CONSISTENT"
        meta = json.loads((run / "meta.json").read_text())
        assert meta["backend"] == "swarm" and meta["shaping"] == state["mechanism"]
        # the programs the shard containers ran, by their SHA-256 (the job in the driver hashed its own copies)
        rc, sums = swarm.exec_run(by_name["tstswarm_r2_s1"], ["sha256sum", "/usr/local/bin/txn-server",
                                                               "/usr/local/bin/txn-client"])
        assert rc == 0 and meta["engine"] == {Path(f).name: f"sha256:{h}" for h, f in map(str.split, sums.splitlines())}
        # the engine's CPU and wake-ups, from what the processes in the containers said of themselves
        assert meta["engine_usage_from"] == "process facts" and meta["cpu_seconds"] > 0 < meta["engine_wakeups"]
        assert len(list((run / "servers").glob("s*.state.json"))) == 18           # replicas
        assert len(list((run / "servers").glob("m*.state.json"))) == 3            # region managers (run health)
        assert len(list((run / "clients").glob("*.records.csv"))) == 6
        assert (run / "logs" / "shard0.0.log").is_file()   # the first container's nodes: one engine process
        assert "GO shard0.0" in (run / "logs" / "shard0.0.log").read_text()   # its clients started on the go
        # nothing of the run is left running in the containers
        rc, out = swarm.exec_run(by_name["tstswarm_r1_s1"], ["sh", "-c", "pgrep -x txn-server; pgrep -x txn-client; true"])
        assert out == ""
    finally:
        shutil.rmtree(REPO / "results" / name, ignore_errors=True)

    # --- teardown: no container, network or key left; the swarm it created is gone
    r = swarm.down(cfg, LOCAL, deployment=DEPLOYMENT, log=print, **clean)
    assert r["containers_removed"] == 7
    assert labelled() == [] and DOCKER.networks.list(names=[NETWORK]) == []
    assert not (clean["state_dir"] / "id_ed25519").exists() and not clean["containers_yml"].exists()
    if swarm_before != "active":
        assert r["swarm_left"] and swarm_state() != "active"
    if not gwbridge_before:
        assert DOCKER.networks.list(names=["docker_gwbridge"]) == []


def test_container_dying_during_bring_up_leaves_nothing(image, clean):
    swarm_before = swarm_state()
    gwbridge_before = bool(DOCKER.networks.list(names=["docker_gwbridge"]))
    # the bare base image has no entrypoint that keeps running: every container exits at once
    with pytest.raises(swarm.SwarmError, match=r"container tstswarm_r\d_s\d died during bring-up \(exit code 0\)"):
        swarm.up(cfg_of(IMAGE_NAME="debian:bookworm-slim"), LOCAL, deployment=DEPLOYMENT, **clean)
    assert labelled() == [] and DOCKER.networks.list(names=[NETWORK]) == []
    assert swarm_state() == swarm_before
    if not gwbridge_before:
        assert DOCKER.networks.list(names=["docker_gwbridge"]) == []
    assert not (clean["state_dir"] / "id_ed25519").exists()


def test_subnet_clash_is_named_before_anything_starts(image, clean):
    net = DOCKER.networks.create("tstswarm_clash", driver="bridge",
                                 ipam={"Driver": "default", "Config": [{"Subnet": "10.57.0.0/16"}]})
    try:
        with pytest.raises(swarm.SwarmError, match=r"SUBNET=10.57.0.0/16 clashes with Docker network "
                                                   r"'tstswarm_clash' \(10.57.0.0/16\)"):
            swarm.up(cfg_of(SUBNET="10.57.0.0/16", DRIVER_IP="10.57.0.240"), LOCAL, deployment=DEPLOYMENT, **clean)
    finally:
        net.remove()
    assert labelled() == []


def test_missing_image_is_named(clean):
    with pytest.raises(swarm.SwarmError, match=r"IMAGE_NAME='edge-txn:no-such-tag' is missing on localhost"):
        swarm.up(cfg_of(IMAGE_NAME="edge-txn:no-such-tag"), LOCAL, deployment=DEPLOYMENT, **clean)


def test_docker_not_running_and_unreachable_host(clean):
    dead = parse_hosts("hosts:\n  - address: localhost\n    docker_url: unix:///nonexistent/docker.sock\n")
    with pytest.raises(swarm.SwarmError, match=r"host localhost \(unix:///nonexistent/docker.sock\): cannot reach "
                                               r"Docker: .*is the Docker daemon running"):
        swarm.up(cfg_of(), dead, deployment=DEPLOYMENT, **clean)
    # a second host whose ssh port is closed (loopback only): named, nothing started on the first
    far = parse_hosts("hosts:\n  - address: localhost\n  - address: 127.0.0.2\n    docker_url: ssh://root@127.0.0.1:1\n")
    with pytest.raises(swarm.SwarmError, match=r"host 127.0.0.2 \(ssh://root@127.0.0.1:1\): cannot reach Docker"):
        swarm.up(cfg_of(), far, deployment=DEPLOYMENT, **clean)
    assert labelled() == []


def test_too_small_subnet_is_refused_before_docker_is_touched():
    with pytest.raises(ValueError, match=r"SUBNET='10.55.0.0/23': holds regions 1..1"):
        cfg_of(SUBNET="10.55.0.0/23")
