"""Local backend: every replica, manager and client as a process on loopback (DESIGN §3).

LocalBackend.run(deploy, name) -> RunResult for results/<name>/<run-id>/ holding deploy.yml, config.json,
meta.json, logs/, servers/*.state.json, clients/*.records.csv, summary.json and check.json.
"""
from __future__ import annotations

import atexit
import json
import os
import platform
import resource
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import checker, deploy as deploylib, results

REPO = Path(__file__).resolve().parents[1]
_LIVE: dict[int, subprocess.Popen] = {}  # pgid -> process, every group this module started and not yet reaped


def _kill_all(sig=signal.SIGKILL) -> None:
    for pgid, proc in list(_LIVE.items()):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if sig == signal.SIGKILL:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            _LIVE.pop(pgid, None)


atexit.register(_kill_all)


class RunError(RuntimeError):
    def __init__(self, msg: str, run_dir: Path | None = None):
        super().__init__(msg)
        self.run_dir = run_dir


@dataclass
class RunResult:
    run_dir: Path
    summary: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)

    @property
    def consistent(self) -> bool:
        return self.check.get("exit_code") == 0


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + x for x in lines[-n:]) or "    (empty log)"


def _cmd(args) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=10, cwd=REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _git_sha() -> str | None:
    sha = _cmd(["git", "rev-parse", "HEAD"])
    if not sha:
        return None
    return sha + ("-dirty" if _cmd(["git", "status", "--porcelain", "--untracked-files=no"]) else "")


class _Proc:
    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.argv, self.log = name, argv, log
        with open(log, "wb") as f:
            self.p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        _LIVE[self.p.pid] = self.p

    def poll(self):
        return self.p.poll()

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

    def ready(self) -> bool:
        try:
            return f"READY {self.name} ".encode() in self.log.read_bytes()
        except OSError:
            return False

    def describe_exit(self) -> str:
        return f"{self.name} exited with code {self.p.returncode}; last lines of {self.log}:\n{_tail(self.log)}"


