"""One job per deployment.

Every job that uses or changes a deployment (bring-up, tear-down, self-test, a run, a sweep) holds its lock for
as long as it runs. The lock is an exclusive flock on /run/lock/edge-txn/<name>.lock: machine-wide, so two
checkouts of the project that share the one Docker deployment share the lock too, and released by the kernel
when its holder dies, however it dies. The driver container mounts the same folder, so a job started inside
it (`docker exec -i <driver> ...`) and one started on the host exclude each other.

A second job refuses at once with one line naming the holder (command, pid, since when) and how to stop it from
here (a pid in the driver container is `docker exec <driver> kill -INT <pid>` from the host), or, with --wait,
waits for it. A job started by a lock holder for the same deployment (the host's main job running the sweep in
the driver) inherits the lock through the environment variable EDGE_TXN_LOCK_TOKEN instead of taking it again.

Lock names: `swarm-<DEPLOYMENT>` for a container deployment, `local-<hash of the results folder>` for sweeps of
the local backend (two sweeps writing one results folder would overwrite each other's sweep.json and reuse
each other's unfinished runs).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import secrets
import sys
import time
from pathlib import Path

from testbed.core import interrupts
from testbed.core.paths import REPO

DEFAULT_DIR = Path("/run/lock/edge-txn")
ENV_DIR = "EDGE_TXN_LOCK_DIR"
ENV_TOKEN = "EDGE_TXN_LOCK_TOKEN"
DRIVER_STATE = Path("/etc/edge-txn/containers.yml")  # there only in the driver container (testbed/cluster/swarm.py)


class Busy(RuntimeError):
    """Another job holds the lock (the message names it)."""


def lock_dir() -> Path:
    d = Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)
    try:
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o1777)  # several users of one machine share the deployment, and so its lock
    except PermissionError:
        pass
    return d


def swarm_lock_name(deployment: str) -> str:
    return "swarm-" + deployment


def local_lock_name(out_root) -> str:
    return "local-" + hashlib.sha256(str(Path(out_root).resolve()).encode()).hexdigest()[:12]


def what_is_locked(name: str) -> str:
    kind, _, rest = name.partition("-")
    return {"swarm": f"deployment {rest!r}", "local": "this results folder"}.get(kind, name)


def driver_container() -> str | None:
    """The name of the driver container this process runs in (its EDGE_TXN_NAME), None on a host."""
    if not DRIVER_STATE.is_file():
        return None
    return os.environ.get("EDGE_TXN_NAME") or "<driver>"


def stop_hint(holder: dict | None) -> str:
    """How to send the holder SIGINT from where this process runs: a pid means something only in its container."""
    pid = (holder or {}).get("pid")
    if not pid:
        return "kill -INT its pid"
    theirs, ours = holder.get("container"), driver_container()
    if theirs and theirs != ours:
        return f"`docker exec {theirs} kill -INT {pid}`"
    if ours and not theirs:
        return f"`kill -INT {pid}` on host {holder.get('host', '?')}"
    return f"`kill -INT {pid}`"


def describe(holder: dict | None) -> str:
    if not holder:
        return "another job (it has not said which yet)"
    since = holder.get("since", "?")
    where = holder.get("where") or holder.get("host", "?")
    return f"`{holder.get('command', '?')}` (pid {holder.get('pid', '?')} in {where}, since {since})"


class JobLock:
    def __init__(self, name: str, command: str | None = None, directory: Path | None = None):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ValueError(f"lock name {name!r}: letters, digits and _.- only")
        self.name = name
        self.command = command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        self.path = (directory or lock_dir()) / f"{name}.lock"
        self.token = ""
        self.inherited = False
        self._fd: int | None = None

    def holder(self) -> dict | None:
        try:
            text = self.path.read_text()
            return json.loads(text) if text.strip() else None
        except (OSError, ValueError):
            return None

    def acquire(self, wait: bool = False, say=print) -> "JobLock":
        inherited = os.environ.get(ENV_TOKEN)
        if inherited and (self.holder() or {}).get("token") == inherited:
            self.token, self.inherited = inherited, True
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            os.fchmod(fd, 0o666)
        except PermissionError:
            pass
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise
            if not wait:
                os.close(fd)
                holder = self.holder()
                raise Busy(f"{what_is_locked(self.name)} is busy: {describe(holder)} holds it; wait for it to finish, "
                           f"stop it (Ctrl-C there, or {stop_hint(holder)}), or run again with --wait")
            if not announced:
                say(f"waiting for {describe(self.holder())} to release {what_is_locked(self.name)} (--wait) ...")
                announced = True
            try:
                interrupts.current().sleep(0.5)
            except BaseException:
                os.close(fd)
                raise
        self._fd = fd
        self.token = secrets.token_hex(8)
        container = driver_container()
        holder = {"token": self.token, "pid": os.getpid(), "command": self.command,
                  "since": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
                  "where": f"the driver container {container}" if container else f"host {platform.node()}",
                  "container": container, "checkout": str(REPO)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        return self

    def env(self) -> dict:
        """Environment for a child job that runs on this lock."""
        return {ENV_TOKEN: self.token}

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False
