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
    def __init__(self, msg: str, run_dir: Path | None = None, interrupted: bool = False):
        super().__init__(msg)
        self.run_dir = run_dir
        self.interrupted = interrupted  # stopped by SIGINT/SIGTERM, not a failure of the run itself


@dataclass
class RunResult:
    run_dir: Path
    summary: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)

    probe: dict = field(default_factory=dict)  # RTT self-test runs: selftest.probe_matrix() of the probe files

    @property
    def consistent(self) -> bool:
        return self.check.get("exit_code") == 0


def cpu_times() -> list[int] | None:
    """The machine's aggregate CPU times from /proc/stat (user nice system idle iowait irq softirq steal ...)."""
    try:
        with open("/proc/stat") as f:
            first = f.readline().split()
        return [int(x) for x in first[1:9]] if first and first[0] == "cpu" else None
    except (OSError, ValueError):
        return None


def cpu_shares(before, after) -> dict:
    """{busy_pct, steal_pct} of the machine's CPU time between two cpu_times() readings (steal: time the
    hypervisor gave to other guests; a run with much of it measured a slower machine than it had)."""
    if not before or not after:
        return {}
    d = [b - a for a, b in zip(before, after)]
    total = sum(d)
    if total <= 0:
        return {}
    idle = d[3] + d[4]
    return {"busy_pct": round(100.0 * (total - idle - d[7]) / total, 1), "steal_pct": round(100.0 * d[7] / total, 1)}


STEAL_WARN_PCT = 10


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
    if os.environ.get("EDGE_TXN_GIT_SHA"):  # set by the host for runs driven from the driver container (no git)
        return os.environ["EDGE_TXN_GIT_SHA"]
    sha = _cmd(["git", "rev-parse", "HEAD"])
    if not sha:
        return None
    return sha + ("-dirty" if _cmd(["git", "status", "--porcelain", "--untracked-files=no"]) else "")


class _SpawnGuard:
    """Defers the run's SIGINT/SIGTERM handler while a child process is being started and registered."""
    active = False
    pending: int | None = None

    def raise_pending(self) -> None:
        sig, self.pending = self.pending, None
        if sig is not None:
            raise RunError(f"interrupted by {signal.Signals(sig).name}", interrupted=True)


_SPAWN = _SpawnGuard()


