"""Swarm backend: run a deployment across the containers start_containers.py brought up.

It runs in the driver container (containers.yml and the deployment's private key are at /etc/edge-txn/), reaches
every shard container over SSH (paramiko) and drives the shared run lifecycle (testbed/runs/lifecycle.py) there:
processes run in /tmp/edge-run/<run-id>/ of their container; afterwards logs, state dumps and client records are
copied into results/<name>/<run-id>/ of the checkout mounted in the driver, so they appear on the host.

Every engine process is started by a small wrapper shell that records its pid, its own pid and, when the process
exits, its exit status; `timeout` bounds its life to the run's longest possible length, so nothing outlives a
run by more than a minute even if the driver itself is killed. (The state lives in files, not in an SSH channel,
as in Ansible's async jobs: `docker exec` reaches only the driver's own host, and a process tied to a channel, as
paramiko's exec_command would keep it, dies or is orphaned when the driver's connection drops; here a lost
connection costs only the next status read.) Every SSH command has a time limit, so a
container that dies or stops answering is found within seconds; the driver mounts the Docker socket of its
host and names the container's real state (`container edge_r2_s2 exited (137)`). Before the run's servers are all
READY that fails the run. Once they are, a container found gone -- Docker says it exited, restarted or no longer
exists, or, on a host whose Docker the driver cannot see, its SSH connection failed and its address takes no new
connection (a host down or cut off) -- is a loss (docs/nemesis.md, "Losses"): every process of the run in it is seen
exited with CONTAINER_GONE (the lifecycle records each and goes on, unless a shard lost its majority), and it is
watched, signalled, copied and cleaned no more; the other containers' processes go on and their files are copied.
A container that is alive by Docker's word (its sshd or watcher misbehaving, paused) still fails the run.
Before a run starts, engine processes that an earlier run left in any container are stopped (and said); after it,
on every path, every process of the run is killed and its scratch folder removed, container by container in
parallel.
"""
from __future__ import annotations

import os
import re
import shlex
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import paramiko
import yaml

from testbed.cluster import genconfig
from testbed.cluster.cluster import Cluster
from testbed.cluster.shaping import tc_plan_for, to_shell
from testbed.core import rtt as rttlib
from testbed.core.config import load_exp_config
from testbed.core.runtypes import RunError, RunResult
from testbed.runs.backend import Backend
from testbed.runs.driverexec import ENV_JOB
from testbed.runs.lifecycle import CONTAINER_GONE, Proc, Runner, client_out, engine_target, exit_description

DRIVER_ETC = Path("/etc/edge-txn")
DRIVER_CONTAINERS_YML = DRIVER_ETC / "containers.yml"
DRIVER_KEY = DRIVER_ETC / "id_ed25519"
DOCKER_SOCKET = "/var/run/docker.sock"   # the driver's host's Docker, mounted by start_containers.py
REMOTE_ROOT = "/tmp/edge-run"
SALVAGE_S = 30          # a failed run's files: the copy from one container may take this long (then it is noted)
POLL_INTERVAL_S = 0.5   # a container looks at its processes every half second while a run goes on (WATCH_SH)
READ_INTERVAL_S = 0.05  # the driver reads what the watchers sent at most this often (no command: a buffer read)
BEAT_ROUNDS = 4         # a status watcher repeats an unchanged status every 4 rounds (2 s): a heartbeat
SILENT_S = 8.0          # a container whose watcher sent nothing for this long (4 heartbeats) is in trouble
CMD_TIMEOUT_S = 5.0     # any other command (set-up, load start, signal, cleanup): no answer in this is trouble
CONNECT_TIMEOUT_S = 10.0
SPAWN_TIMEOUT_S = 20.0  # starting a process: a container whose engines are all loading at once answers slowly (100
                        # containers on one 2-core host took over 5 s); a dead one is found by its status watcher
LIFE_SLACK_S = 60.0     # `timeout` kills an engine process this long after the run's longest possible end
GONE_CONFIRM_S = 3.0    # a killed container's SSH connection drops a moment before Docker records its end: Docker is
                        # asked again for this long before a container it still shows running is taken for alive
PROBE_TIMEOUT_S = 3.0   # a container the driver's Docker cannot see: a new TCP connection to its sshd, within this
# what docker_state says of a container whose processes are gone with it
GONE_STATES = ("exited", "no longer exists", "is restarting", "restarted at")


def inside_driver() -> bool:
    """True inside the driver container of a deployment (start_containers.py installs containers.yml there)."""
    return DRIVER_CONTAINERS_YML.is_file()


class SshError(RuntimeError):
    """A command or copy over SSH that failed; `why` is the short cause (e.g. `SSHException SSH session not active`)."""

    def __init__(self, msg: str, why: str = ""):
        super().__init__(msg)
        self.why = why or msg


