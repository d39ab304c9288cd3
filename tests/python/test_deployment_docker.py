"""A deployment belongs to one checkout, and bring-up repairs what a healthy deployment needs (issue 29, findings
1 and 4), on a one-node swarm of the tests' own:
- a second checkout's bring-up or teardown of a deployment that is up from this one is refused, naming the owner,
  and changes nothing; --take-over replaces it (its driver then mounts the other checkout) and a job from the first
  checkout is then refused before it starts, so its results can never land in the other checkout;
- a shard container cut off from the overlay (`docker network disconnect`) fails the run with that cause, and the
  next bring-up replaces it (the others are kept) so the next run is CONSISTENT."""
import json
import shutil
import subprocess
import sys

import pytest

from testbed.cluster import swarm
from testbed.cluster.hosts import Host
from testbed.core.config import load_exp_config

from conftest import IMAGE, REPO, docker_client

DOCKER = docker_client()
pytestmark = [pytest.mark.docker, pytest.mark.skipif(
    DOCKER is None, reason="no Docker daemon answers at DOCKER_HOST or unix:///var/run/docker.sock")]

DEPLOYMENT = "tstown"
NETWORK = "tstown_net"
KNOBS = dict(IMAGE_NAME=IMAGE, DEPLOYMENT=DEPLOYMENT, NETWORK_NAME=NETWORK, SUBNET="10.236.0.0/16",
             DRIVER_IP="10.236.0.240", REGIONS=2, SHARDS_PER_REGION=1, SHAPING="app", INTER_RTT_MS=40,
             SYSTEMS=["dast"], N_REPEAT=1, CONCURRENCY_LEVELS=[1], SCALABILITY_N_REGIONS=[2], ROBUST_RTT_VAR=[0])
HOME = REPO / "results" / "_tests" / DEPLOYMENT   # inside the checkout: the driver sees it
CFG_FILE = HOME / "exp_config.py"
SHARD, DRIVER = f"{DEPLOYMENT}_r2_s1", f"{DEPLOYMENT}_driver"
LOCAL = [Host("localhost")]


def labelled():
    return {c.name: c for c in DOCKER.containers.list(all=True, filters={"label": f"{swarm.LABEL}={DEPLOYMENT}"})}


def ids():
    return {n: c.id for n, c in labelled().items()}


@pytest.fixture
def dep(image, tmp_path):
    """The deployment, up from this checkout (its state files where a user's would be); removed afterwards
    whoever owns it by then."""
    assert labelled() == {}, f"containers of {DEPLOYMENT} exist before the test"
    HOME.mkdir(parents=True, exist_ok=True)
    CFG_FILE.write_text("".join(f"{k} = {v!r}\n" for k, v in KNOBS.items()))
    cfg = load_exp_config(CFG_FILE)
    swarm.up(cfg, LOCAL, log=print)
    yield cfg
    swarm.down(cfg, LOCAL, log=print, take_over=True)
    shutil.rmtree(HOME, ignore_errors=True)
    assert labelled() == {}


def driver_job(*args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", DRIVER, "python", "-m", "testbed.cli", "--backend", "swarm",
                           "--duration", "5", "--warmup", "1", "--cooldown", "1", "--concurrency", "1",
                           "--regions", "2", "--shards", "1", "--inter-rtt", "40", "--out", str(swarm.DRIVER_MOUNT + "/" + str((HOME / "results").relative_to(REPO))),
                           *args], capture_output=True, text=True, timeout=timeout)


def test_another_checkout_is_refused_and_takes_over_only_when_asked(dep, tmp_path):
    other = tmp_path / "B"
    other.mkdir()
    files = dict(state_dir=tmp_path / "state", containers_yml=tmp_path / "containers.yml")
    before = ids()
    me = swarm.checkout_id(REPO)
    assert {c.labels[swarm.OWNER_LABEL] for c in labelled().values()} == {me}

    for attempt in (lambda: swarm.up(dep, LOCAL, repo=other, **files),
                    lambda: swarm.down(dep, LOCAL, repo=other, **files)):
        with pytest.raises(swarm.SwarmError) as e:
            attempt()
        msg = str(e.value)
        assert msg.startswith(f"deployment '{DEPLOYMENT}' belongs to another checkout, {me} ") and "--take-over" in msg
        assert ids() == before   # nothing replaced, nothing removed
    swarm.ensure_owner(dep, LOCAL, repo=REPO)   # the owner's jobs go on

    said = []
    swarm.up(dep, LOCAL, repo=other, take_over=True, log=said.append, **files)
    assert any(x.startswith(f"taking over deployment '{DEPLOYMENT}' of {me}") for x in said), said
    driver = labelled()[DRIVER]
    assert driver.labels[swarm.OWNER_LABEL] == swarm.checkout_id(other)
    assert any(m["Destination"] == swarm.DRIVER_MOUNT and m["Source"] == str(other) for m in driver.attrs["Mounts"])

    # a job from the first checkout (its containers.yml still there) is refused before it starts
    with pytest.raises(swarm.SwarmError, match="belongs to another checkout"):
        swarm.ensure_owner(dep, LOCAL, repo=REPO)
    p = subprocess.run([sys.executable, "run_local.py", "--backend", "swarm", "--config", str(CFG_FILE),
                        "--duration", "5", "--warmup", "1", "--cooldown", "1"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "belongs to another checkout" in p.stdout + p.stderr, p.stdout + p.stderr
    assert not list((other / "results").glob("*/*/meta.json"))


def test_a_container_cut_off_from_the_overlay_fails_the_run_with_that_cause_and_up_replaces_it(dep):
    DOCKER.networks.get(NETWORK).disconnect(SHARD, force=True)
    p = driver_job("--name", "cutoff")
    assert p.returncode != 0, p.stdout + p.stderr
    runs = sorted((HOME / "results" / "cutoff").glob("*/meta.json"))
    assert runs, p.stdout + p.stderr
    reason = json.loads(runs[-1].read_text())["reason"]
    assert reason.startswith(f"container {SHARD} is running but not attached to the overlay network {NETWORK}"), reason

    before, said = ids(), []
    swarm.up(dep, LOCAL, log=said.append)
    assert f"container {SHARD} is not attached to the overlay network {NETWORK} (disconnected): replacing it" in said
    after = ids()
    assert after[SHARD] != before[SHARD]
    assert {n: i for n, i in after.items() if n != SHARD} == {n: i for n, i in before.items() if n != SHARD}
    p = driver_job("--name", "repaired")
    assert p.returncode == 0 and "checker: CONSISTENT" in p.stdout, p.stdout + p.stderr
