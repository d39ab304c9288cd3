"""The run lifecycle both backends share: prepare -> start servers -> start clients -> drain -> collect -> check ->
record (docs/running.md, "The results folder": what a run folder holds).

A backend supplies the processes (LocalRunner in testbed/runs/local.py: processes on this machine; SwarmRunner in
testbed/runs/swarm_backend.py: processes in the containers, over SSH) through a few hooks; everything else -- the
order of the phases, the waits and their limits, progress, the verdict, and cleanup -- lives here once:

- meta.json is written when the run starts (status `running`) and rewritten on every way out: ok, failed with the
  reason, or interrupted. A folder still saying `running` was cut off (its job was killed) and counts as failed.
- Cleanup (Runner.teardown) runs on every path, is bounded in time, and never raises: one dead container does
  not stop the others from being cleaned.
- Ctrl-C, SIGTERM and SIGHUP stop the run at the next poll (testbed/core/interrupts.py); the run is recorded as
  interrupted and Interrupted is raised (exit code 128 + signal).
- A finished run is summarised (summary.json), checked (check.json) and given its verdict here, so every caller
  (run_local.py, the sweep runner, the self-test) sees the same one in RunResult.status/reason and meta.json.
"""
from __future__ import annotations

import functools
import json
import os
import platform
import resource
import signal
import sys
import time
import traceback
from abc import ABC, abstractmethod
from pathlib import Path

from tenacity import stop_before_delay

from testbed.analysis import checker, derived, results, validate
from testbed.core import deploy as deploylib, files, gitinfo, interrupts, rtt
from testbed.core.faults import node_of_process, restarted_process
from testbed.analysis.rundirs import verdict, write_json
from testbed.core.runtypes import Interrupted, RunError, RunResult, new_run_dir
from testbed.core.polling import poll
from testbed.runs.memory import INTERVAL_S as MEMORY_INTERVAL_S, MemorySampler
from testbed.runs.nemesis import LOAD_START, Nemesis

STEAL_WARN_PCT = 10
PROGRESS_EVERY_S = 5.0


# ---------------------------------------------------------------- facts about the machine

def cpu_times() -> dict | None:
    """The machine's aggregate CPU times from /proc/stat (clock ticks: user nice system idle iowait irq softirq
    steal ...), how many CPUs they sum over, and the monotonic clock in the same unit."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
        first = lines[0].split() if lines else []
        if not first or first[0] != "cpu":
            return None
        cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        return {"ticks": [int(x) for x in first[1:9]], "cpus": cpus,
                "wall": time.monotonic() * os.sysconf("SC_CLK_TCK")}
    except (OSError, ValueError, IndexError):
        return None


def cpu_shares(before, after) -> dict:
    """{busy_pct, steal_pct} of the machine's CPU time between two cpu_times() readings (steal: time the
    hypervisor gave to other guests; a run with much of it measured a slower machine than it had). Busy is what
    the wall clock had that was neither idle nor stolen: the kernel counts idle time exactly (a tickless kernel),
    but user and system time by sampling at its ticks, which misses a process that wakes in step with them (one
    that waits on a grid of the monotonic clock: 0.6 % busy by the ticks, 14.7 % by the wall clock, measured)."""
    if not before or not after or not before.get("cpus"):
        return {}
    d = [b - a for a, b in zip(before["ticks"], after["ticks"])]
    wall = (after["wall"] - before["wall"]) * before["cpus"]
    if wall <= 0 or len(d) < 8:
        return {}
    idle, steal = d[3] + d[4], d[7]
    busy = min(100.0, max(0.0, 100.0 * (1 - (idle + steal) / wall)))
    return {"busy_pct": round(busy, 1), "steal_pct": round(min(100.0, 100.0 * steal / wall), 1)}


def git_sha() -> str | None:
    """The code version of the checkout that runs (testbed/core/gitinfo.py: also in the driver, which has no git)."""
    return gitinfo.code_version()


def tail_lines(text: str, n: int = 15) -> str:
    lines = text.splitlines()[-n:]
    return "\n".join("    " + x for x in lines) or "    (empty log)"


def exit_description(name: str, state: str, log_text: str, where: str) -> str:
    """`<name> <state>: <the engine's own error line>; last lines of <where>:` then the log's last lines. The error
    line (`txn-server: error: cannot write ...`, the last such line of the log) is on the first line, which is what
    a run's recorded reason keeps."""
    said = [x.strip() for x in log_text.splitlines() if ": error: " in x and x.split(":", 1)[0].startswith("txn-")]
    return f"{name} {state}" + (f": {said[-1]}" if said else "") + f"; last lines of {where}:\n{tail_lines(log_text)}"