class Ssh:
    """One SSH connection to a container (root, the deployment's key); every command has a time limit."""

    def __init__(self, ip: str, key_path: Path, timeout: float = CONNECT_TIMEOUT_S):
        self.ip = ip
        self.client = paramiko.SSHClient()
        # fresh host keys per container start, on the deployment's private overlay: accept them
        self.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        try:
            self.client.connect(ip, 22, "root", key_filename=str(key_path), timeout=timeout, banner_timeout=timeout,
                                auth_timeout=timeout, allow_agent=False, look_for_keys=False)
        except Exception as e:  # noqa: BLE001 -- paramiko raises many types; all mean: not reachable
            why = f"{type(e).__name__} {e}".strip()
            raise SshError(f"cannot ssh to {ip}: {why}", why) from None
        self.client.get_transport().set_keepalive(2)
        self.lock = threading.Lock()
        self.sessions = 0   # SSH sessions (channels) opened on this connection: commands, copies, watchers

    def _open(self, cmd: str, timeout: float):
        """A new session running cmd, its stderr merged into its stdout (the caller holds the lock)."""
        chan = self.client.get_transport().open_session(timeout=timeout)
        self.sessions += 1
        chan.settimeout(timeout)
        chan.set_combine_stderr(True)
        chan.exec_command(cmd)
        return chan

    def sh(self, cmd: str, timeout: float = CMD_TIMEOUT_S) -> tuple[int, str]:
        """Run cmd in the container; (exit code, stdout+stderr). SshError when it takes longer than timeout or the
        connection is gone."""
        if not self.lock.acquire(timeout=timeout):
            raise SshError(f"{self.ip}: connection busy for {timeout:g}s")
        try:
            chan = self._open(cmd, timeout)
            t0, out = time.monotonic(), b""
            while True:
                chunk = chan.recv(65536)
                if not chunk:
                    break
                out += chunk
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"no end of output within {timeout:g}s")
            if not chan.status_event.wait(max(0.1, timeout - (time.monotonic() - t0))):
                raise TimeoutError(f"no exit status within {timeout:g}s")
            rc = chan.recv_exit_status()
            chan.close()
            return rc, out.decode(errors="replace")
        except (OSError, EOFError, TimeoutError, AttributeError, paramiko.SSHException) as e:
            # AttributeError: get_transport() is None once the connection dropped
            why = f"{type(e).__name__} {e}".strip()
            raise SshError(f"`{cmd[:60]}` on {self.ip}: {why}", why) from None
        finally:
            self.lock.release()

    def stream(self, cmd: str, timeout: float = CMD_TIMEOUT_S):
        """Start cmd on a channel of its own and return the channel, to be read without blocking while the command
        runs on (a status watcher). SshError when it cannot be started."""
        if not self.lock.acquire(timeout=timeout):
            raise SshError(f"{self.ip}: connection busy for {timeout:g}s")
        try:
            chan = self._open(cmd, timeout)
            chan.setblocking(False)
            return chan
        except (OSError, EOFError, TimeoutError, AttributeError, paramiko.SSHException) as e:
            why = f"{type(e).__name__} {e}".strip()
            raise SshError(f"`{cmd[:60]}` on {self.ip}: {why}", why) from None
        finally:
            self.lock.release()

    def put(self, local: Path, remote: str, timeout: float = 30) -> None:
        with self.lock:
            try:
                sftp = self.client.open_sftp()
                self.sessions += 1
                sftp.get_channel().settimeout(timeout)
                try:
                    sftp.put(str(local), remote)
                finally:
                    sftp.close()
            except (OSError, EOFError, AttributeError, paramiko.SSHException) as e:
                why = f"{type(e).__name__} {e}".strip()
                raise SshError(f"copying {local.name} to {self.ip}: {why}", why) from None

    def get_tree(self, remote_dir: str, local_dir: Path, timeout: float = 60) -> int:
        """Copy the files of remote_dir/{logs,servers,clients} into local_dir/...; returns the count."""
        n = 0
        with self.lock:
            try:
                sftp = self.client.open_sftp()
                self.sessions += 1
                sftp.get_channel().settimeout(timeout)
                try:
                    for sub in ("logs", "servers", "clients"):
                        try:
                            names = sftp.listdir(f"{remote_dir}/{sub}")
                        except OSError:
                            continue
                        (local_dir / sub).mkdir(parents=True, exist_ok=True)
                        for f in names:
                            if f.endswith((".pid", ".wpid", ".rc", ".tmp")):
                                continue
                            sftp.get(f"{remote_dir}/{sub}/{f}", str(local_dir / sub / f))
                            n += 1
                finally:
                    sftp.close()
            except (OSError, EOFError, AttributeError, paramiko.SSHException) as e:
                why = f"{type(e).__name__} {e}".strip()
                raise SshError(f"copying results from {self.ip}: {why}", why) from None
        return n

    def close(self) -> None:
        self.client.close()


