"""A deployment of the tests' own on a one-node swarm (2 regions x 1 shard and a driver; name `tst...`, its own
network and subnet, never a user's), and what the lifecycle and unattended tests drive it with: jobs on the host and
by hand in the driver, waiting for a run's clients, what is left running. Each test file that brings one up is a
Docker unit of its own (conftest.py) and runs beside the others, so each has a name and a subnet of its own."""
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from testbed.cluster import swarm
from testbed.cluster.hosts import Host
from testbed.core.config import load_exp_config

from conftest import IMAGE, REPO, docker_client, signals_as_from_a_terminal

DOCKER = docker_client()
LOCAL = [Host("localhost")]
RUN_ARGS = ["--warmup", "1", "--cooldown", "1", "--concurrency", "1", "--regions", "2", "--shards", "1",
            "--inter-rtt", "40"]


class OneNodeDeployment:
    def __init__(self, name: str, subnet_b: int, containers: str = "shard"):
        self.name = name
        self.knobs = dict(IMAGE_NAME=IMAGE, DEPLOYMENT=name, NETWORK_NAME=f"{name}_net", SUBNET=f"10.{subnet_b}.0.0/16",
                          DRIVER_IP=f"10.{subnet_b}.0.240", REGIONS=2, SHARDS_PER_REGION=1, SHAPING="app",
                          INTER_RTT_MS=40, SYSTEMS=["dast"], N_REPEAT=1, DURATION_S=8, WARMUP_S=1, COOLDOWN_S=1,
                          CONCURRENCY_LEVELS=[1], SCALABILITY_N_REGIONS=[2], ROBUST_RTT_VAR=[0],
                          **({"CONTAINERS": containers} if containers != "shard" else {}))
        self.home = REPO / "results" / "_tests" / name   # inside the checkout: the driver sees it
        self.cfg_file = self.home / "exp_config.py"
        self.out = self.home / "results"
        self.shards = [f"{name}_r1_s1", f"{name}_r2_s1"]
        # every container that runs engine processes: with CONTAINERS='replica' the followers' too (_f1, _f2)
        self.engines = [f"{c}{f}" for c in self.shards for f in (("", "_f1", "_f2") if containers == "replica"
                                                                  else ("",))]
        self.driver = f"{name}_driver"

    def brought_up(self):
        """For a module-scoped fixture: the deployment up (its config), then down, nothing of it left."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.cfg_file.write_text("".join(f"{k} = {v!r}\n" for k, v in self.knobs.items()))
        cfg = load_exp_config(self.cfg_file)
        state = swarm.up(cfg, LOCAL, log=print)
        yield cfg
        swarm.down(cfg, LOCAL, log=print)
        shutil.rmtree(self.home, ignore_errors=True)
        assert DOCKER.containers.list(all=True, filters={"label": f"{swarm.LABEL}={self.name}"}) == []
        assert state["deployment"] == self.name

    def in_container(self, name: str, cmd: str) -> str:
        return swarm.exec_run(DOCKER.containers.get(name), ["sh", "-c", cmd])[1]

    def engines_left(self, jobs: bool = True) -> dict:
        """Engine processes and run folders still in the containers that run them, and (jobs) python jobs still in
        the driver."""
        left = {}
        for c in self.engines:
            ct = DOCKER.containers.get(c)
            ct.reload()
            if ct.status == "running":
                out = self.in_container(c, "pgrep -a -x txn-server; pgrep -a -x txn-client; ls /tmp/edge-run "
                                           "2>/dev/null; true")
                if out.strip():
                    left[c] = out.strip()
        drv = DOCKER.containers.get(self.driver)
        drv.reload()
        if jobs and drv.status == "running":
            out = swarm.exec_run(drv, ["pgrep", "-af", "python.*(testbed|run_experiments)"])[1]
            if out.strip():
                left[self.driver] = out.strip()
        return left

    def host_run(self, name: str, *extra, duration=20, new_session=True) -> subprocess.Popen:
        """`run_local.py --backend swarm` on the host (it runs through the driver), output collected."""
        return subprocess.Popen([sys.executable, "run_local.py", "--backend", "swarm", "--config", str(self.cfg_file),
                                 "--out", str(self.out), "--name", name, "--duration", str(duration), *RUN_ARGS,
                                 *extra], cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=new_session, preexec_fn=signals_as_from_a_terminal)

    def by_hand(self, name: str, duration=20, tty=False) -> list[str]:
        """`docker exec -i[t] <driver> python -m testbed.cli ...`, the README's job by hand."""
        return ["docker", "exec", "-it" if tty else "-i", self.driver, "python", "-m", "testbed.cli", "--backend",
                "swarm", "--out", f"{swarm.DRIVER_MOUNT}/{self.out.relative_to(REPO)}", "--name", name,
                "--duration", str(duration), *RUN_ARGS]

    def wait_clients_running(self, name: str, timeout=60, p: subprocess.Popen | None = None) -> Path:
        """Once the run's clients run in a shard container: its run folder (meta.json says running)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if p is not None and p.poll() is not None:
                raise AssertionError(f"the job ended before its run got going:\n{p.communicate()[0]}")
            runs = list((self.out / name).glob("*/meta.json"))
            # a client process, or a shard process whose clients started (it says GO in its log)
            if runs and self.in_container(self.shards[-1], "pgrep -x txn-client || grep -l '^GO ' "
                                                           "/tmp/edge-run/*/logs/*.log 2>/dev/null || true").strip():
                time.sleep(1.5)
                return runs[0].parent
            time.sleep(0.3)
        raise AssertionError(f"the run {name} did not get going within {timeout}s")


def finish(p: subprocess.Popen, within: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    out, _ = p.communicate(timeout=within)
    return p.returncode, out, time.monotonic() - t0


def meta_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "meta.json").read_text())
