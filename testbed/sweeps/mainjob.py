"""Where the main job runs (run_experiments.py): the local swarm when Docker is there, local processes otherwise.

On the host with --backend auto (Docker answers) or swarm, holding the deployment's lock (testbed/core/lock.py) for
the whole job: build the image if its sources changed, bring the containers up (start_containers, idempotent: an
existing deployment is reused or repaired), run the RTT self-test, then run the same script again inside the
driver container with --backend swarm (testbed/runs/driverexec.py: Ctrl-C, SIGTERM and SIGHUP here stop it there).
The checkout is mounted in the driver, so the run folders and figures land in this checkout's results/. The
containers stay up for the next job (`make down` removes them).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

from tenacity import stop_after_delay

from testbed.cluster import swarm
from testbed.cluster.cluster import Cluster
from testbed.cluster.hosts import load_hosts
from testbed.core import gitinfo, interrupts, lock, presets
from testbed.core.config import load_exp_config
from testbed.core.polling import poll
from testbed.core.runtypes import Interrupted
from testbed.runs.driverexec import (ENV_JOB, REPO_IN_DRIVER as _DRIVER_REPO, container_state, exec_in_driver,
                                     new_job_id, record_cut_off, relay_paths)
from testbed.runs.selftest import swarm_self_test
from testbed.runs.swarm_backend import inside_driver


def docker_available() -> tuple[bool, str]:
    try:
        import docker
        c = docker.from_env(timeout=10)
        c.ping()
        c.close()
        return True, "Docker answers"
    except Exception as e:  # noqa: BLE001 -- any failure means: no usable daemon
        return False, f"no Docker daemon ({str(e).splitlines()[0][:120] if str(e) else type(e).__name__})"


def choose(kind: str, log=print) -> str:
    """local | swarm-here (this process is the driver) | swarm-via-driver (bring up, then exec in the driver)."""
    if inside_driver():
        return "local" if kind == "local" else "swarm-here"
    if kind == "local":
        return "local"
    ok, why = docker_available()
    if kind == "auto":
        log(f"backend: {'the local Docker swarm' if ok else 'local processes'} ({why}; --backend local|swarm "
            "chooses)")
        return "swarm-via-driver" if ok else "local"
    if not ok:
        raise RuntimeError(f"--backend swarm: {why}; start Docker or use --backend local")
    return "swarm-via-driver"


def strip_backend(argv: list[str]) -> list[str]:
    """argv without --backend X / --backend=X (the driver gets --backend swarm)."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
        elif x == "--backend":
            skip = True
        elif not x.startswith("--backend="):
            out.append(x)
    return out


PATH_OPTIONS = ("--config", "--out")
REPO_IN_DRIVER = PurePosixPath(_DRIVER_REPO)


def driver_argv(argv: list[str], repo: Path, cwd: Path | None = None) -> list[str]:
    """argv for the job in the driver: the values of --config and --out (paths on this machine) become the same
    paths in the checkout mounted there; ValueError for one outside the checkout (the driver cannot see it)."""
    cwd = Path(cwd or os.getcwd())

    def convert(opt: str, value: str) -> str:
        path = (cwd / value).resolve()
        if path != repo and repo not in path.parents:
            raise ValueError(f"{opt} {value}: must lie inside the checkout {repo} (the driver container sees only it)")
        return str(REPO_IN_DRIVER / path.relative_to(repo))

    out, i = [], 0
    while i < len(argv):
        x = argv[i]
        name, eq, val = x.partition("=")
        if name in PATH_OPTIONS and eq:
            out.append(f"{name}={convert(name, val)}")
        elif x in PATH_OPTIONS and i + 1 < len(argv):
            out += [x, convert(x, argv[i + 1])]
            i += 1
        else:
            out.append(x)
        i += 1
    return out


def run_killable(argv: list[str], stop: interrupts.Stop) -> int:
    """Run a host command (its output goes straight through); a stop request kills its process group."""
    p = subprocess.Popen(argv, start_new_session=True, preexec_fn=interrupts.die_with_parent)
    while p.poll() is None:
        if stop.requested:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
            stop.check()
        try:
            p.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
    return p.returncode