# The status of a run's processes in one container, sent to the driver by one command for the whole run (instead of
# one command per container per round, which at 100 containers took the driver 1.5 s a round): every POLL_INTERVAL_S
# the container looks at its processes and sends their status, then a line END, when it changed, or every
# BEAT_ROUNDS rounds as a heartbeat. Status lines:
#   RC <name> <code>             exited (its wrapper recorded the code)
#   UP <name> <pid>              running (its wrapper is alive)
#   LOST <name> <pid> <0|1>      its wrapper is gone without recording a code; 1: the process itself still runs
# plus the READY lines of the servers' logs, and the DONE lines of servers that run clients. bash builtins only (the
# wait is a read that times out on a FIFO nobody writes): no process per round, which 100 such loops on one 2-core
# host would pay for (a sh loop with `sleep` and `grep` cost 7 ms of CPU per second each, 0.7 of a core for 100).
# It ends with the run's logs folder (removed at teardown), when its channel is closed (SIGPIPE at the next write)
# or at the run's life limit (`timeout` around it). The driver only reads what arrived (Watch).
WATCH_SH = r"""cd {rdir}/logs 2>/dev/null || exit 0
tick={rdir}/.tick; mkfifo "$tick" 2>/dev/null; exec 3<>"$tick"
nl=$'\n'; last=x; n=0
while [ -d {rdir}/logs ]; do
  s=
  for f in *.wpid; do [ -e "$f" ] || continue; p=${{f%.wpid}}; w=; read -r w < "$f"; [ -n "$w" ] || continue
    pid=; [ -e "$p.pid" ] && read -r pid < "$p.pid"
    if [ -s "$p.rc" ]; then read -r c < "$p.rc"; s+="RC $p $c$nl"
    elif kill -0 "$w" 2>/dev/null; then s+="UP $p ${{pid:-0}}$nl"
    elif [ -s "$p.rc" ]; then read -r c < "$p.rc"; s+="RC $p $c$nl"   # it wrote its status and ended between the looks
    elif [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then s+="LOST $p $pid 1$nl"
    else s+="LOST $p ${{pid:-0}} 0$nl"; fi
  done
  for f in *.log; do [ -e "$f" ] || continue
    while IFS= read -r line || [ -n "$line" ]; do
      case $line in "READY "*|"DONE "*) s+="$line$nl";; esac
    done < "$f"
  done
  if [ "$s" != "$last" ] || [ $n -ge {beat} ]; then printf '%sEND\n' "$s" || exit 0; last=$s; n=0; fi
  n=$((n+1)); read -r -t {interval} -u 3 _
done
exit 0"""


class Watch:
    """The reading end of one container's status watcher (WATCH_SH): the last complete status it sent, and when it
    was last heard from. `chan` needs recv_ready(), recv(), exit_status_ready() and closed (a paramiko Channel)."""

    def __init__(self, chan, now: float):
        self.chan, self.heard, self.buf, self.block = chan, now, "", []

    def read(self, now: float) -> list[str] | None:
        """The lines of the newest complete status that arrived since the last read (None: nothing new). SshError
        when the watcher ended or has been silent for SILENT_S."""
        latest = None
        while self.chan.recv_ready():
            data = self.chan.recv(65536)
            if not data:
                break
            self.heard = now
            self.buf += data.decode(errors="replace")
            *lines, self.buf = self.buf.split("\n")
            for line in lines:
                if line == "END":
                    latest, self.block = self.block, []
                elif line:
                    self.block.append(line)
        if latest is None and (self.chan.closed or self.chan.exit_status_ready()):
            raise SshError("its status watcher ended", "status watcher ended")
        if latest is None and now - self.heard > SILENT_S:
            raise SshError(f"no status for {now - self.heard:.0f}s", f"no status for {now - self.heard:.0f}s")
        return latest

    def close(self) -> None:
        try:
            self.chan.close()
        except Exception:  # noqa: BLE001 -- a connection already gone
            pass


# engine processes in a container that do not belong to the run `keep` (none: every one): "pid command line"
LEFTOVERS_SH = r"""for p in $(pgrep -x txn-server; pgrep -x txn-client); do
  c=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null) || continue
  case "$c" in *"{keep}"*) ;; *) echo "$p $c";; esac
done; true"""


class RemoteProc(Proc):
    """A txn-server/txn-client in a container, started by a wrapper shell (see the module doc)."""

    def __init__(self, runner: "SwarmRunner", conn: Ssh, container: str, name: str, argv: list[str], rdir: str,
                 life_s: float):
        self.runner, self.conn, self.container, self.name, self.argv, self.rdir = (
            runner, conn, container, name, argv, rdir)
        log = f"logs/{name}"
        # .wpid, .pid and .rc appear whole (written aside, then renamed): the status watcher reads them at any time,
        # and an empty .wpid once read as a wrapper gone without an exit status failed a run of 100 containers
        inner = (f"echo $$ > {log}.wpid.tmp; mv {log}.wpid.tmp {log}.wpid; "
                 f"timeout {life_s:.0f} {shlex.join(argv)} > {log}.log 2>&1 & "
                 f"echo $! > {log}.pid.tmp; mv {log}.pid.tmp {log}.pid; wait $!; echo $? > {log}.rc.tmp; "
                 f"mv {log}.rc.tmp {log}.rc")
        try:
            rc, out = conn.sh(f"cd {rdir} || exit 1; setsid sh -c {shlex.quote(inner)} < /dev/null > /dev/null 2>&1 &"
                              " echo started", timeout=SPAWN_TIMEOUT_S)
        except SshError as e:
            raise RunError(runner.container_problem(conn.ip, e)) from None
        if rc != 0 or "started" not in out:
            raise RunError(f"cannot start {name} in {container}: {out.strip() or f'exit {rc}'}")

    def poll(self):
        return self.runner.rc.get(self.name)

    def ready(self) -> bool:
        return self.name in self.runner.ready_names

    def done(self) -> bool:
        return self.name in self.runner.done_names

    def signal(self, sig) -> None:
        if self.conn.ip in self.runner.lost_containers:
            return   # gone with its container: nothing to signal, and no command to wait for
        try:
            # .pid is `timeout`'s, which forwards SIGTERM and SIGINT but dies of others (SIGUSR1, the clients'
            # go): the signal goes to the engine, its child, and to `timeout` only when the engine is gone
            self.conn.sh(f"p=$(cat {self.rdir}/logs/{self.name}.pid 2>/dev/null) && "
                         f"{{ pkill -{int(sig)} -P $p || kill -{int(sig)} $p; }} 2>/dev/null; true")
        except SshError:
            pass  # the next refresh names the container's problem

    def lost_how(self) -> str | None:
        return self.runner.lost_containers.get(self.conn.ip)

    def describe_exit(self) -> str:
        code = self.poll()
        if code == CONTAINER_GONE and self.lost_how():
            return f"{self.name} in {self.container} is lost: {self.lost_how()}"
        state = "is still running" if code is None else f"exited with code {code}"
        if code == 124:
            state += " (killed by its life limit)"
        try:
            _, tail = self.conn.sh(f"tail -n 15 {self.rdir}/logs/{self.name}.log 2>/dev/null")
        except SshError:
            tail = "(its container does not answer)"
        return exit_description(f"{self.name}", f"{state} in {self.container}", tail, "its log")