def killed_from_outside(code, host_gone: str | None = None) -> str | None:
    """How a process that exited mid-run with `code` was stopped from outside -- SIGKILL, as `kill -9`, `docker
    kill`, the OOM killer and a crash fault do (-9 locally; 137, 128 + 9, through the swarm's `timeout` wrapper;
    CONTAINER_GONE: its container is gone, described by host_gone when the backend could say more, e.g. `its
    container is gone: edge_r1_s1_f1 exited (137) at ...`), or a stop before the drain (exit 0) -- or None: the
    engine's own failure (an error exit, a crash of its own). One line."""
    if code == CONTAINER_GONE:
        said = (host_gone or "").strip().splitlines()
        return said[0] if said else "its container is gone"
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return f"killed by SIGKILL (exit status {code})"
    if code == 0:
        return "exited with code 0 before the run's end (stopped from outside)"
    return None


CONTAINER_GONE = -1000   # a Proc's poll() when its container is gone (the swarm's: docker kill, a host lost)


# ---------------------------------------------------------------- what a backend provides

def engine_target(node: dict) -> list[str]:
    """The engine's arguments naming what one process runs: a process of several nodes, or one node."""
    return ["--process", node["name"]] if node.get("nodes") else ["--name", node["name"]]


def engine_processes(nodes: list[dict], clients: bool) -> list[dict]:
    """The processes to start for the servers (clients=False: every process with a server, txn-server) or the
    clients of a deployment (processes of clients only, txn-client): a node that runs alone as itself, a process of
    several nodes as {name, host, nodes, clients} (testbed/core/deploy.py assign_processes); `clients` is true for a
    server process that runs clients too, which start when it gets SIGUSR1 and print `DONE <process>`."""
    out = []
    for name, members in deploylib.processes(nodes):
        kinds = {m["kind"] == "client" for m in members}
        if (kinds == {True}) != clients:
            continue
        out.append(members[0] if len(members) == 1 and name == members[0]["name"]
                   else {"name": name, "host": members[0]["host"], "nodes": [m["name"] for m in members],
                         "clients": len(kinds) == 2})
    return out


def client_out(node: dict, clients_dir: str) -> list[str]:
    """The engine arguments for where a server process's clients write (none for others)."""
    return ["--client-out", clients_dir] if node.get("clients") else []



def engine_usage_from_facts(run_dir: Path) -> dict:
    """{cpu_seconds, engine_wakeups} of a finished run's engine processes from what each said about itself (the
    `process` facts in servers/*.state.json and clients/*.summary.json: its rusage when it wrote the file, docs/
    checker.md), each process counted once, by its last (largest) word; {} when a file is unreadable or a process
    said nothing (an engine from before the facts carried it)."""
    last: dict[str, tuple[float, int]] = {}
    files = sorted(Path(run_dir).glob("servers/*.state.json")) + sorted(Path(run_dir).glob("clients/*.summary.json"))
    for f in files:
        try:
            p = json.loads(f.read_text()).get("process") or {}
        except (OSError, ValueError):
            return {}
        cpu, switches = p.get("cpu_s"), p.get("voluntary_switches")
        if not isinstance(cpu, (int, float)) or not isinstance(switches, int) or "name" not in p:
            return {}
        last[p["name"]] = max(last.get(p["name"], (0.0, 0)), (float(cpu), switches))
    if not last:
        return {}
    return dict(cpu_seconds=round(sum(c for c, _ in last.values()), 3),
                engine_wakeups=sum(w for _, w in last.values()))

class Proc(ABC):
    """One engine process of a run (txn-server or txn-client)."""
    name: str
    argv: list

    @abstractmethod
    def poll(self) -> int | None:
        """Exit code once it exited, else None (as the runner last saw it)."""

    @abstractmethod
    def ready(self) -> bool:
        """True once it printed READY (servers)."""

    @abstractmethod
    def signal(self, sig) -> None:
        """Send sig to the process (best effort)."""

    @abstractmethod
    def done(self) -> bool:
        """True once it printed DONE (a server process whose clients finished)."""

    @abstractmethod
    def describe_exit(self) -> str:
        """`<name> exited with code N ...; last lines of its log: ...`"""

    def memory(self) -> tuple[int, int] | None:
        """Its resident memory now and the private part of it, in bytes, where the backend can read them from
        outside (local: /proc), else None."""
        return None

    def lost_how(self) -> str | None:
        """What the backend saw of the end of the process's host when it went with it (a container gone: what
        Docker says of it), else None."""
        return None


