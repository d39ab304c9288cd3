"""Where the main job runs (run_experiments.py): the local swarm when Docker is there, local processes otherwise.

On the host with --backend auto (Docker answers) or swarm: build the image if its sources changed, bring the
containers up (start_containers, idempotent: an existing deployment is reused), run the RTT self-test, then run
run_experiments.py again inside the driver container with --backend swarm. The checkout is mounted there, so
the run folders and figures land in this checkout's results/. The containers stay up for the next job
(`python start_containers.py --down` removes them).
"""
from __future__ import annotations

import subprocess
import sys

from .swarm_backend import inside_driver

REPO_IN_DRIVER = "/work/edge-txn"


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


def run_in_driver(script: str, argv: list[str], config=None, log=print) -> int:
    """Image, containers, self-test, then `python <script> argv --backend swarm` in the driver (script relative
    to the checkout)."""
    from . import swarm
    from .config import load_exp_config
    from .hosts import load_hosts
    from .selftest import swarm_self_test
    from .swarm import REPO
    cfg = load_exp_config(config)
    log(f"main job: image {cfg.image_name} (rebuilt only if its sources changed)")
    rc = subprocess.call(["bash", str(REPO / "docker" / "build_image.sh"), "--if-stale", cfg.image_name])
    if rc != 0:
        log("main job: the image build failed (see above)")
        return 2
    state = swarm.up(cfg, load_hosts(), log=log)
    if not swarm_self_test(cfg, state, log=log):
        log("main job: the RTT self-test failed: the emulated network is not what exp_config.py says; stopping")
        return 2
    driver = next(c["name"] for c in state["containers"] if c["role"] == "driver")
    tty = ["-t"] if sys.stdout.isatty() else []
    from .local import _git_sha
    # unbuffered: the driver's progress (stderr) and tables (stdout) arrive here in the order they were written
    sha = _git_sha()
    env = ["-e", "PYTHONUNBUFFERED=1"] + (["-e", f"EDGE_TXN_GIT_SHA={sha}"] if sha else [])
    cmd = ["docker", "exec", *tty, *env, driver, "python", script, *strip_backend(argv), "--backend", "swarm"]
    log(f"main job: {' '.join(cmd)}")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    for line in p.stdout:  # paths in the driver are paths of this checkout
        sys.stdout.write(line.replace(REPO_IN_DRIVER + "/", "").replace(REPO_IN_DRIVER, str(REPO)))
        sys.stdout.flush()
    rc = p.wait()
    log("main job: the containers stay up for the next run; remove them with "
        "`.venv/bin/python start_containers.py --down`")
    return rc