class SwarmRunner(Runner):
    """The lifecycle with processes in the containers."""
    backend_name = "swarm"
    measures_cpu = False
    # load start is written into every container and the go sent over SSH: measured 100-130 ms on one host
    load_start_lead_s = 0.12

    def __init__(self, state: dict, key_path: Path, **opts):
        super().__init__(**opts)
        self.state, self.key_path = state, key_path
        cluster = Cluster(state)
        self.names = {m.ip: m.name for m in cluster.members}
        self.host_of = {m.ip: m.host for m in cluster.members}
        # the driver sees the Docker of its own host only (its socket is mounted there)
        self.driver_host = cluster.driver.host
        # SSH connections are kept for the backend's life (the next run, the jitter, the self-test reuse them), but
        # a run watches, signals, copies and cleans only its own containers: `conns` holds the run's, `pool` all
        self.pool: dict[str, Ssh] = {}
        self.conns: dict[str, Ssh] = {}
        self.rc: dict[str, int] = {}
        self.ready_names: set[str] = set()
        self.done_names: set[str] = set()
        self.rdir = ""
        self._last_poll = 0.0
        self._t_start = 0.0
        self._gone: set[str] = set()   # containers found dead or unreachable during this run
        self.lost_containers: dict[str, str] = {}   # ip -> how: those of _gone the run goes on without (a loss)
        self._procs_in: dict[str, list[str]] = {}   # ip -> the run's processes started in it
        self.watches: dict[str, Watch] = {}
        self._cost: dict = {}           # what the driver spent on this run (driver_overhead)
        self._dropped_sessions = 0      # sessions of the connections dropped since (counted still)

    # ---- connections and the containers' state
    def conn(self, ip: str) -> Ssh:
        """The connection to a container (opened once, then reused by every later run of the backend)."""
        if ip not in self.pool:
            try:
                self.pool[ip] = Ssh(ip, self.key_path)
            except SshError as e:
                raise RunError(self.container_problem(ip, e)) from None
            self._cost["connections"] = self._cost.get("connections", 0) + 1
        return self.pool[ip]

    def container_problem(self, ip: str, err) -> str:
        """One line: which container, what Docker says about it (when the driver can see it), what SSH said."""
        name = self.names.get(ip, ip)
        why = getattr(err, "why", None) or str(err)
        self._gone.add(ip)
        host = self.host_of.get(ip)
        if host is not None and host != self.driver_host:
            return (f"container {name} ({ip}, on host {host}) stopped answering over SSH ({why}): the host may be "
                    f"down or cut off, or the container gone; look at `docker ps -a` on {host}")
        state = docker_state(name, self._t_start, network=self.state.get("network"))
        if state:
            return f"container {name} {state} (ssh: {why})"
        if state == "":
            return (f"container {name} ({ip}) stopped answering over SSH ({why}) although Docker shows it running "
                    f"and attached to {self.state.get('network')}: its sshd, or the overlay on its host?")
        return (f"container {name} ({ip}) stopped answering over SSH ({why}); its state is not visible from the "
                "driver: look at `docker ps -a` on its host")

    def _live(self) -> list[str]:
        """The run's containers but those it lost (lost_containers)."""
        return [ip for ip in self.conns if ip not in self.lost_containers]

    def gone_how(self, ip: str, err) -> str | None:
        """How the run's container at ip is gone, in one line (`its container is gone: edge_r1_s1_f1 exited (137) at
        ...`), when Docker says so (a container on the driver's host: exited, restarting, restarted or removed), or,
        where the driver cannot ask Docker (another host), when its SSH failed (err) and its address takes no new
        connection; else None: it may well be alive (its sshd or status watcher misbehaving, paused, cut off from
        the overlay), which fails the run as before."""
        name, host = self.names.get(ip, ip), self.host_of.get(ip)
        why = getattr(err, "why", None) or str(err)
        if host is None or host == self.driver_host:
            deadline = time.monotonic() + GONE_CONFIRM_S
            while True:
                state = docker_state(name, self._t_start, network=self.state.get("network"))
                if state is None:   # Docker cannot be asked here: the SSH failure decides, as on another host
                    break
                if state.startswith(GONE_STATES):
                    return f"its container is gone: {name} {state}"
                if state or time.monotonic() >= deadline:   # alive by Docker's word (paused, off the overlay, ...)
                    return None
                time.sleep(0.3)
        silent = no_answer(ip, 22, PROBE_TIMEOUT_S)
        if silent is None:
            return None
        return (f"its container is gone: {name} ({ip}{f', on host {host}' if host else ''}) stopped answering over "
                f"SSH ({why}) and takes no new connection ({silent}): the host may be down or cut off")

    def _lose(self, ip: str, how: str) -> None:
        """The run goes on without the container at ip: every process of the run in it is seen exited with
        CONTAINER_GONE (but those that had exited before), and it is watched, signalled and copied no more."""
        self.lost_containers[ip] = how
        self._gone.add(ip)   # teardown: not cleaned, said so
        w = self.watches.pop(ip, None)
        if w is not None:
            w.close()
        for name in self._procs_in.get(ip, ()):
            self.rc.setdefault(name, CONTAINER_GONE)

    def _each(self, ips, fn, timeout: float) -> dict:
        """fn(ip) for every ip in parallel, at most `timeout` seconds overall -> {ip: result or exception}."""
        out: dict = {}
        if not ips:
            return out
        pool = ThreadPoolExecutor(max_workers=min(16, len(ips)))
        futures = {ip: pool.submit(fn, ip) for ip in ips}
        deadline = time.monotonic() + timeout
        for ip, f in futures.items():
            try:
                out[ip] = f.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as e:  # noqa: BLE001 -- reported per container by the caller
                out[ip] = e if not isinstance(e, TimeoutError) or f.done() else SshError(f"no answer in {timeout:g}s")
        pool.shutdown(wait=False, cancel_futures=True)
        return out

    # ---- lifecycle hooks
    def prepare(self, deploy, cfg_path, run_dir):
        self._t_start = time.time()
        self._gone, self.lost_containers, self._procs_in = set(), {}, {}
        self._close_watches()
        self._cost = {"connections": 0, "start": self._spent(), "rounds": []}
        self.rdir = f"{REMOTE_ROOT}/{run_dir.name}"
        self.rc, self.ready_names, self.done_names, self._last_poll = {}, set(), set(), 0.0
        self._collected = False
        c = deploy["client"]
        self._life_s = (self.ready_timeout_s + float(c["duration_s"]) + float(c.get("drain_timeout_s", 10))
                        + self.margin_s + self.grace_s + LIFE_SLACK_S)
        # this run's containers, and only they: a deployment has more (exp 4 uses the first k of its regions) and
        # the connections of an earlier run with more regions stay open in the pool, unwatched and untouched
        ips = sorted({n["host"] for n in deploy["nodes"]})
        self.conns = {}

        def setup(ip):
            conn = self.conn(ip)
            self.conns[ip] = conn
            _, out = conn.sh(LEFTOVERS_SH.format(keep=self.rdir + "/"))
            left = [ln for ln in out.splitlines() if ln.split()[:1] and ln.split()[0].isdigit()]
            if left:
                conn.sh("kill -9 " + " ".join(ln.split()[0] for ln in left) + " 2>/dev/null; true")
            rc, out = conn.sh(f"rm -rf {REMOTE_ROOT}/*; mkdir -p {self.rdir}/logs {self.rdir}/servers "
                              f"{self.rdir}/clients && cat > {self.rdir}/watch.sh <<'EDGE_WATCH'\n"
                              f"{WATCH_SH.format(rdir=self.rdir, beat=BEAT_ROUNDS, interval=POLL_INTERVAL_S)}\n"
                              "EDGE_WATCH")
            if rc != 0:
                raise RunError(f"{self.names.get(ip, ip)}: cannot create {self.rdir}: {out.strip()}")
            conn.put(cfg_path, f"{self.rdir}/deploy.yml")
            self.watches[ip] = Watch(conn.stream(self._watch_cmd()), time.monotonic())
            return left

        for ip, r in self._each(ips, setup, timeout=CONNECT_TIMEOUT_S + 4 * CMD_TIMEOUT_S + 30).items():
            if isinstance(r, RunError):
                raise r
            if isinstance(r, Exception):
                raise RunError(self.container_problem(ip, r))
            if r:
                runs = sorted({m.group(1) for ln in r for m in [re.search(r"/edge-run/([^/ ]+)/", ln)] if m})
                self.say(f"{self.names.get(ip, ip)}: stopped {len(r)} engine process(es) an earlier run left "
                         f"behind (run {', '.join(runs) or '?'})")

    def spawn(self, node, role, cfg_path, run_dir, out, extra):
        argv = [f"txn-{role}", "--config", f"{self.rdir}/deploy.yml", *engine_target(node),
                "--out", f"{self.rdir}/{out}", *client_out(node, f"{self.rdir}/clients"), *extra]
        name = node.get("proc_name", node["name"])
        self._procs_in.setdefault(node["host"], []).append(name)   # before it starts: it may be lost starting
        return RemoteProc(self, self.conn(node["host"]), self.names.get(node["host"], node["host"]), name, argv,
                          self.rdir, self._life_s)

    def spawn_many(self, items, cfg_path, run_dir, started, check) -> list:
        """The containers in parallel, each one's processes in order (one SSH command each: one after the other, 100
        containers took 7 s here before their servers could start)."""
        check()
        by_ip: dict = {}
        for i, item in enumerate(items):
            by_ip.setdefault(item[0]["host"], []).append(i)
        out: list = [None] * len(items)

        def start(ip):
            for i in by_ip[ip]:
                node, role, o, extra = items[i]
                out[i] = self.spawn(node, role, cfg_path, run_dir, o, list(extra))
                started(out[i])
        for ip, r in self._each(list(by_ip), start, timeout=len(items) * SPAWN_TIMEOUT_S + CONNECT_TIMEOUT_S).items():
            if isinstance(r, RunError):
                raise r
            if isinstance(r, Exception):
                raise RunError(self.container_problem(ip, r))
        check()
        return out

    def signal_all(self, procs: list, sig) -> None:
        """The containers in parallel, each one's processes one by one (all one by one, a run's go took ~15 ms per
        process: the last of 6 server processes learnt the load start 160 ms after t = 0)."""
        by_conn: dict = {}
        for p in procs:
            if p.conn.ip not in self.lost_containers:
                by_conn.setdefault(p.conn.ip, []).append(p)
        self._each(list(by_conn), lambda ip: [p.signal(sig) for p in by_conn[ip]], timeout=CMD_TIMEOUT_S + 1)

    def publish_load_start(self, run_dir: Path, text: str) -> None:
        """Load start (docs/nemesis.md) beside the deployment file in every container of the run, in parallel (and in
        the run folder, for the record). The engines read it at the go, sent after this returns."""
        super().publish_load_start(run_dir, text)
        cmd = f"printf %s {shlex.quote(text)} > {self.rdir}/load_start.tmp && mv {self.rdir}/load_start.tmp {self.rdir}/load_start"
        for ip, r in self._each(self._live(), lambda ip: self.conns[ip].sh(cmd), timeout=CMD_TIMEOUT_S + 1).items():
            if isinstance(r, Exception):
                raise RunError(self.container_problem(ip, r))
            if r[0] != 0:
                raise RunError(f"{self.names.get(ip, ip)}: cannot write {self.rdir}/load_start: {r[1].strip()}")

    def _watch_cmd(self) -> str:
        return f"exec timeout {self._life_s:.0f} bash {self.rdir}/watch.sh"

    def _start_watches(self) -> None:
        """A status watcher (WATCH_SH) for every container of the run that has none yet (prepare starts them), in
        parallel."""
        cmd = self._watch_cmd()
        ips = [ip for ip in self._live() if ip not in self.watches]
        for ip, r in self._each(ips, lambda ip: self.conns[ip].stream(cmd), timeout=CMD_TIMEOUT_S + 1).items():
            if isinstance(r, Exception):
                raise RunError(self.container_problem(ip, r))
            self.watches[ip] = Watch(r, time.monotonic())

    def _close_watches(self) -> None:
        for w in self.watches.values():
            w.close()
        self.watches = {}

    def refresh(self) -> None:
        """Read what the containers' status watchers sent since the last round: no command, no SSH round trip. A
        container whose watcher ended or fell silent fails the run; once its servers are READY (the lifecycle's
        nemesis is there), one found gone (gone_how) is lost instead (_lose): the lifecycle sees its processes
        exited with CONTAINER_GONE and records each."""
        now = time.monotonic()
        if now - self._last_poll < READ_INTERVAL_S:
            return
        self._last_poll = now
        if len(self.watches) < len(self._live()):
            self._start_watches()
        failed: dict[str, SshError] = {}
        for ip, w in list(self.watches.items()):
            try:
                lines = w.read(time.monotonic())
            except SshError as e:
                failed[ip] = e
                continue
            for line in lines or ():
                p = line.split()
                if len(p) >= 3 and p[0] == "RC" and p[2].lstrip("-").isdigit():
                    self.rc[p[1]] = int(p[2])
                elif len(p) >= 2 and p[0] == "READY":
                    self.ready_names.add(p[1])
                elif len(p) == 2 and p[0] == "DONE":
                    self.done_names.add(p[1])
                elif len(p) == 4 and p[0] == "LOST":
                    still = p[3] == "1"
                    raise RunError(f"{p[1]} in {self.names.get(ip, ip)}: its wrapper shell is gone (killed?) without "
                                   "recording an exit status; "
                                   + (f"the process still runs (pid {p[2]})" if still else "the process is gone too"))
        if failed:
            self._lose_or_fail(failed)
        self._cost.setdefault("rounds", []).append(time.monotonic() - now)

    def _lose_or_fail(self, failed: dict) -> None:
        """The containers whose watchers failed (ip -> SshError): those found gone are lost, once the servers are
        READY; any other fails the run (RunError). Docker is asked, or each address tried, in parallel: a host cut off
        with many containers on it costs one probe's time, not one per container."""
        hows = {} if self._nemesis is None else self._each(
            list(failed), lambda ip: self.gone_how(ip, failed[ip]), timeout=GONE_CONFIRM_S + PROBE_TIMEOUT_S + 10)
        for ip, how in hows.items():
            if isinstance(how, str):
                self._lose(ip, how)
        for ip, e in failed.items():
            if not isinstance(hows.get(ip), str):
                raise RunError(self.container_problem(ip, e))

    def driver_overhead(self) -> dict:
        """What driving this run cost the driver (meta.json `driver`), from its preparation to the end of the copy of
        its results (the checker's work after that is not counted): this process's CPU seconds (every thread), the
        SSH connections it opened and the sessions (commands, copies, watchers) it started over them, and the status
        rounds with the time one took (reading the watchers' output; starting them, in the first)."""
        c, rounds = self._cost, sorted(self._cost.get("rounds", []))
        if "start" not in c:
            return {}
        (cpu0, wall0, sessions0), (cpu1, wall1, sessions1) = c["start"], c.get("end") or self._spent()
        return {"containers": len(self.conns), "cpu_s": round(cpu1 - cpu0, 3), "wall_s": round(wall1 - wall0, 3),
                "ssh_connections": c.get("connections", 0), "ssh_sessions": sessions1 - sessions0,
                "status_rounds": len(rounds),
                "status_round_ms_p50": round(rounds[len(rounds) // 2] * 1000, 2) if rounds else None,
                "status_round_ms_max": round(rounds[-1] * 1000, 2) if rounds else None}

    def collect(self, run_dir: Path) -> None:
        """The run's files from every container it has not lost, in parallel."""
        got = self._each(self._live(), lambda ip: self.conns[ip].get_tree(self.rdir, run_dir), timeout=120)
        for ip, r in got.items():
            if isinstance(r, Exception):
                raise RunError(self.container_problem(ip, r))
        self._collected = True
        self._cost["end"] = self._spent()

    def _spent(self) -> tuple:
        sessions = self._dropped_sessions + sum(c.sessions for c in self.pool.values())
        return time.process_time(), time.monotonic(), sessions

    def teardown(self, run_dir: Path, procs: list) -> list[str]:
        notes = []
        self._close_watches()
        if self.rdir:
            # '[/]' and no other "<rdir>/" in the command keep pkill from matching this very command
            pattern = "[/]" + self.rdir.lstrip("/") + "/"
            kill = (f"cd {self.rdir} 2>/dev/null && for f in logs/*.pid logs/*.wpid; do [ -e \"$f\" ] && "
                    f"kill -9 $(cat \"$f\") 2>/dev/null; done; pkill -9 -f {shlex.quote(pattern)} 2>/dev/null; ")
            remove = f"cd /; rm -rf {shlex.quote(self.rdir)}; true"
            for ip in [ip for ip in self.conns if ip in self._gone]:  # nothing of the run survives there
                notes.append(f"{self.names.get(ip, ip)}: not cleaned: it stopped answering (if it still runs, "
                             "the run's processes there may too; `start_containers.py --down` removes them)")
                self._drop(ip)

            def cleanup(cmd: str) -> None:
                for ip, r in self._each(list(self.conns), lambda ip: self.conns[ip].sh(cmd), CMD_TIMEOUT_S + 2).items():
                    if isinstance(r, Exception):
                        notes.append(f"{self.names.get(ip, ip)}: cleanup failed ({getattr(r, 'why', r)})")
                        self._drop(ip)
            if getattr(self, "_collected", True):
                cleanup(kill + remove)
            else:   # a run that failed before its results were copied: its logs are the account of why
                cleanup(kill + "true")
                notes.extend(self._copy_what_is_left(run_dir))
                cleanup(remove)
        _chown_like_parent(run_dir)
        for n in notes:
            self.say(n)
        return notes

    def _copy_what_is_left(self, run_dir: Path) -> list[str]:
        """What a failed run's processes left in the containers (logs, dumps, records), copied into run_dir, every
        container in parallel, each bounded in time; notes on the containers that could not give it. (Not named
        _salvage: that is the lifecycle's, which stops a run that failed while its clients ran.)"""
        notes, n = [], 0
        got = self._each(list(self.conns), lambda ip: self.conns[ip].get_tree(self.rdir, run_dir, timeout=SALVAGE_S),
                         timeout=SALVAGE_S + 5)
        for ip, r in got.items():
            if isinstance(r, Exception):
                notes.append(f"{self.names.get(ip, ip)}: the failed run's files not copied ({getattr(r, 'why', r)})")
            else:
                n += r
        self.say(f"the failed run's files: {n} copied from {len(got) - len(notes)} container(s) into {run_dir}")
        return notes

    def _drop(self, ip: str) -> None:
        w = self.watches.pop(ip, None)
        if w is not None:
            w.close()
        self.conns.pop(ip, None)
        conn = self.pool.pop(ip, None)
        if conn is not None:
            self._dropped_sessions += conn.sessions
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    def close(self) -> None:
        for ip in list(self.pool):
            self._drop(ip)


def no_answer(ip: str, port: int, timeout: float) -> str | None:
    """None when something at ip answers a TCP connection to port within timeout (accepts or refuses it: the
    address lives), else why not (`timed out`, `No route to host`)."""
    try:
        socket.create_connection((ip, port), timeout=timeout).close()
    except ConnectionRefusedError:
        return None
    except (TimeoutError, socket.timeout):
        return f"timed out after {timeout:g}s"
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def docker_state(name: str, since_unix: float = 0.0, socket_path: str = DOCKER_SOCKET,
                 network: str | None = None) -> str | None:
    """What this host's Docker says about a container that stopped answering: `exited (137) at <when>`, `is restarting
    (last exit 137)`, `restarted at ... (its processes are gone)`, `is paused`, `no longer exists`, `is running but
    not attached to the overlay network <network>`; "" when Docker sees nothing wrong; None when it cannot be asked
    (no socket: a container on another host)."""
    if not os.path.exists(socket_path):
        return None
    try:
        from docker.errors import NotFound

        import docker
        client = docker.DockerClient(base_url=f"unix://{socket_path}", timeout=5)
    except Exception:  # noqa: BLE001
        return None
    try:
        try:
            ct = client.containers.get(name)
        except NotFound:
            return "no longer exists"
        st = ct.attrs.get("State", {})
        status, code = st.get("Status"), st.get("ExitCode")
        if status in ("exited", "dead"):
            ended = str(st.get("FinishedAt") or "")[:19]   # Docker's zero time when it never ended: not said
            return (f"exited ({code})" + (" (OOM-killed)" if st.get("OOMKilled") else "")
                    + (f" at {ended}" if ended and not ended.startswith("0001") else ""))
        if status == "restarting":
            return f"is restarting (last exit {code})"
        if status == "paused":
            return "is paused"
        started = _iso_unix(st.get("StartedAt"))
        if since_unix and started and started > since_unix:
            return f"restarted at {st.get('StartedAt', '?')[:19]} (its processes are gone; last exit {code})"
        if network and network not in ((ct.attrs.get("NetworkSettings") or {}).get("Networks") or {}):
            return (f"is running but not attached to the overlay network {network} (disconnected from it; "
                    "`make up` replaces it)")
        return ""
    except Exception:  # noqa: BLE001 -- Docker unreachable: nothing to add
        return None
    finally:
        client.close()


def _iso_unix(text) -> float | None:
    try:
        return datetime.fromisoformat(str(text)[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return None


def _chown_like_parent(run_dir: Path) -> None:
    """Results written by root in the driver belong to the owner of the mounted checkout, as if written there."""
    try:
        st = Path(run_dir).resolve().parents[2].stat()  # <checkout>/results/<name>/<run-id>
    except (OSError, IndexError):
        return
    if os.geteuid() != 0 or st.st_uid == 0:
        return
    for root, dirs, files in os.walk(Path(run_dir).parent):
        for x in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
            try:
                os.chown(x, st.st_uid, st.st_gid)
            except OSError:
                pass


class SwarmBackend(Backend):
    name = "swarm"

    def __init__(self, cfg=None, containers_yml: Path = DRIVER_CONTAINERS_YML, key_path: Path = DRIVER_KEY,
                 progress: bool = True, **runner_opts):
        if not Path(containers_yml).is_file():
            raise RuntimeError(f"{containers_yml}: not found; the swarm backend runs inside the driver container "
                               "(docker exec -i <deployment>_driver ...) after start_containers.py")
        self.state = yaml.safe_load(Path(containers_yml).read_text())
        self.cluster = Cluster(self.state)
        self.mechanism = self.state["mechanism"]
        if cfg is None:
            cfg = load_exp_config()
        self.cfg = cfg
        self.applied_jitter: dict[str, float] = {}  # netem: RTT std-dev a container's tc plan carries now, where it is
                                                   # not the deployment's (containers.yml jitter_ms)
        self.runner = SwarmRunner(self.state, Path(key_path), progress=progress, **runner_opts)

    @property
    def deployment_name(self) -> str:
        return self.cluster.deployment

    def _shard_conn(self, ip: str) -> Ssh:
        return self.runner.conn(ip)

    # registry(): Backend's. The image sets TXN_SERVER to its own txn-server, the binary the shard containers run.

    def deployment(self, **knobs) -> dict:
        return genconfig.deployment(self.state, **knobs)

    def selftest_knobs(self, cfg=None) -> dict:
        """The matrix the containers were brought up with (containers.yml), whatever exp_config says now."""
        st = self.state
        return dict(regions=st["regions"], shards=st["shards_per_region"], rtt_ms=st["rtt_ms"], jitter=0,
                    concurrency=1, clients_per_shard=1, scale=st.get("scale", 0.01))

    def run(self, deploy, name, out_root="results", config=None, meta_extra=None, probe=0) -> RunResult:
        used = {n["host"] for n in deploy["nodes"]}   # the run's containers; the deployment may have more regions
        if self.mechanism == "netem":  # tc does the delaying: (re)apply the run's jitter in each of its containers
            self._apply_jitter(round(rttlib.rtt_jitter(deploy["link"].get("jitter_ms", 0)), 6), used)
        meta = {"backend": self.name, "deployment": self.deployment_name,
                "containers": [m.name for m in self.cluster.members if m.ip in used],
                "deployment_containers": len(self.cluster.members),
                **({"job": os.environ[ENV_JOB]} if os.environ.get(ENV_JOB) else {}), **(meta_extra or {})}
        return self.runner.run(deploy, name, out_root=out_root, config=config, probe=probe, meta_extra=meta)

    def _apply_jitter(self, rtt_jitter_ms: float, ips=None) -> None:
        """Re-install the tc plan with this RTT jitter in the engines' containers of ips (None: every one that carries
        another), where it differs (idempotent; kept for restarts). A container no run uses is never touched."""
        base = self.state.get("jitter_ms", 0)
        targets = set(self.applied_jitter) if ips is None else ips
        for m in self.cluster.engines:
            if m.ip not in targets or self.applied_jitter.get(m.ip, base) == rtt_jitter_ms:
                continue
            script = to_shell(tc_plan_for(self.cfg, m.region, jitter_ms=rtt_jitter_ms))
            try:
                rc, out = self._shard_conn(m.ip).sh(
                    f"cat > {DRIVER_ETC}/tc.sh <<'EDGE_TC'\n{script}EDGE_TC\nsh {DRIVER_ETC}/tc.sh", timeout=30)
            except SshError as e:
                raise RunError(self.runner.container_problem(m.ip, e)) from None
            if rc != 0:
                raise RunError(f"re-applying tc in {m.name} failed: {out.strip()}")
            if rtt_jitter_ms == base:
                self.applied_jitter.pop(m.ip, None)
            else:
                self.applied_jitter[m.ip] = rtt_jitter_ms

    def ping_matrix(self, count: int = 10) -> dict:
        by_region: dict[int, list[str]] = {}
        for m in self.cluster.shards:
            by_region.setdefault(m.region, []).append(m.ip)
        return rttlib.ping_matrix(lambda r, argv: self._shard_conn(by_region[r][0]).sh(shlex.join(argv), timeout=60),
                           by_region, self.state["regions"], count)

    def close(self) -> None:
        """Restore the jitter the deployment was brought up with (netem) where a run changed it, then drop the SSH
        connections."""
        try:
            if self.mechanism == "netem":
                self._apply_jitter(self.state.get("jitter_ms", 0))
        finally:
            self.runner.close()