@functools.lru_cache(maxsize=16)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    return "sha256:" + derived.sha256(Path(path))


def engine_digest(path: Path) -> str | None:
    """`sha256:<hex>` of a program (hashed once per version of the file), None when it cannot be read."""
    try:
        st = os.stat(path)
        return _digest(str(path), st.st_size, st.st_mtime_ns)
    except OSError:
        return None


class Runner(ABC):
    """The lifecycle; subclasses implement the hooks below for where the processes run."""
    backend_name = ""
    _nemesis = None   # set once the run's servers are READY (not in a probe): from then a process gone is a loss
    measures_cpu = False  # CPU seconds of the run's processes are known (children of this process)
    load_start_lead_s = 0.0  # a faulted run's load start is this far ahead of when it is fixed (docs/nemesis.md)

    def __init__(self, ready_timeout_s: float = 30, grace_s: float = 20, margin_s: float = 30,
                 progress: bool = True, memory_interval_s: float = MEMORY_INTERVAL_S):
        self.ready_timeout_s, self.grace_s, self.margin_s, self.progress = ready_timeout_s, grace_s, margin_s, progress
        self.memory_interval_s = memory_interval_s   # every server process's resident memory this often

    # ---- hooks
    @abstractmethod
    def prepare(self, deploy: dict, cfg_path: Path, run_dir: Path) -> None:
        """Make the run possible (binaries, connections, the deployment file in place) and stop whatever an
        earlier run left behind (saying so). RunError when the run cannot start."""

    @abstractmethod
    def spawn(self, node: dict, role: str, cfg_path: Path, run_dir: Path, out: str, extra: list[str]) -> Proc:
        """Start one engine process (role server|client) writing its outputs to run_dir/<out>: of the node, or,
        when node has `nodes`, of the deployment's process named node['name'] (see engine_target)."""

    def spawn_many(self, items: list, cfg_path: Path, run_dir: Path, started, check) -> list:
        """spawn() for each (node, role, out, extra) of items; returns the processes in the items' order. started(p)
        is called as each one starts (so that teardown knows it even when a later one fails), check() before each
        (it raises on a stop request). One after the other here; a backend that can start them at once overrides."""
        out = []
        for node, role, o, extra in items:
            check()
            p = self.spawn(node, role, cfg_path, run_dir, o, list(extra))
            started(p)
            out.append(p)
        return out

    def refresh(self) -> None:
        """Called before every round of poll()/ready() checks: bring the view of the processes up to date, and
        raise RunError when their host (a container) is gone, naming it and why."""

    def collect(self, run_dir: Path) -> None:
        """After every process exited: bring logs, dumps and records into run_dir (local ones are there)."""

    @abstractmethod
    def teardown(self, run_dir: Path, procs: list) -> list[str]:
        """Stop every process of the run (started or not yet recorded), remove its scratch space; bounded in time,
        never raises. Returns notes for meta.json (e.g. a container that could not be reached)."""

    def signal_all(self, procs: list, sig) -> None:
        """Send sig to every one of procs (best effort), as close together as the backend can."""
        for p in procs:
            p.signal(sig)

    def publish_load_start(self, run_dir: Path, text: str) -> None:
        """Write the load start (docs/nemesis.md) where every engine process of the run reads it: `load_start`
        beside its deployment file (a local run's is the run folder's). A backend whose processes read another
        copy writes that too."""
        (Path(run_dir) / LOAD_START).write_text(text)

    def engine_binaries(self) -> dict[str, Path]:
        """The engine programs the run's processes execute, as this process sees them (meta.json `engine`: their
        SHA-256). By default the image's (TXN_SERVER): a swarm run's job runs in the driver, whose image the shard
        containers run too."""
        server = Path(os.environ.get("TXN_SERVER", "/usr/local/bin/txn-server"))
        return {"txn-server": server, "txn-client": server.with_name("txn-client")}

    def replay_binary(self) -> Path | None:
        """The txn-replay the checker decodes this run's transaction logs and replays them with: the one built with
        the run's engine, where the backend knows it; None: the checkout's (testbed/analysis/histories.py)."""
        return None

    def driver_overhead(self) -> dict:
        """What driving the run cost this process (meta.json `driver`), for backends that reach their processes
        remotely; {} when there is nothing to say."""
        return {}

    def describe_host_problem(self) -> str | None:
        """A reason why processes vanished that the backend can see (e.g. a container that died), or None."""
        return None

    # ---- the lifecycle
    def say(self, msg: str) -> None:
        if self.progress:
            interrupts._stderr(msg)

    def run(self, deploy: dict, name: str, out_root="results", config: dict | None = None,
            meta_extra: dict | None = None, run_id: str | None = None, probe: int = 0) -> RunResult:
        """Run the deployment into <out_root>/<name>/<run-id>/ and return its RunResult (status ok or failed with
        the reason). Raises RunError when the run could not finish and Interrupted when a signal stopped it; the
        folder is recorded either way. probe > 0: an RTT self-test (clients run `txn-client --probe N`)."""
        run_dir = Path(out_root) / name / run_id if run_id else new_run_dir(Path(out_root) / name)
        if probe:  # a prober listens on its own port: clients run in processes of their own
            deploy = deploylib.split_clients(deploy)
        for sub in ("logs", "servers", "clients"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
        cfg_path = deploylib.write_yaml(deploy, run_dir / "deploy.yml")
        write_json(run_dir / "config.json", config if config is not None else deploy)
        self._config = config if isinstance(config, dict) else None
        meta = {"run_id": run_dir.name, "name": name, "backend": self.backend_name, "probe": probe or None,
                "shaping": deploy.get("link", {}).get("mechanism"), "git_sha": git_sha(),
                "kernel": platform.release(), "hostname": platform.node(), "command_line": sys.argv,
                "python": platform.python_version(), "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "pid": os.getpid(), **(meta_extra or {}), "status": "running"}
        # which engine ran: git_sha names the code, this the programs built from it (a stale build, another
        # --build-dir, an image not rebuilt); None for a program this process cannot read
        meta["engine"] = {name: engine_digest(path) for name, path in self.engine_binaries().items()}
        if not probe:   # closed or open loop, and the offered rate (docs/workloads.md)
            meta["load"] = deploylib.load_of(deploy)
        if deploy.get("faults") and not probe:  # the nemesis's schedule; faults.json/faults.jsonl: what happened
            meta["faults"] = "; ".join(f.get("spec") or f.get("id", "?") for f in deploy["faults"])
        write_json(run_dir / "meta.json", meta)
        procs: list[Proc] = []
        res = RunResult(run_dir)
        self._phases, self._phase_t = {}, time.monotonic()
        cpu0, machine0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_times()
        self._engine_cpu = self._machine1 = None
        self._nemesis = None
        self._memory: MemorySampler | None = None
        failure: BaseException | None = None
        with interrupts.stop_on_signals(say=self.say) as stop:
            try:
                meta["processes"] = self._execute(deploy, cfg_path, run_dir, procs, probe, stop)
                self._finish(deploy, run_dir, probe, res)
            except RunError as e:
                failure = e
                if getattr(e, "salvaged", False):   # it failed, and what its live processes recorded is here
                    self._finish_failed(deploy, run_dir, res, e)
            except OSError as e:
                if not files.is_full(e):
                    failure = RunError(f"{type(e).__name__}: {e}".splitlines()[0])
                    traceback.print_exc(file=sys.stderr)
                else:   # writing the summary or the verdict: one line, the path and the space
                    failure = RunError(str(e if isinstance(e, files.DiskFull) else files.disk_full(
                        e.filename or run_dir, e)))
            except Exception as e:  # noqa: BLE001 -- a bug or an unexpected error: the run failed, say what
                failure = RunError(f"{type(e).__name__}: {e}".splitlines()[0])
                traceback.print_exc(file=sys.stderr)
            finally:
                if self._memory is not None:   # what was sampled, also of a run that failed
                    self._memory.stop()
                if self._nemesis is not None:   # paused processes continue; faults.json(l) written
                    try:
                        self._nemesis.stop()
                    except Exception:  # noqa: BLE001 -- the run's own failure, if any, is the one to report
                        traceback.print_exc(file=sys.stderr)
                notes = self.teardown(run_dir, procs)
                self._phase("teardown")
            if failure is None and stop.requested:  # a stop that came after the last check: honour it
                failure = Interrupted(stop.signum, stop.why)
        if failure is not None:
            res.status = "interrupted" if isinstance(failure, Interrupted) else "failed"
            res.reason = str(failure).splitlines()[0] if str(failure) else type(failure).__name__
            head, sep, _ = res.reason.rpartition("; last lines of ")   # describe_exit's: the log follows
            res.reason = head if sep and res.reason.endswith(":") else res.reason
            if ": error: cannot write" in res.reason and " free of " not in res.reason:   # the engine's, on a full disk?
                res.reason += f" ({files.room(run_dir)})"
        try:
            self._record(run_dir, meta, res, failure, probe, machine0, cpu0, notes)
        except OSError as e:   # the folder cannot hold its own record: a compact one in place of meta.json's
            if not files.is_full(e):
                raise
            full = e if isinstance(e, files.DiskFull) else files.disk_full(e.filename or run_dir / "meta.json", e)
            res.status = "failed"
            res.reason = (f"{res.reason}; and meta.json was recorded compact, in place" if " free of " in
                          (res.reason or "") else (f"{res.reason}; " if res.reason else "") + str(full))
            compact = {k: meta.get(k) for k in ("run_id", "name", "backend", "start_time", "experiment", "system",
                                                 "point_key", "repeat") if meta.get(k) is not None}
            compact.update(status=res.status, reason=res.reason, end_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            files.overwrite_in_place(run_dir / "meta.json", json.dumps(compact))
            failure = failure if isinstance(failure, Interrupted) else RunError(res.reason)
        if failure is not None:
            failure.run_dir = run_dir
            raise failure
        return res

    def _record(self, run_dir: Path, meta: dict, res: RunResult, failure, probe: int, machine0, cpu0,
                notes) -> None:
        """meta.json's final fields, files.json, and the folder validated (an ok run whose files do not read back
        whole is failed)."""
        cpu1 = getattr(self, "_engine_cpu", None) or resource.getrusage(resource.RUSAGE_CHILDREN)
        if self.measures_cpu:
            engine = dict(cpu_seconds=round((cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime), 3),
                          engine_wakeups=cpu1.ru_nvcsw - cpu0.ru_nvcsw)
        else:   # the processes' own words (their facts), on hosts this process cannot read the rusage of
            said = engine_usage_from_facts(run_dir) if res.status == "ok" else {}
            engine = dict(cpu_seconds=said.get("cpu_seconds"), engine_wakeups=said.get("engine_wakeups"),
                          **({"engine_usage_from": "process facts"} if said else {}))
        meta.update(
            status=res.status, reason=res.reason or None, error=str(failure) if failure else None, **engine,
            end_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), machine_cpu=cpu_shares(machine0, self._machine1 or cpu_times()))
        if notes:
            meta["cleanup_notes"] = notes
        meta["phases_s"] = self._phases
        overhead = self.driver_overhead()
        if overhead:
            meta["driver"] = overhead
        if meta["machine_cpu"].get("steal_pct", 0) > STEAL_WARN_PCT:
            self.say(f"warning: the hypervisor took {meta['machine_cpu']['steal_pct']:.0f} % of this machine's CPU "
                     "time during the run (steal); its latencies carry that")
        # every file is final (meta.json but for its status): files.json hashes the raw files and binds the derived
        # ones to them (check.json stamped with the run id and the raw files' digest; meta.json recorded)
        write_json(run_dir / "meta.json", meta)
        validate.write_manifest(run_dir)
        if res.status == "ok" and not probe:  # what was just written must read back whole and agree with itself
            problems = validate.validate_run(run_dir)
            if problems:
                res.status, res.reason = "failed", "invalid run folder: " + problems[0]
                meta.update(status=res.status, reason=res.reason)
        write_json(run_dir / "meta.json", meta)

    def _finish_failed(self, deploy: dict, run_dir: Path, res: RunResult, failure: RunError) -> None:
        """A failed run's summary and check, of what its live processes recorded (best effort: the failure is the
        run's verdict either way); the failure's reason then says what the checker found."""
        try:
            self._finish(deploy, run_dir, 0, res)
        except Exception as e:  # noqa: BLE001 -- e.g. records too few to summarize: the failure stands as it is
            self.say(f"the failed run's records could not be summarized or checked: {str(e).splitlines()[0]}")
            return
        found = (res.check or {}).get("verdict")
        if found:
            failure.args = (f"{str(failure).splitlines()[0]}; what the live processes recorded checks {found}",)

    def _finish(self, deploy: dict, run_dir: Path, probe: int, res: RunResult) -> None:
        """Summary, checker verdict and the run's status (a probe run has the measured matrix instead)."""
        if probe:
            res.probe = rtt.probe_matrix(run_dir, int(deploy["regions"]))
            return
        try:
            res.summary = results.summarize_run(run_dir)
        except (OSError, ValueError, KeyError) as e:
            raise RunError(f"cannot summarize the client records: {e}") from None
        self._phase("summarize")
        if self._nemesis is not None:   # faults.jsonl before the check: it names the replicas crashed
            self._nemesis.stop()
        res.check = checker.check_run(run_dir, replay_bin=self.replay_binary())
        self._phase("check")
        res.status, res.reason = verdict(res.check, res.summary)

    def _phase(self, name: str) -> None:
        """Record the seconds since the previous phase ended under `name` (meta.json phases_s: where a run's
        wall time beyond its duration goes; the last is teardown, as meta.json is final once files.json is)."""
        now = time.monotonic()
        self._phases[name] = round(now - self._phase_t, 3)
        self._phase_t = now

    def _execute(self, deploy: dict, cfg: Path, run_dir: Path, procs: list, probe: int, stop) -> dict:
        self.prepare(deploy, cfg, run_dir)
        self._phase("prepare")
        nodes = deploy["nodes"]

        def start(role, out, nodes_, extra=()):
            return self.spawn_many([(n, role, out, extra) for n in nodes_], cfg, run_dir, procs.append, stop.check)

        servers = start("server", "servers", engine_processes(nodes, clients=False))
        self.say(f"started {len(servers)} server processes; waiting for READY")
        t0, pending = time.monotonic(), list(servers)
        while pending:
            self._poll_round(stop)
            for p in pending:
                if p.poll() is not None:
                    raise RunError(f"server {p.describe_exit()}")
            pending = [p for p in pending if not p.ready()]
            if pending and time.monotonic() - t0 > self.ready_timeout_s:
                raise RunError(f"no READY within {self.ready_timeout_s:g}s from: "
                               + ", ".join(p.name for p in pending[:8]) + f"; {pending[0].describe_exit()}")
            if pending:
                stop.sleep(0.05)
        self.say(f"all servers READY after {time.monotonic() - t0:.1f}s")
        self._phase("servers_ready")

        c = deploy["client"]
        clients_: list[Proc] = []   # the client processes, once started (not sampled for memory)
        mixed = [p for p, n in zip(servers, engine_processes(nodes, clients=False)) if n.get("clients")]
        if probe:  # one prober per region (the first client of its first shard)
            firsts = {}
            for n in nodes:
                if n["kind"] == "client":
                    firsts.setdefault(n["region"], n)
            clients = start("client", "clients", list(firsts.values()), ["--probe", str(probe)])
            expected = 15.0
        else:
            go = mixed
            # the nemesis: the schedule's faults, and a record of every process lost mid-run (docs/nemesis.md)
            seed = ((self._config or {}).get("knobs") or {}).get("faults_seed")
            self._nemesis = Nemesis(deploy, run_dir, servers, self.say,
                                    seed=seed if seed is not None else deploy.get("seed"),
                                    restart=lambda node: self._restart(node, deploy, cfg, run_dir, servers, procs))
            if deploy.get("faults"):  # load start fixed now, read by every process at the go (docs/nemesis.md)
                self._nemesis.publish(lambda text: self.publish_load_start(run_dir, text), self.load_start_lead_s)
                go = servers   # every server process learns load start at the go, not only those with clients
            else:
                self._nemesis.start_clock()
            self.signal_all(go, signal.SIGUSR1)  # their clients start now, as the client processes do
            self._nemesis.start()
            # every server process's resident memory, the restarted ones' too (procs grows as they start)
            self._memory = MemorySampler(run_dir, lambda: [p for p in procs if p not in clients_],
                                         self._nemesis.t0, self.memory_interval_s)
            clients = start("client", "clients", engine_processes(nodes, clients=True))
            clients_.extend(clients)
            expected = float(c["duration_s"]) + float(c.get("drain_timeout_s", 10))
        try:
            self._wait_clients(servers, clients + ([] if probe else mixed), float(c["duration_s"]),
                               expected + self.margin_s, probe, stop, deploy)
        except RunError as e:
            if probe or isinstance(e, Interrupted):   # a stop asked for is a stop within seconds (teardown copies)
                raise
            self._salvage(e, servers, clients, run_dir, stop)   # what every live process recorded, then raise e
        self._phase("clients")
        self._drain(servers, stop)
        self._phase("drain")
        if self._memory is not None:
            self._memory.stop()
        self.collect(run_dir)
        self._phase("collect")
        lost = self._lost()   # seen gone mid-run (a crash fault, kill -9, docker kill): no exit code 0, no state dump
        down = self._down_nodes(deploy)   # ... their replicas, less those started again (a restart writes its dump)
        bad = [p for p in servers if p.poll() != 0 and p.name not in lost]
        if bad:
            raise RunError(f"server {bad[0].describe_exit()}")
        # the engine's CPU: every process of the run has exited and been reaped, and the checker (txn-replay,
        # another child) has not started yet
        self._engine_cpu, self._machine1 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_times()
        missing = [] if probe else [n["name"] for n in nodes if n["kind"] == "replica" and n["name"] not in down
                                    and not (run_dir / "servers" / f"{n['name']}.state.json").is_file()]
        if missing:
            raise RunError(f"replicas exited without a state dump: {', '.join(missing)}")
        return {p.name: {"argv": p.argv, "exit_code": p.poll()} for p in procs}

    def _lost(self) -> set[str]:
        """The processes seen gone mid-run so far (killed by a crash fault or from outside), and those the nemesis
        killed whose end the runner has not polled yet."""
        if self._nemesis is None:
            return set()
        return self._nemesis.lost_processes() | self._nemesis.crashed_processes()

    def _down_nodes(self, deploy: dict) -> set[str]:
        """The nodes of the processes lost so far, less those started again whose new process is not lost."""
        if self._nemesis is None:
            return set()
        lost = self._lost()
        procs = dict(deploylib.processes(deploy["nodes"]))
        down = {m["name"] for p in lost for m in procs.get(p, [])} | \
            {node_of_process(p) for p in lost if node_of_process(p) != p}
        return down - {n for n, proc in self._nemesis.restarted.items() if proc not in lost}

    def _majority_lost(self, deploy: dict) -> str | None:
        """The reason a shard cannot go on by any protocol's rules (fewer than a majority of its replicas live, and
        no restart of one of them planned later), or None."""
        from testbed.analysis.durability import deployed_replicas
        down = self._down_nodes(deploy)
        if not down:
            return None
        pending = self._nemesis.pending_restarts()
        events = {n: ev for ev in self._nemesis.events if ev.get("event") == "lost" for n in ev["nodes"]}
        for shard, names in sorted(deployed_replicas(deploy).items()):
            gone = [n for n in names if n in down]
            if 2 * (len(names) - len(gone)) > len(names) or any(n in pending for n in gone):
                continue
            by_loss: dict = {}   # replicas lost with one process (a container's, on the swarm) are said once
            for n in gone:
                by_loss.setdefault((events[n]["process"], events[n]["t_s"]) if n in events else n, []).append(n)
            said = ", ".join(f"{', '.join(ns)} lost at t={events[ns[0]]['t_s']:.2f}s ({events[ns[0]]['how']})"
                             if ns[0] in events else f"{ns[0]} killed by the nemesis" for ns in by_loss.values())
            return (f"shard {shard} lost its majority ({len(names) - len(gone)} of {len(names)} replicas live: "
                    f"{said}): no protocol here can go on without it")
        return None

    def _observe(self, p, code: int, deploy: dict, in_servers: bool) -> None:
        """p exited mid-run with `code`: a loss (recorded; the run goes on, unless a shard lost its majority) when
        it was killed from outside -- SIGKILL (kill -9, docker kill, the OOM killer, a crash fault) or a stop before
        the drain (exit 0) -- else the engine's own failure (RunError)."""
        how = killed_from_outside(code, p.lost_how())
        if how is None:
            raise RunError(f"server died mid-run: {p.describe_exit()}" if in_servers else f"client {p.describe_exit()}")
        self._nemesis.lost(p.name, how)
        why = self._majority_lost(deploy)
        if why:
            raise RunError(why)

    def _restart(self, node_name: str, deploy: dict, cfg: Path, run_dir: Path, servers: list, procs: list) -> Proc:
        """A new, empty process for a crashed replica (the nemesis's restart, on its thread): `txn-server --recover`,
        named <node>+restart (<node>+restart2 at its second restart, ...; its log beside the killed one's), watched
        and drained as every server process."""
        node = next(n for n in deploy["nodes"] if n["name"] == node_name)
        k = 1 + sum(node_of_process(p.name) == node_name and p.name != node_name for p in servers)
        p = self.spawn(dict(node, proc_name=restarted_process(node_name, k)), "server", cfg, run_dir, "servers",
                       ["--recover"])
        procs.append(p)
        servers.append(p)
        return p

    def _poll_round(self, stop) -> None:
        stop.check()
        self.refresh()

    def _wait_clients(self, servers, clients, duration: float, limit: float, probe: int, stop,
                      deploy: dict | None = None) -> None:
        self.say(f"clients running in {len(clients)} processes for {duration:g}s")
        bar = None
        if self.progress and sys.stderr.isatty() and not probe:
            from tqdm import tqdm
            bar = tqdm(total=round(duration), file=sys.stderr, leave=False, mininterval=1,
                       bar_format="  run {n:.0f}/{total:.0f}s |{bar}| elapsed {elapsed}, remaining {remaining}")
        t0, next_line = time.monotonic(), PROGRESS_EVERY_S

        def finished(p) -> bool:  # a client process exits; a server process running clients says DONE, serving on;
            # a lost one's clients are lost with it (their records too)
            return p.name in self._lost() or (p.done() if p in servers else p.poll() == 0)
        try:
            while True:
                self._poll_round(stop)
                seen = self._nemesis.lost_processes() if self._nemesis is not None else set()
                for p in servers:
                    if p.poll() is not None and p.name not in seen:
                        if probe or self._nemesis is None:
                            raise RunError(f"server died mid-run: {p.describe_exit()}")
                        self._observe(p, p.poll(), deploy, True)
                for p in clients:
                    if p.poll() not in (None, 0) and p not in servers and p.name not in seen:
                        if probe or self._nemesis is None:
                            raise RunError(f"client {p.describe_exit()}")
                        self._observe(p, p.poll(), deploy, False)
                if all(finished(p) for p in clients):
                    break
                el = time.monotonic() - t0
                if el > limit:
                    raise RunError(f"clients still running after {limit:g}s: "
                                   + ", ".join(p.name for p in clients if not finished(p)))
                if bar is not None:
                    bar.n = min(el, bar.total)
                    bar.refresh()
                elif self.progress and el >= next_line and not probe:  # plain lines for logs and pipes
                    self.say(f"  run {el:.0f}s elapsed, {max(0.0, duration - el):.0f}s of the run left (then drain)")
                    next_line += PROGRESS_EVERY_S
                stop.sleep(0.2)
        finally:
            if bar is not None:
                bar.close()
        self.say(f"clients finished after {time.monotonic() - t0:.1f}s; stopping servers")

    def _salvage(self, failure: RunError, servers, clients, run_dir: Path, stop) -> None:
        """The run failed while its clients ran (a shard lost its majority, clients that did not finish in time, an
        engine's own error): stop what still runs the way a finished run is stopped, so that every live process writes
        what it recorded (clients their records, summaries and transactions; servers their dumps and histories), bring
        it into run_dir, and raise `failure`, marked salvaged (run() then summarizes and checks what there is)."""
        self.say(f"run failed ({str(failure).splitlines()[0]}); stopping it and keeping what every live process "
                 "recorded")
        try:
            lost = self._lost()
            live_clients = [p for p in clients if p not in servers and p.poll() is None and p.name not in lost]
            for p in live_clients:
                p.signal(signal.SIGTERM)   # a client process writes what it has and exits
            poll(lambda: (self._poll_round(stop), all(p.poll() is not None for p in live_clients))[1],
                 stop_before_delay(10), 0.1, sleep=stop.sleep)
            self._drain([p for p in servers if p.name not in lost and p.poll() is None], stop)
            self.collect(run_dir)
            failure.salvaged = True
        except RunError as e:
            self.say(f"could not keep the failed run's records: {str(e).splitlines()[0]}")
        raise failure

    def _drain(self, servers, stop) -> None:
        for p in servers:
            p.signal(signal.SIGTERM)

        def all_exited() -> bool:  # a stop request raises out of the round or the sleep
            self._poll_round(stop)
            return all(p.poll() is not None for p in servers)
        if poll(all_exited, stop_before_delay(self.grace_s), 0.1, sleep=stop.sleep):
            return
        late = [p.name for p in servers if p.poll() is None]
        raise RunError(f"servers still running {self.grace_s:g}s after SIGTERM (they drain for at most 10 s, then "
                       f"write their state): {', '.join(late[:8])}")
