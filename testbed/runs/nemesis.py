"""The nemesis in a run (docs/nemesis.md): load start published to the engine processes, the runner's own faults
(pauses, crashes) applied on time, and everything recorded in the run folder.

    nem = Nemesis(deploy, run_dir, servers, say)   # deploy["faults"]: the deployment file's entries
    t0 = nem.publish(write_load_start)               # load start (wall clock), written where the engines read it
    ... signal go, start clients ...
    nem.start()                                      # a thread: each pause at t0 + start_s, its end at t0 + end_s
    nem.stop(run_dir)                                # on every way out: resume what is paused, write the records

The engine-side kinds (partition, spike, jitter, clock) are applied by every engine process itself from the
deployment file, counted from the load start it reads (`load_start` beside the deployment file, microseconds since
the epoch on CLOCK_REALTIME); their windows are recorded as planned, plus, per process, when it read the load start
(its `FAULTS` log line; read_at_t_s < 0: before t = 0, as the swarm's lead wants). Pauses are SIGSTOP/SIGCONT to the
engine process that runs the node (all of its nodes pause: the record names them), recorded with the wall time the
signal was sent and acknowledged. A crash is SIGKILL to the process of one follower (alone in it): `crashed` names
the processes killed, whose exit and missing state dump the runner then expects. A crash with an end (`crash:NODE@S+T`)
is restarted then: `restart(node)` (the runner's) starts a new, empty process for it (`txn-server --recover`, named
<process>+restart), recorded as the crash's heal; it says `CAUGHT_UP` in its log when it has caught up with replica 0
of its shard, recorded as a `caught_up` event; `restarted` names the nodes restarted, whose state dump the runner
expects again.

Every loss of a process the runner sees during the run is recorded too, whatever caused it (a crash fault, `kill -9`,
`docker kill`, the OOM killer): `lost(process, how)` adds a `lost` event (kind `loss`, source `observed`: when the
runner saw it gone, and how: its exit status, or its container's state). The engine processes are told none of this.

Records: faults.json (the plan, the seed, load start, what each process read) and faults.jsonl (one event a line:
load_start, then apply/heal of every fault and every loss in time order, `source` plan, driver or observed, with
wall time and t_s since load start); both are written when the run had a schedule or lost a process.
"""
from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
from pathlib import Path

from testbed.core import deploy as deploylib
from testbed.core.faults import DRIVER_KINDS, node_of_process

FAULTS_JSON, FAULTS_JSONL, LOAD_START = "faults.json", "faults.jsonl", "load_start"
_ANCHOR = re.compile(r"^FAULTS (\S+) load_start_us=(\d+) read_at_us=(\d+) source=(.*)$", re.M)
_CAUGHT_UP = re.compile(r"^CAUGHT_UP (\S+) events=(\d+) after_us=(\d+) wall_us=(\d+)(?: source=(\S+))?$", re.M)


def _us(t: float) -> int:
    return int(round(t * 1e6))


