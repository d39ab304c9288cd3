"""What every job does around its work: stop cleanly on signals, and hold the lock of what it uses.

    with job("swarm", out_root="results", wait=False) as stop:    # or "local"
        ... stop.check() ...

- swarm jobs (inside the driver container) hold the lock of the deployment (containers.yml's name), inherited
  from a host-side job that started them (testbed/core/lock.py); one the host launcher started stops when the host
  forwards a stop or goes away (its stdin, testbed/runs/driverexec.py); one started by hand runs to its end unless
  it gets a signal (Ctrl-C under `docker exec -it`, `docker exec <driver> kill -INT <pid>`);
- local jobs hold the lock of their results folder (two sweeps into one folder would mix their runs).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import yaml

from testbed.core import interrupts, knobs, lock
from testbed.runs.swarm_backend import DRIVER_CONTAINERS_YML, inside_driver


def deployment_in_driver() -> str:
    state = yaml.safe_load(DRIVER_CONTAINERS_YML.read_text()) or {}
    return str(state.get("deployment") or knobs.default("DEPLOYMENT"))


def lock_name(kind: str, out_root) -> str:
    if kind == "swarm":
        if not inside_driver():
            raise RuntimeError("the swarm backend runs inside the driver container (docker exec -i "
                               "<DEPLOYMENT>_driver ...) after start_containers.py")
        return lock.swarm_lock_name(deployment_in_driver())
    return lock.local_lock_name(Path(out_root))


@contextmanager
def job(kind: str, out_root="results", wait: bool = False, say=print):
    """kind: local | swarm (the backend the job's runs use). Yields the job's interrupts.Stop; raises lock.Busy
    when another job holds the lock (unless wait)."""
    with interrupts.stop_on_signals() as stop:
        interrupts.watch_stdin_if_asked(stop)
        with lock.JobLock(lock_name(kind, out_root)).acquire(wait, say=say):
            yield stop
