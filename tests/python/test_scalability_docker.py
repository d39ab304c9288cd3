"""Exp 4 on a deployment with more regions than its runs use (issue 48): on a one-node swarm of the tests' own, 4
regions deployed, every protocol runs at 3 regions, then at 4, then the next protocol at 3 again, all in one job in
the driver (one backend, its SSH connections kept from run to run) -- the order `make main-all` runs them in. Every
run is ok and CONSISTENT, records exactly the containers of its regions, and the regions it does not use are never
watched, salvaged or named (before the fix a 3-region run after a 4-region one started a status watcher in region 4,
where its run folder was never made, and failed: "container ..._r4_s1 stopped answering over SSH (status watcher
ended)"). Afterwards nothing of a run is left in any container, used or not."""
import json
import shutil
import subprocess
import sys

import pytest
import yaml

from testbed.cluster import swarm
from testbed.cluster.hosts import Host
from testbed.core.config import load_exp_config

from conftest import IMAGE, REPO, docker_client

DOCKER = docker_client()
pytestmark = [pytest.mark.docker, pytest.mark.skipif(
    DOCKER is None, reason="no Docker daemon answers at DOCKER_HOST or unix:///var/run/docker.sock")]

DEPLOYMENT = "tstscale"
SYSTEMS = ["dast", "janus", "tapir", "slog"]
KNOBS = dict(IMAGE_NAME=IMAGE, DEPLOYMENT=DEPLOYMENT, NETWORK_NAME="tstscale_net", SUBNET="10.237.0.0/16",
             DRIVER_IP="10.237.0.240", REGIONS=3, MAX_REGIONS=4, SHARDS_PER_REGION=1, SHAPING="app",
             INTER_RTT_MS=40, SYSTEMS=SYSTEMS, N_REPEAT=1, DURATION_S=5, WARMUP_S=1, COOLDOWN_S=1,
             SCALABILITY_N_REGIONS=[3, 4], SCALABILITY_CONCURRENCY=1, FIXED_CLIENT_PROCESS_PER_SHARD=1,
             ROBUST_RTT_VAR=[0])
HOME = REPO / "results" / "_tests" / DEPLOYMENT   # inside the checkout: the driver sees it
CFG_FILE = HOME / "exp_config.py"
OUT = HOME / "results"
LOCAL = [Host("localhost")]


def shard(region: int) -> str:
    return f"{DEPLOYMENT}_r{region}_s1"


@pytest.fixture(scope="module")
def dep(image):
    HOME.mkdir(parents=True, exist_ok=True)
    CFG_FILE.write_text("".join(f"{k} = {v!r}\n" for k, v in KNOBS.items()))
    cfg = load_exp_config(CFG_FILE)
    yield cfg
    swarm.down(cfg, LOCAL, log=print)
    shutil.rmtree(HOME, ignore_errors=True)
    assert DOCKER.containers.list(all=True, filters={"label": f"{swarm.LABEL}={DEPLOYMENT}"}) == []


def test_exp4_changes_the_regions_used_up_and_down_for_every_protocol(dep):
    # the job as `make main-all` starts it: image, bring-up, self-test, then the sweep in the driver
    p = subprocess.run([sys.executable, "run_experiments.py", "--only", "exp4", "--config", str(CFG_FILE),
                        "--out", str(OUT)], cwd=REPO, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert "not cleaned" not in out and "stopped answering" not in out, out[-6000:]
    metas = [(json.loads(m.read_text()), m.parent) for m in (OUT / "scalability").glob("*/meta.json")]
    metas.sort(key=lambda mr: mr[0]["runner_start_unix"])
    order = [(m["system"], m["x"]["value"]) for m, _ in metas]
    for meta, run in metas:
        nodes = yaml.safe_load((run / "deploy.yml").read_text())["nodes"]
        regions = len({n["region"] for n in nodes if n["kind"] == "replica"})
        assert regions == meta["x"]["value"], run
        assert meta["status"] == "ok", (run, meta.get("reason"))
        assert json.loads((run / "check.json").read_text())["verdict"] == "CONSISTENT", run
        # the run's containers, and only they, are recorded and were driven
        assert sorted(meta["containers"]) == [shard(r) for r in range(1, regions + 1)], (run, meta["containers"])
        assert meta["deployment_containers"] == 5 and meta["driver"]["containers"] == regions, run
    assert order == [(s, k) for s in SYSTEMS for k in (3, 4)], order   # down from 4 to 3 at each new protocol
    # nothing of any run is left in any container, the unused region's included
    for r in range(1, 5):
        rc, left = swarm.exec_run(DOCKER.containers.get(shard(r)),
                                  ["sh", "-c", "pgrep -a -x txn-server; pgrep -a -x txn-client; ls /tmp/edge-run; true"])
        assert left.strip() == "", (shard(r), left)