class Nemesis:
    def __init__(self, deploy: dict, run_dir: Path, servers: list, say=lambda m: None, seed=None, restart=None):
        self.entries = list(deploy.get("faults") or [])
        self.run_dir, self.say, self.seed = Path(run_dir), say, seed
        procs = {n: members for n, members in deploylib.processes(deploy["nodes"])}
        self.process_of = {m["name"]: name for name, members in procs.items() for m in members}
        self.members = {name: [m["name"] for m in members] for name, members in procs.items()}
        self.servers = {p.name: p for p in servers}
        self.t0: float | None = None
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._paused: dict[str, dict] = {}   # process -> the pause entry holding it
        self.crashed: dict[str, dict] = {}   # process -> the crash entry that killed it (the signal was sent)
        self.restarted: dict[str, str] = {}  # node -> the process started for it again (restart(node) returned), the
        #                                      latest for a node restarted more than once
        self._healed: set[str] = set()        # the crash entries whose restart was carried out
        self._restart_of: dict[str, dict] = {}   # restarted process -> the crash entry that started it
        self.restart = restart                # node name -> its new process (a Proc); None: restarts fail
        self._lost: dict[str, dict] = {}      # process -> its `lost` event (seen gone mid-run)
        self.lead_s = 0.0

    def start_clock(self) -> float:
        """A run without a schedule: t = 0 is now (its go), for the losses it may record; nothing is written for the
        engine processes, which read no load start."""
        self.t0 = time.time()
        self._record({"event": "load_start", "wall_unix_us": _us(self.t0), "t_s": 0.0,
                      "driver_host": socket.gethostname()})
        return self.t0

    def lost(self, process: str, how: str) -> dict:
        """Record that `process` (a server or client process of the run, or a restarted one's) was seen gone mid-run,
        and how; returns the event. Its nodes: the deployment's process's, or the restarted node."""
        now = time.time()
        nodes = self.members.get(process) or [node_of_process(process)]
        ev = {"id": None, "kind": "loss", "event": "lost", "source": "observed", "process": process, "nodes": nodes,
              "how": how, "t_s": round(now - self.t0, 6) if self.t0 is not None else None,
              "wall_unix_us": _us(now), "ok": True,
              "planned": process in self.crashed_processes()}
        with self._lock:
            self._lost[process] = ev
        self._record(ev)
        self.say(f"lost: t={ev['t_s'] if ev['t_s'] is not None else '?'}s {process} ({', '.join(nodes)}): {how}")
        return ev

    def lost_processes(self) -> set[str]:
        """The processes seen gone so far (a copy)."""
        with self._lock:
            return set(self._lost)

    def pending_restarts(self) -> set[str]:
        """The nodes the schedule still restarts later in the run (a crash entry with an end not yet reached)."""
        if self.t0 is None:
            return set()
        now = time.time() - self.t0
        with self._lock:
            done = set(self._healed)
        return {e["node"] for e in self.entries if e["kind"] == "crash" and "end_s" in e and e["end_s"] > now
                and e["id"] not in done}

    def crashed_processes(self) -> set[str]:
        """The processes crashed so far (a copy: the nemesis thread adds to them)."""
        with self._lock:
            return set(self.crashed)

    @property
    def active(self) -> bool:
        return bool(self.entries)

    def publish(self, write, lead_s: float = 0.0) -> float:
        """Fix load start (wall clock) at now + lead_s and write it with write(text) where the engine processes read
        it. lead_s: about the time the backend takes to write it and say go (the swarm's: SSH round trips), so that
        the processes learn t = 0 about when it comes, and the clients start their load about then."""
        self.lead_s = lead_s
        self.t0 = time.time() + lead_s
        write(f"{_us(self.t0)}\n")
        self._record({"event": "load_start", "wall_unix_us": _us(self.t0), "t_s": 0.0,
                      "driver_host": socket.gethostname()})
        for e in self.entries:
            if e["kind"] in DRIVER_KINDS:
                continue
            self._record(self._planned(e, "apply", e["start_s"]))
            if "end_s" in e:
                self._record(self._planned(e, "heal", e["end_s"]))
        return self.t0

    def _planned(self, e: dict, what: str, t: float) -> dict:
        return {"id": e["id"], "kind": e["kind"], "event": what, "source": "plan", "applied_by": "engine",
                "t_s": float(t), "wall_unix_us": _us(self.t0 + t), "spec": e.get("spec")}

    def _record(self, ev: dict) -> None:
        with self._lock:
            self.events.append(ev)

    # ---- the runner's faults
    def start(self) -> None:
        todo = [e for e in self.entries if e["kind"] in DRIVER_KINDS]
        if not todo or self.t0 is None:
            return
        self._thread = threading.Thread(target=self._run, args=(todo,), name="nemesis", daemon=True)
        self._thread.start()

    def _run(self, todo: list[dict]) -> None:
        steps = sorted([(e["start_s"], 1, "apply", e) for e in todo]
                       + [(e["end_s"], 0, "heal", e) for e in todo if "end_s" in e], key=lambda s: (s[0], s[1]))
        for at, _, what, e in steps:
            if self._stop.wait(max(0.0, self.t0 + at - time.time())):
                return
            self._signal(e, what, at)
        if self.restarted_nodes():
            # a restarted process dies with the thread that started it (the local backend's PR_SET_PDEATHSIG is
            # per thread): this one lives until stop()
            self._stop.wait()

    def process_now(self, node: str) -> str:
        """The process that runs `node` now, or ran it last: its latest restart's, else the deployment's."""
        with self._lock:
            return self.restarted.get(node) or self.process_of.get(node, node)

    def restarted_nodes(self) -> set[str]:
        """The nodes restarted so far (a copy)."""
        with self._lock:
            return set(self.restarted)

    def _restart(self, e: dict, planned: float) -> None:
        """The crash entry's heal: a new, empty process for its node (the runner's restart())."""
        old = self.process_now(e["node"])
        sent, ok, err, name = time.time(), False, None, None
        if old not in self.crashed_processes():
            err = f"{old} was not crashed"
        elif self.restart is None:
            err = "this runner cannot restart a process"
        else:
            try:
                p = self.restart(e["node"])
                name, ok = p.name, True
                self.servers[p.name] = p   # a later pause of the node is this process's
            except Exception as x:  # noqa: BLE001 -- recorded; the run goes on (and fails its dump check)
                err = f"{type(x).__name__}: {x}".splitlines()[0]
        done = time.time()
        if ok:
            with self._lock:
                self.restarted[e["node"]] = name
                self._healed.add(e["id"])
                self._restart_of[name] = e
        ev = {"id": e["id"], "kind": "crash", "event": "heal", "action": "restart", "source": "driver",
              "applied_by": "driver", "node": e["node"], "process": name or old, "nodes": [e["node"]],
              "planned_t_s": float(planned), "t_s": round(sent - self.t0, 6), "wall_unix_us": _us(sent),
              "took_ms": round((done - sent) * 1e3, 3), "ok": ok, "spec": e.get("restart_spec") or e.get("spec")}
        if err:
            ev["error"] = err
        self._record(ev)
        self.say(f"nemesis: t={sent - self.t0:.2f}s {e['id']} restart: {e['node']} "
                 + (f"started again as {name}" if ok else f"FAILED ({err})"))

    def _signal(self, e: dict, what: str, planned: float, early: bool = False) -> None:
        if e["kind"] == "crash" and what == "heal":
            return self._restart(e, planned)
        proc_name = self.process_now(e["node"])   # after a restart: the new process (a pause, a crash)
        p = self.servers.get(proc_name)
        crash = e["kind"] == "crash"
        sig = signal.SIGKILL if crash else signal.SIGSTOP if what == "apply" else signal.SIGCONT
        if crash and p is not None:   # before the kill: the runner, polling meanwhile, must expect the death
            with self._lock:
                self.crashed[proc_name] = e
        sent = time.time()
        ok = p is not None
        if p is not None:
            try:
                p.signal(sig)
            except Exception as x:  # noqa: BLE001 -- recorded; the run goes on
                ok = False
                self.say(f"nemesis: {what} {e['id']} on {proc_name} failed: {x}")
        done = time.time()
        with self._lock:
            if crash:
                if not ok:
                    self.crashed.pop(proc_name, None)
            elif what == "apply" and ok:
                self._paused[proc_name] = e
            elif what == "heal":
                self._paused.pop(proc_name, None)
        ev = {"id": e["id"], "kind": e["kind"], "event": what, "source": "driver", "applied_by": "driver",
              "node": e["node"], "process": proc_name, "nodes": self.members.get(proc_name, [e["node"]]),
              "signal": sig.name, "planned_t_s": float(planned),
              "t_s": round(sent - self.t0, 6), "wall_unix_us": _us(sent), "took_ms": round((done - sent) * 1e3, 3),
              "ok": ok, "spec": e.get("spec")}
        if early:
            ev["early"] = "the run ended before the planned heal"
        if p is None:
            ev["error"] = f"no running process {proc_name}"
        self._record(ev)
        self.say(f"nemesis: t={sent - self.t0:.2f}s {e['id']} {what}: {proc_name} "
                 f"{'killed' if crash else 'stopped' if what == 'apply' else 'continued'}" + ("" if ok else " (FAILED)"))

    def stop(self) -> None:
        """Stop the schedule; continue every process still paused (recorded as an early heal); write the records."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            held = list(self._paused.values())
        for e in held:
            if e["kind"] == "pause":
                self._signal(e, "heal", e["end_s"], early=True)
        if self.entries or self.lost_processes():
            self._write()

    # ---- records
    def anchors(self) -> list[dict]:
        """Per engine process with engine-side faults: the load start it read, and when (its FAULTS log line)."""
        out = []
        for log in sorted((self.run_dir / "logs").glob("*.log")):
            try:
                text = log.read_text(errors="replace")
            except OSError:
                continue
            for m in _ANCHOR.finditer(text):
                zero, read = int(m.group(2)), int(m.group(3))
                out.append({"process": m.group(1), "load_start_unix_us": zero, "read_at_unix_us": read,
                            "read_at_t_s": round((read - _us(self.t0)) / 1e6, 6) if self.t0 else None,
                            "agrees": self.t0 is not None and zero == _us(self.t0), "source": m.group(4).strip()})
        return out

    def caught_up(self) -> list[dict]:
        """A `caught_up` event per restarted process that said `CAUGHT_UP` in its log (the time it said it, the
        events its snapshot held, its time from start to caught up, the replica it took them over from)."""
        out = []
        by_node = {e["node"]: e for e in self.entries if e["kind"] == "crash" and "end_s" in e}
        with self._lock:
            by_process = dict(self._restart_of)
        for log in sorted((self.run_dir / "logs").glob("*+restart*.log")):
            try:
                text = log.read_text(errors="replace")
            except OSError:
                continue
            for m in _CAUGHT_UP.finditer(text):
                node = m.group(1)
                e = by_process.get(log.stem) or by_node.get(node)
                wall = int(m.group(4))
                out.append({"id": e["id"] if e else None, "kind": "crash", "event": "caught_up", "source": "engine",
                            "node": node, "process": log.stem, "events": int(m.group(2)), "from": m.group(5),
                            "after_start_s": round(int(m.group(3)) / 1e6, 6), "wall_unix_us": wall,
                            "t_s": round((wall - _us(self.t0)) / 1e6, 6) if self.t0 else None})
        return out

    def _write(self) -> None:
        planned = []
        for e in self.entries:
            x = dict(e, applied_by="driver" if e["kind"] in DRIVER_KINDS else "engine")
            if e["kind"] in DRIVER_KINDS:
                x["process"] = self.process_of.get(e["node"], e["node"])
                x["paused_nodes" if e["kind"] == "pause" else "crashed_nodes"] = \
                    self.members.get(x["process"], [e["node"]])
            planned.append(x)
        anchors = self.anchors()
        doc = {"spec": "; ".join(e.get("spec", "") for e in self.entries), "seed": self.seed,
               "load_start_unix_us": _us(self.t0) if self.t0 else None, "load_start_lead_s": self.lead_s,
               "clock": "CLOCK_REALTIME of the driver's host; every engine process counts t = 0 from load_start "
                        "on its own CLOCK_REALTIME (one host: the same clock; across hosts: NTP's error)",
               "planned": planned, "anchors": anchors,
               "anchor_latency_max_s": max((a["read_at_t_s"] for a in anchors if a["read_at_t_s"] is not None),
                                           default=None)}
        (self.run_dir / FAULTS_JSON).write_text(json.dumps(doc, indent=1) + "\n")
        caught = self.caught_up()
        with self._lock:
            evs = sorted(self.events + caught,
                         key=lambda v: (v["t_s"] if v["t_s"] is not None else 0.0, v["event"] != "load_start"))
        with open(self.run_dir / FAULTS_JSONL, "w") as f:
            for ev in evs:
                f.write(json.dumps(ev, sort_keys=True) + "\n")
