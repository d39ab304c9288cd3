"""Faults nobody announced, on the swarm (docs/nemesis.md, "Losses"): `docker kill` of a follower's container mid-run,
with no fault schedule, on a one-node swarm deployment of the tests' own whose followers have containers of their own
(CONTAINERS='replica'). The driver sees the container's status watcher end, Docker says the container exited: its
process is a loss, recorded, and the run goes on in the other containers, whose files are copied and checked as every
run's are. (The local version, `kill -9` of a follower's process: tests/python/test_unannounced.py; a shard's whole
container killed in the default layout, which takes its majority with it: tests/python/test_lifecycle_docker.py.)"""
import json
import time

import pytest

from conftest import docker_client
from one_node_deployment import OneNodeDeployment, finish, meta_of

DOCKER = docker_client()
pytestmark = [pytest.mark.docker, pytest.mark.skipif(
    DOCKER is None, reason="no Docker daemon answers at DOCKER_HOST or unix:///var/run/docker.sock")]

D = OneNodeDeployment("tstkill", 238, containers="replica")
DURATION = 8


@pytest.fixture(scope="module")
def dep(image):
    yield from D.brought_up()


def test_a_followers_container_killed_mid_run_is_a_loss_and_the_run_goes_on(dep):
    """s1.0.1 (region 2's follower 1) runs alone in tstkill_r2_s1_f1; the container is killed about 2 s into an 8 s
    run. The run ends ok and CONSISTENT, nothing committed is lost, faults.jsonl has the loss (its process, when, how:
    what Docker says of its container), and every other container's files are there."""
    victim = f"{D.name}_r2_s1_f1"
    assert DOCKER.containers.get(victim).labels["edge-txn.replica"] == "1"
    p = D.host_run("kill", "--mode", "janus", "--workload", "append", "--concurrency", "2", duration=DURATION)
    run = D.wait_clients_running("kill", p=p)
    killed_at = time.time()
    DOCKER.containers.get(victim).kill()
    rc, out, _ = finish(p, within=120)
    print(out)
    assert rc == 0 and "checker: CONSISTENT" in out, out
    meta = meta_of(run)
    assert meta["status"] == "ok" and victim in meta["containers"], meta
    assert any(n.startswith(f"{victim}: not cleaned: it stopped answering") for n in meta["cleanup_notes"]), meta
    check = json.loads((run / "check.json").read_text())
    stats = check["stats"]["durability"]
    assert stats["lost"] == 0 and list(stats["crashed"]) == ["s1.0.1"] and stats["committed"] > 20, stats
    events = [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines()]
    lost = [e for e in events if e.get("event") == "lost"]
    assert len(lost) == 1 and lost[0]["process"] == "s1.0.1" and lost[0]["nodes"] == ["s1.0.1"], lost
    assert lost[0]["source"] == "observed" and not lost[0]["planned"], lost
    assert lost[0]["how"].startswith(f"its container is gone: {victim} exited (137) at "), lost
    seen_after = lost[0]["wall_unix_us"] / 1e6 - killed_at
    print(f"the loss was seen {seen_after:.2f}s after the kill")   # 0.9 s here
    assert 0 < lost[0]["t_s"] < DURATION and seen_after >= 0, lost   # seen after the kill, while the clients ran
    # the other containers' processes went on and their files were copied: every live replica's dump and history,
    # every client's records, every live process's log
    for n in ("s0.0.0", "s0.0.1", "s0.0.2", "s1.0.0", "s1.0.2"):
        assert (run / "servers" / f"{n}.state.json").is_file() and (run / "servers" / f"{n}.history.txt").is_file(), n
    for proc in ("shard0.0", "shard1.0", "s0.0.1", "s0.0.2", "s1.0.2"):   # replica 0 and the clients: shard<r>.<s>
        assert (run / "logs" / f"{proc}.log").is_file(), proc
    for c in ("c0.0.0", "c1.0.0"):
        assert (run / "clients" / f"{c}.records.csv").stat().st_size > 0, c
    assert not (run / "servers" / "s1.0.1.state.json").exists() and not (run / "logs" / "s1.0.1.log").exists()
    assert D.engines_left() == {}