class LocalBackend:
    def __init__(self, build_dir=REPO / "build", ready_timeout_s: float = 30, grace_s: float = 20,
                 margin_s: float = 30, progress: bool = True):
        self.build_dir = Path(build_dir)
        self.ready_timeout_s, self.grace_s, self.margin_s, self.progress = ready_timeout_s, grace_s, margin_s, progress

    def _say(self, msg: str) -> None:
        if self.progress:
            print(msg, file=sys.stderr, flush=True)

    def run(self, deploy: dict, name: str, out_root="results", config: dict | None = None) -> RunResult:
        run_dir = Path(out_root) / name / new_run_id()
        for sub in ("logs", "servers", "clients"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
        cfg_path = deploylib.write_yaml(deploy, run_dir / "deploy.yml")
        (run_dir / "config.json").write_text(json.dumps(config if config is not None else deploy, indent=2) + "\n")
        meta = {"run_id": run_dir.name, "name": name, "backend": "local",
                "shaping": deploy.get("link", {}).get("mechanism"), "git_sha": _git_sha(),
                "kernel": platform.release(), "hostname": platform.node(), "command_line": sys.argv,
                "python": platform.python_version(), "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        procs: list[_Proc] = []
        old_handlers = {}
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)

        def on_signal(signum, _frame):
            raise RunError(f"interrupted by {signal.Signals(signum).name}", run_dir)

        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                old_handlers[s] = signal.signal(s, on_signal)
        try:
            meta["processes"] = self._execute(deploy, cfg_path, run_dir, procs)
            meta["status"] = "ok"
        except RunError as e:
            e.run_dir = run_dir
            meta.update(status="failed", error=str(e))
            raise
        except BaseException as e:
            meta.update(status="failed", error=f"{type(e).__name__}: {e}")
            raise
        finally:
            for p in procs:
                p.reap()
            _kill_all()  # anything started but not yet recorded in procs
            for s, h in old_handlers.items():
                signal.signal(s, h)
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            # CPU time of every reaped txn-server/txn-client of this run (user + system).
            meta["cpu_seconds"] = round((cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime), 3)
            meta["end_time"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        res = RunResult(run_dir)
        try:
            res.summary = results.summarize_run(run_dir)
        except (OSError, ValueError, KeyError) as e:
            raise RunError(f"cannot summarize the client records: {e}", run_dir) from e
        res.check = checker.check_run(run_dir)
        return res

    def _execute(self, deploy: dict, cfg: Path, run_dir: Path, procs: list[_Proc]) -> dict:
        srv_bin, cli_bin = self.build_dir / "txn-server", self.build_dir / "txn-client"
        for b in (srv_bin, cli_bin):
            if not os.access(b, os.X_OK):
                raise RunError(f"{b} is missing or not executable; build it with `make build`")
        nodes = deploy["nodes"]

        def start(node, binary, out):
            argv = [str(binary), "--config", str(cfg), "--name", node["name"], "--out", str(run_dir / out)]
            p = _Proc(node["name"], argv, run_dir / "logs" / f"{node['name']}.log")
            procs.append(p)
            return p

        servers = [start(n, srv_bin, "servers") for n in nodes if n["kind"] != "client"]
        self._say(f"started {len(servers)} server processes; waiting for READY")
        t0, pending = time.monotonic(), list(servers)
        while pending:
            for p in pending:
                if p.poll() is not None:
                    raise RunError(f"server {p.describe_exit()}")
            pending = [p for p in pending if not p.ready()]
            if pending and time.monotonic() - t0 > self.ready_timeout_s:
                raise RunError(f"no READY within {self.ready_timeout_s:g}s from: "
                               + ", ".join(p.name for p in pending[:8]) + f"; log of {pending[0].name}:\n"
                               + _tail(pending[0].log))
            time.sleep(0.05)
        self._say(f"all servers READY after {time.monotonic() - t0:.1f}s")

        c = deploy["client"]
        clients = [start(n, cli_bin, "clients") for n in nodes if n["kind"] == "client"]
        expected = float(c["duration_s"]) + float(c.get("drain_timeout_s", 10))
        limit = expected + self.margin_s
        self._say(f"started {len(clients)} client processes for {c['duration_s']:g}s")
        bar = None
        tty = sys.stderr.isatty()
        next_line = 5.0
        if self.progress and tty:
            from tqdm import tqdm
            bar = tqdm(total=round(float(c["duration_s"])), file=sys.stderr, leave=False, mininterval=1,
                       bar_format="  run {n:.0f}/{total:.0f}s |{bar}| elapsed {elapsed}, remaining {remaining}")
        t0 = time.monotonic()
        try:
            while True:
                for p in servers:
                    if p.poll() is not None:
                        raise RunError(f"server died mid-run: {p.describe_exit()}")
                for p in clients:
                    if p.poll() not in (None, 0):
                        raise RunError(f"client {p.describe_exit()}")
                if all(p.poll() == 0 for p in clients):
                    break
                el = time.monotonic() - t0
                if el > limit:
                    raise RunError(f"clients still running after {limit:g}s: "
                                   + ", ".join(p.name for p in clients if p.poll() is None))
                if bar is not None:
                    bar.n = min(el, bar.total)
                    bar.refresh()
                elif self.progress and el >= next_line:  # plain lines for logs (no terminal)
                    left = max(0.0, float(c["duration_s"]) - el)
                    self._say(f"  run {el:.0f}s elapsed, {left:.0f}s of the run left (then drain)")
                    next_line += 5.0
                time.sleep(0.2)
        finally:
            if bar is not None:
                bar.close()
        self._say(f"clients finished after {time.monotonic() - t0:.1f}s; stopping servers")

        for p in servers:
            p.signal(signal.SIGTERM)
        t0 = time.monotonic()
        while any(p.poll() is None for p in servers) and time.monotonic() - t0 < self.grace_s:
            time.sleep(0.1)
        killed = [p.name for p in servers if p.poll() is None]
        for p in servers:
            p.reap()
        if killed:
            raise RunError(f"servers did not exit within {self.grace_s:g}s of SIGTERM (killed): {', '.join(killed)}")
        bad = [p for p in servers if p.p.returncode != 0]
        if bad:
            raise RunError(f"server {bad[0].describe_exit()}")
        missing = [n["name"] for n in nodes if n["kind"] == "replica"
                   and not (run_dir / "servers" / f"{n['name']}.state.json").is_file()]
        if missing:
            raise RunError(f"replicas exited without a state dump: {', '.join(missing)}")
        return {p.name: {"argv": p.argv, "exit_code": p.p.returncode} for p in procs}
