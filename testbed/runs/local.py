"""Local backend's runner: every replica, manager and client as a process on this machine (ARCHITECTURE.md), driven
through the shared run lifecycle (testbed/runs/lifecycle.py).

Each engine process gets its own process group (so its children die with it) and is tied to this launcher's
life with PR_SET_PDEATHSIG: if the launcher dies in any way, even SIGKILL, the kernel kills the process, so no
engine process outlives the job that started it.
"""
from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
from pathlib import Path

from testbed.core.interrupts import die_with_parent
from testbed.runs.lifecycle import Proc, Runner, client_out, engine_target, exit_description
from testbed.runs.memory import proc_memory
from testbed.core.runtypes import RunError
from testbed.core.paths import REPO

_LIVE: dict[int, subprocess.Popen] = {}  # pgid -> process, every group this module started and not yet reaped


def _kill_all(sig=signal.SIGKILL) -> None:
    for pgid, proc in list(_LIVE.items()):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        _LIVE.pop(pgid, None)


atexit.register(_kill_all)


class LocalProc(Proc):
    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.argv, self.log = name, argv, log
        with open(log, "wb") as f:
            self.p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True, preexec_fn=die_with_parent)
        _LIVE[self.p.pid] = self.p

    def poll(self):
        return self.p.poll()

    def memory(self) -> tuple[int, int] | None:
        return proc_memory(self.p.pid) if self.p.poll() is None else None

    def signal(self, sig) -> None:
        try:
            os.killpg(self.p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def reap(self) -> None:
        """Kill whatever is left of the process group and forget it."""
        self.signal(signal.SIGKILL)
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        _LIVE.pop(self.p.pid, None)

    def _says(self, line: str) -> bool:
        try:
            return line.encode() in self.log.read_bytes()
        except OSError:
            return False

    def ready(self) -> bool:
        return self._says(f"READY {self.name} ")

    def done(self) -> bool:
        return self._says(f"DONE {self.name}\n")

    def describe_exit(self) -> str:
        state = "is still running" if self.p.poll() is None else f"exited with code {self.p.returncode}"
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            text = "(no log)"
        return exit_description(self.name, state, text, str(self.log))


def orphaned_engines(out_root: Path) -> list[tuple[int, str]]:
    """(pid, command line) of txn-server/txn-client processes whose deployment file lies under out_root and whose
    launcher is gone (their parent is init): what an earlier local run left behind."""
    found, root = [], Path(out_root).resolve()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
            stat = Path(f"/proc/{pid}/stat").read_text()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if not argv or Path(argv[0]).name not in ("txn-server", "txn-client") or "--config" not in argv[:-1]:
            continue
        m = re.match(r".*\) (\S) (\d+)", stat, re.S)
        if not m or m.group(1) == "Z" or int(m.group(2)) != 1:
            continue
        cfg = Path(cwd, argv[argv.index("--config") + 1]).resolve()
        if root in cfg.parents:
            found.append((int(pid), " ".join(argv)))
    return found


class LocalRunner(Runner):
    backend_name = "local"
    measures_cpu = True  # CPU seconds of the run's processes (children of this process)

    def __init__(self, build_dir=REPO / "build", **opts):
        super().__init__(**opts)
        self.build_dir = Path(build_dir)
        self._bins: dict[str, Path] = {}

    def prepare(self, deploy, cfg_path, run_dir):
        self._bins = {"server": self.build_dir / "txn-server", "client": self.build_dir / "txn-client"}
        for b in self._bins.values():
            if not os.access(b, os.X_OK):
                raise RunError(f"{b} is missing or not executable; build it with `make build`")
        left = orphaned_engines(Path(run_dir).parents[1])
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if left:
            self.say(f"stopped {len(left)} engine process(es) an earlier run left behind (its launcher died), "
                     f"e.g. {left[0][1][:120]}")

    def engine_binaries(self):
        return {"txn-server": self.build_dir / "txn-server", "txn-client": self.build_dir / "txn-client"}

    def replay_binary(self):
        """The build's own txn-replay, beside its txn-server (a run of another build, e.g. `make bench --build-dir`,
        is checked with that build's log format and workload code); the checkout's when that build has none."""
        b = self.build_dir / "txn-replay"
        return b if os.access(b, os.X_OK) else None

    def spawn(self, node, role, cfg_path, run_dir, out, extra):
        argv = [str(self._bins[role]), "--config", str(cfg_path), *engine_target(node),
                "--out", str(run_dir / out), *client_out(node, str(run_dir / "clients")), *extra]
        name = node.get("proc_name", node["name"])   # a restarted node's process: <node>+restart, +restart2, ...
        return LocalProc(name, argv, run_dir / "logs" / f"{name}.log")

    def teardown(self, run_dir, procs):
        for p in procs:
            p.reap()
        _kill_all()  # anything started but not yet recorded in procs
        return []