class _Proc:
    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.argv, self.log = name, argv, log
        # an interrupt arriving while the child starts is held until it is registered, so it cannot orphan it
        _SPAWN.active = True
        try:
            with open(log, "wb") as f:
                self.p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
            _LIVE[self.p.pid] = self.p
        finally:
            _SPAWN.active = False
        _SPAWN.raise_pending()

    def poll(self):
        return self.p.poll()

    @property
    def returncode(self):
        return self.p.returncode

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

    backend_name = "local"
    measures_cpu = True  # CPU seconds of the run's processes (children of this process)

    def run(self, deploy: dict, name: str, out_root="results", config: dict | None = None,
            meta_extra: dict | None = None, run_id: str | None = None, probe: int = 0) -> RunResult:
        """meta_extra: keys merged into meta.json (e.g. the experiment point); run_id: default new_run_id().
        probe > 0: an RTT self-test instead of the workload (clients run `txn-client --probe N`)."""
        run_dir = Path(out_root) / name / (run_id or new_run_id())
        for sub in ("logs", "servers", "clients"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
        cfg_path = deploylib.write_yaml(deploy, run_dir / "deploy.yml")
        (run_dir / "config.json").write_text(json.dumps(config if config is not None else deploy, indent=2) + "\n")
        meta = {"run_id": run_dir.name, "name": name, "backend": self.backend_name, "probe": probe or None,
                "shaping": deploy.get("link", {}).get("mechanism"), "git_sha": _git_sha(),
                "kernel": platform.release(), "hostname": platform.node(), "command_line": sys.argv,
                "python": platform.python_version(), "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                **(meta_extra or {})}
        procs: list[_Proc] = []
        old_handlers = {}
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        machine0 = cpu_times()

        def on_signal(signum, _frame):
            if _SPAWN.active:  # raised by _Proc once the child is registered (and so killed on the way out)
                _SPAWN.pending = signum
                return
            raise RunError(f"interrupted by {signal.Signals(signum).name}", run_dir, interrupted=True)

        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                old_handlers[s] = signal.signal(s, on_signal)
        try:
            meta["processes"] = self._execute(deploy, cfg_path, run_dir, procs, probe)
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
            self._cleanup(run_dir)
            for s, h in old_handlers.items():
                signal.signal(s, h)
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            # CPU time of every reaped txn-server/txn-client of this run (user + system).
            meta["cpu_seconds"] = (round((cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime), 3)
                                   if self.measures_cpu else None)
            meta["end_time"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            meta["machine_cpu"] = cpu_shares(machine0, cpu_times())
            if meta["machine_cpu"].get("steal_pct", 0) > STEAL_WARN_PCT:
                self._say(f"warning: the hypervisor took {meta['machine_cpu']['steal_pct']:.0f} % of this machine's "
                          "CPU time during the run (steal); its latencies carry that")
            (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        res = RunResult(run_dir)
        if probe:
            from .selftest import probe_matrix
            res.probe = probe_matrix(run_dir, int(deploy["regions"]))
            return res
        try:
            res.summary = results.summarize_run(run_dir)
        except (OSError, ValueError, KeyError) as e:
            raise RunError(f"cannot summarize the client records: {e}", run_dir) from e
        res.check = checker.check_run(run_dir)
        return res

    # ---- hooks a remote runner (swarm_backend) overrides
    def _prepare(self, deploy: dict, cfg: Path, run_dir: Path) -> None:
        self._bins = {"server": self.build_dir / "txn-server", "client": self.build_dir / "txn-client"}
        for b in self._bins.values():
            if not os.access(b, os.X_OK):
                raise RunError(f"{b} is missing or not executable; build it with `make build`")

    def _spawn(self, node: dict, role: str, cfg: Path, run_dir: Path, out: str, extra: list[str]):
        argv = [str(self._bins[role]), "--config", str(cfg), "--name", node["name"], "--out", str(run_dir / out),
                *extra]
        return _Proc(node["name"], argv, run_dir / "logs" / f"{node['name']}.log")

    def _tick(self) -> None:
        """Called before each round of poll()/ready() checks (a remote runner refreshes its view here)."""

    def _collect(self, run_dir: Path) -> None:
        """After every process exited: bring outputs into run_dir (local processes wrote them there)."""

    def _cleanup(self, run_dir: Path) -> None:
        _kill_all()  # anything started but not yet recorded in procs

    def _execute(self, deploy: dict, cfg: Path, run_dir: Path, procs: list, probe: int = 0) -> dict:
        self._prepare(deploy, cfg, run_dir)
        nodes = deploy["nodes"]

        def start(node, role, out, extra=()):
            p = self._spawn(node, role, cfg, run_dir, out, list(extra))
            procs.append(p)
            return p

        servers = [start(n, "server", "servers") for n in nodes if n["kind"] != "client"]
        self._say(f"started {len(servers)} server processes; waiting for READY")
        t0, pending = time.monotonic(), list(servers)
        while pending:
            self._tick()
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
        if probe:  # one prober per region (the first client of its first shard)
            firsts = {}
            for n in nodes:
                if n["kind"] == "client":
                    firsts.setdefault(n["region"], n)
            clients = [start(n, "client", "clients", ["--probe", str(probe)]) for n in firsts.values()]
            expected = 15.0
        else:
            clients = [start(n, "client", "clients") for n in nodes if n["kind"] == "client"]
            expected = float(c["duration_s"]) + float(c.get("drain_timeout_s", 10))
        limit = expected + self.margin_s
        self._say(f"started {len(clients)} client processes for {c['duration_s']:g}s")
        bar = None
        tty = sys.stderr.isatty() and not probe
        next_line = 5.0
        if self.progress and tty:
            from tqdm import tqdm
            bar = tqdm(total=round(float(c["duration_s"])), file=sys.stderr, leave=False, mininterval=1,
                       bar_format="  run {n:.0f}/{total:.0f}s |{bar}| elapsed {elapsed}, remaining {remaining}")
        t0 = time.monotonic()
        try:
            while True:
                self._tick()
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
        while time.monotonic() - t0 < self.grace_s:
            self._tick()
            if all(p.poll() is not None for p in servers):
                break
            time.sleep(0.1)
        killed = [p.name for p in servers if p.poll() is None]
        for p in servers:
            p.reap()
        if killed:
            raise RunError(f"servers did not exit within {self.grace_s:g}s of SIGTERM (killed): {', '.join(killed)}")
        self._collect(run_dir)
        bad = [p for p in servers if p.returncode != 0]
        if bad:
            raise RunError(f"server {bad[0].describe_exit()}")
        missing = [] if probe else [n["name"] for n in nodes if n["kind"] == "replica"
                                    and not (run_dir / "servers" / f"{n['name']}.state.json").is_file()]
        if missing:
            raise RunError(f"replicas exited without a state dump: {', '.join(missing)}")
        return {p.name: {"argv": p.argv, "exit_code": p.returncode} for p in procs}