def run_in_driver(script: str, argv: list[str], config=None, log=print, wait: bool = False,
                  preset: str | None = None) -> int:
    """Image, containers, self-test, then `python <script> argv --backend swarm` in the driver (script relative
    to the checkout). The containers are those of the config with the preset over it (argv carries --preset to
    the job). Returns the job's exit code (128 + signal when stopped by one)."""
    cfg = presets.apply(load_exp_config(config), preset)
    hosts = load_hosts()
    cmd_line = " ".join([os.path.basename(sys.argv[0]), *argv])
    try:   # before anything is built, locked or touched: another checkout's deployment is not ours to use
        swarm.ensure_owner(cfg, hosts)
    except swarm.NotOwner as e:
        log(f"main job: {e}")
        return 2
    except swarm.SwarmError:
        pass   # Docker not answering: the bring-up below says so in its own words
    try:
        with interrupts.stop_on_signals(say=log) as stop, \
                lock.JobLock(lock.swarm_lock_name(cfg.deployment), cmd_line).acquire(wait, say=log) as held:
            log(f"main job: image {cfg.image_name} (rebuilt only if its sources changed)")
            if run_killable(["bash", str(swarm.REPO / "docker" / "build_image.sh"), "--if-stale", cfg.image_name],
                            stop) != 0:
                log("main job: the image build failed (see above)")
                return 2
            state = swarm.up(cfg, hosts, log=log)
            stop.check()
            if not swarm_self_test(cfg, state, log=log, env=held.env(), reuse="--fresh" not in argv):
                log("main job: the RTT self-test failed: the emulated network is not what exp_config.py says; "
                    "stopping")
                return 128 + stop.signum if stop.requested else 2
            driver, job_id, t0 = Cluster(state).driver.name, new_job_id(), time.time()
            env = {**held.env(), **gitinfo.host_env(), ENV_JOB: job_id}
            job = ["python", script, *driver_argv(strip_backend(argv), swarm.REPO), "--backend", "swarm"]
            log(f"main job: docker exec -i {driver} {' '.join(job)}")
            rc = exec_in_driver(driver, job, env, line_filter=relay_paths(str(swarm.REPO)), stop=stop)
            if rc != 0:
                _after_bad_exit(driver, hosts, state, log, rc, (out_root(argv, swarm.REPO), job_id, t0))
            log("main job: the containers stay up for the next run; `make down` removes them")
            return rc
    except (lock.Busy, ValueError) as e:
        log(f"main job: {e}")
        return 2
    except Interrupted as e:
        log(f"main job: {e}; nothing was left running")
        return e.exit_code


def out_root(argv: list[str], repo: Path, cwd: Path | None = None) -> Path:
    """The results folder of a job's argv on this machine (--out, else the checkout's results/)."""
    for i, x in enumerate(argv):
        if x.startswith("--out="):
            return Path(cwd or os.getcwd()) / x.partition("=")[2]
        if x == "--out" and i + 1 < len(argv):
            return Path(cwd or os.getcwd()) / argv[i + 1]
    return repo / "results"


def _after_bad_exit(driver: str, hosts, state: dict, log, rc: int = 1, job: tuple | None = None,
                    settle_s: float = 5.0) -> None:
    """The job in the driver ended badly (or was stopped): name the cause when the job died without a word (the
    driver container stopped or killed, or the job itself killed: exit 137), record the runs it left `running` as
    failed with that cause (job: (results folder, job id, start time)), and stop whatever engine processes it left
    in the shard containers. When the job was killed by a signal (rc >= 128), `docker stop` may end the exec before
    Docker marks the container exited: its state is then asked again for up to `settle_s`."""
    where = poll(lambda: container_state(driver), stop_after_delay(settle_s if rc >= 128 else 0), 0.2,
                 done=lambda state: state != "running")
    cause, then = None, ""
    if where and where != "running":
        cause = f"the driver container {driver} {where} during the job"
        then = "; the next `make main` (or `make up`) replaces the driver"
    elif where == "running" and rc == 137:
        cause = f"the job in {driver} was killed (SIGKILL, exit 137: kill -9, or the kernel's OOM killer)"
    if cause:
        runs = record_cut_off(job[0], job[1], f"cut off: {cause}", job[2] - 1) if job else []
        shown = ", ".join(_shown(r) for r in runs)
        log(f"{cause}: " + (f"its run {shown} recorded as failed" if len(runs) == 1 else
                            f"its {len(runs)} runs left running recorded as failed ({shown})" if runs else
                            "it left no run running in this checkout") + then)
    left = swarm.stop_engines(hosts, state)
    if left:
        log("stopped engine processes the job left behind: " + ", ".join(f"{n} in {c}" for c, n in sorted(left.items())))


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_job_in_driver(job_argv: list[str], config=None, wait: bool = False, log=print) -> int:
    """A one-off job (e.g. `python -m testbed.cli ...`) in the driver of the deployment that is up (DEPLOYMENT of
    the config; its containers.yml in this checkout), holding the deployment's lock; Ctrl-C here stops it there."""
    cfg = load_exp_config(config)
    path = swarm.state_paths(cfg.deployment)[1]
    state = swarm.load_state(path)
    try:  # up from (or taken over by) another checkout: its driver would write there and run that code
        swarm.ensure_owner(cfg, load_hosts(), (state or {}).get("deployment"))
    except swarm.SwarmError as e:
        if state is not None or isinstance(e, swarm.NotOwner):   # (not up, and Docker unreachable: said below)
            log(f"error: {e}")
            return 2
    if state is None:
        log(f"error: {path.name} not found: deployment is not up; `make up` brings it up")
        return 2
    cluster = Cluster(state)
    driver = cluster.driver.name
    try:
        with interrupts.stop_on_signals(say=log) as stop, \
                lock.JobLock(lock.swarm_lock_name(cluster.deployment)).acquire(wait, say=log) as held:
            job_id, t0 = new_job_id(), time.time()
            env = {**held.env(), **gitinfo.host_env(), ENV_JOB: job_id}
            rc = exec_in_driver(driver, driver_argv(job_argv, swarm.REPO), env,
                                line_filter=relay_paths(str(swarm.REPO)), stop=stop)
            if rc != 0:
                _after_bad_exit(driver, load_hosts(), state, log, rc, (out_root(job_argv, swarm.REPO), job_id, t0))
            return rc
    except (lock.Busy, ValueError) as e:
        log(f"error: {e}")
        return 2
