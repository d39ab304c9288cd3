"""Swarm backend: run a deployment across the containers start_containers.py brought up.

It runs in the driver container (containers.yml and the deployment's private key are at /etc/edge-txn/), reaches
every shard container over SSH (paramiko) and drives the same process lifecycle as the local backend
(testbed/local.py): servers, READY, clients, SIGTERM, state dumps. Processes run in /tmp/edge-run/<run-id>/ of
their container; afterwards logs, state dumps and client records are copied into results/<name>/<run-id>/ of the
checkout mounted in the driver, so they appear on the host. A failed or interrupted run kills every process of
the run id in every container.
"""
from __future__ import annotations

import math
import os
import shlex
import threading
import time
from pathlib import Path

import paramiko
import yaml

from . import genconfig
from .backend import Backend
from .local import LocalBackend as _Runner, RunError, RunResult

DRIVER_ETC = Path("/etc/edge-txn")
DRIVER_CONTAINERS_YML = DRIVER_ETC / "containers.yml"
DRIVER_KEY = DRIVER_ETC / "id_ed25519"
REMOTE_ROOT = "/tmp/edge-run"
POLL_INTERVAL_S = 0.5  # one status command per container every half second while a run goes on


def inside_driver() -> bool:
    """True inside the driver container of a deployment (start_containers.py installs containers.yml there)."""
    return DRIVER_CONTAINERS_YML.is_file()


class Ssh:
    """One SSH connection to a container (root, the deployment's key)."""

    def __init__(self, ip: str, key_path: Path, timeout: float = 15):
        self.ip = ip
        self.client = paramiko.SSHClient()
        # fresh host keys per container start, on the deployment's private overlay: accept them
        self.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        try:
            self.client.connect(ip, 22, "root", key_filename=str(key_path), timeout=timeout, banner_timeout=timeout,
                                auth_timeout=timeout, allow_agent=False, look_for_keys=False)
        except Exception as e:
            raise RunError(f"cannot ssh to container {ip}: {e}") from None
        self.lock = threading.Lock()

    def sh(self, cmd: str, timeout: float = 60) -> tuple[int, str]:
        """Run cmd in the container; (exit code, stdout+stderr). RunError when it hangs or the link drops."""
        with self.lock:
            try:
                _, out, err = self.client.exec_command(cmd, timeout=timeout)
                text = out.read().decode(errors="replace") + err.read().decode(errors="replace")
                return out.channel.recv_exit_status(), text
            except (OSError, EOFError, paramiko.SSHException) as e:  # socket.timeout is an OSError
                raise RunError(f"container {self.ip}: `{cmd[:80]}` failed: {type(e).__name__} {e}") from None

    def put(self, local: Path, remote: str) -> None:
        with self.lock:
            sftp = self.client.open_sftp()
            try:
                sftp.put(str(local), remote)
            finally:
                sftp.close()

    def get_tree(self, remote_dir: str, local_dir: Path) -> int:
        """Copy the files of remote_dir/{logs,servers,clients} into local_dir/...; returns the count."""
        n = 0
        with self.lock:
            sftp = self.client.open_sftp()
            try:
                for sub in ("logs", "servers", "clients"):
                    try:
                        names = sftp.listdir(f"{remote_dir}/{sub}")
                    except OSError:
                        continue
                    (local_dir / sub).mkdir(parents=True, exist_ok=True)
                    for f in names:
                        if f.endswith((".pid", ".rc")):
                            continue
                        sftp.get(f"{remote_dir}/{sub}/{f}", str(local_dir / sub / f))
                        n += 1
            finally:
                sftp.close()
        return n

    def close(self) -> None:
        self.client.close()


class RemoteProc:
    """A txn-server/txn-client in a container, started by `sh -c '...; echo $? > X.rc'` under setsid."""

    def __init__(self, runner: "SwarmRunner", conn: Ssh, name: str, argv: list[str], rdir: str):
        self.runner, self.conn, self.name, self.argv, self.rdir = runner, conn, name, argv, rdir
        inner = f"{shlex.join(argv)} > logs/{name}.log 2>&1; echo $? > logs/{name}.rc"
        # only the detached sh keeps running; its output goes to files, so the SSH channel closes at once
        rc, out = conn.sh(f"cd {rdir} || exit 1; setsid sh -c {shlex.quote(inner)} < /dev/null > /dev/null 2>&1 & "
                          "echo $!")
        if rc != 0 or not out.strip().isdigit():
            raise RunError(f"cannot start {name} in {conn.ip}: {out.strip() or f'exit {rc}'}")
        self.pid = int(out.strip())
        self.log = Path(f"{conn.ip}:{rdir}/logs/{name}.log")

    @property
    def returncode(self):
        return self.runner.rc.get(self.name)

    def poll(self):
        return self.returncode

    def ready(self) -> bool:
        return self.name in self.runner.ready_names

    def signal(self, sig) -> None:
        self.conn.sh(f"pkill -{int(sig)} -P {self.pid} 2>/dev/null; true")

    def reap(self) -> None:
        if self.returncode is None:
            self.conn.sh(f"pkill -9 -P {self.pid} 2>/dev/null; kill -9 {self.pid} 2>/dev/null; true")

    def describe_exit(self) -> str:
        _, tail = self.conn.sh(f"tail -n 15 {self.rdir}/logs/{self.name}.log 2>/dev/null")
        lines = "\n".join("    " + x for x in tail.splitlines()) or "    (empty log)"
        return f"{self.name} exited with code {self.returncode} in {self.conn.ip}; last lines of its log:\n{lines}"


class SwarmRunner(_Runner):
    """The local runner's lifecycle with processes in the containers (hooks of testbed/local.py)."""
    backend_name = "swarm"
    measures_cpu = False

    def __init__(self, state: dict, key_path: Path, **opts):
        super().__init__(**opts)
        self.state, self.key_path = state, key_path
        self.conns: dict[str, Ssh] = {}
        self.rc: dict[str, int] = {}
        self.ready_names: set[str] = set()
        self._last_poll = 0.0

    def _conn(self, ip: str) -> Ssh:
        if ip not in self.conns:
            self.conns[ip] = Ssh(ip, self.key_path)
        return self.conns[ip]

    def _prepare(self, deploy, cfg, run_dir):
        self.rdir = f"{REMOTE_ROOT}/{run_dir.name}"
        self.rc, self.ready_names, self._last_poll = {}, set(), 0.0
        ips = sorted({n["host"] for n in deploy["nodes"]})
        threads, errors = [], []

        def setup(ip):
            try:
                c = self._conn(ip)
                rc, out = c.sh(f"mkdir -p {self.rdir}/logs {self.rdir}/servers {self.rdir}/clients")
                if rc != 0:
                    raise RunError(f"{ip}: cannot create {self.rdir}: {out.strip()}")
                c.put(cfg, f"{self.rdir}/deploy.yml")
            except Exception as e:  # noqa: BLE001 -- reported below with the container's address
                errors.append(str(e))
        for ip in ips:
            t = threading.Thread(target=setup, args=(ip,))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        if errors:
            raise RunError(errors[0])

    def _spawn(self, node, role, cfg, run_dir, out, extra):
        argv = [f"txn-{role}", "--config", f"{self.rdir}/deploy.yml", "--name", node["name"],
                "--out", f"{self.rdir}/{out}", *extra]
        return RemoteProc(self, self._conn(node["host"]), node["name"], argv, self.rdir)

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last_poll < POLL_INTERVAL_S:
            return
        self._last_poll = now
        cmd = (f"cd {self.rdir}/logs 2>/dev/null || exit 0; for f in *.rc; do [ -e \"$f\" ] && "
               f"echo \"RC ${{f%.rc}} $(cat \"$f\")\"; done; grep -h '^READY ' *.log 2>/dev/null; true")
        for conn in list(self.conns.values()):
            _, out = conn.sh(cmd)
            for line in out.splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "RC" and parts[2].lstrip("-").isdigit():
                    self.rc[parts[1]] = int(parts[2])
                elif len(parts) >= 2 and parts[0] == "READY":
                    self.ready_names.add(parts[1])

    def _collect(self, run_dir: Path) -> None:
        for conn in self.conns.values():
            conn.get_tree(self.rdir, run_dir)

    def _cleanup(self, run_dir: Path) -> None:
        rdir = getattr(self, "rdir", None)
        for conn in self.conns.values():
            try:
                if rdir:
                    # '[/]' keeps the pattern from matching this very command line
                    pattern = "[/]" + rdir.lstrip("/") + "/"
                    conn.sh(f"pkill -9 -f {shlex.quote(pattern)} 2>/dev/null; rm -rf {shlex.quote(rdir)}; true")
            except Exception:  # noqa: BLE001 -- best effort; the container may be gone
                pass
        _chown_like_parent(run_dir)

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()


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
                               "(docker exec edge_driver ...) after start_containers.py")
        self.state = yaml.safe_load(Path(containers_yml).read_text())
        self.mechanism = self.state["mechanism"]
        if cfg is None:
            from .config import load_exp_config
            cfg = load_exp_config()
        self.cfg = cfg
        self.applied_jitter = self.state.get("jitter_ms", 0)  # RTT std-dev the tc plans carry now (netem)
        self.runner = SwarmRunner(self.state, Path(key_path), progress=progress, **runner_opts)

    def built_modes(self) -> list[str]:
        ip = next(c["ip"] for c in self.state["containers"] if c["role"] == "shard")
        rc, out = self.runner._conn(ip).sh("txn-server --list-modes")
        return out.split() if rc == 0 else []

    def deployment(self, **knobs) -> dict:
        return genconfig.deployment(self.state, **knobs)

    def selftest_knobs(self, cfg=None) -> dict:
        """The matrix the containers were brought up with (containers.yml), whatever exp_config says now."""
        st = self.state
        return dict(regions=st["regions"], shards=st["shards_per_region"], rtt_ms=st["rtt_ms"], jitter=0,
                    mode="dast", concurrency=1, clients_per_shard=1, scale=st.get("scale", 0.01))

    def run(self, deploy, name, out_root="results", config=None, meta_extra=None, probe=0) -> RunResult:
        if self.mechanism == "netem":  # tc does the delaying: (re)apply the run's jitter in every container
            self._apply_jitter(round(deploy["link"].get("jitter_ms", 0) * math.sqrt(2), 6))
        meta = {"backend": self.name, "containers": [c["name"] for c in self.state["containers"]],
                **(meta_extra or {})}
        return self.runner.run(deploy, name, out_root=out_root, config=config, probe=probe, meta_extra=meta)

    def _apply_jitter(self, rtt_jitter_ms: float) -> None:
        """Re-install every shard container's tc plan with this RTT jitter (idempotent; kept for restarts)."""
        if rtt_jitter_ms == self.applied_jitter:
            return
        from .shaping import tc_plan_for, to_shell
        for c in self.state["containers"]:
            if c["role"] != "shard":
                continue
            script = to_shell(tc_plan_for(self.cfg, c["region"], jitter_ms=rtt_jitter_ms))
            rc, out = self.runner._conn(c["ip"]).sh(
                f"cat > {DRIVER_ETC}/tc.sh <<'EDGE_TC'\n{script}EDGE_TC\nsh {DRIVER_ETC}/tc.sh")
            if rc != 0:
                raise RunError(f"re-applying tc in {c['name']} failed: {out.strip()}")
        self.applied_jitter = rtt_jitter_ms

    def ping_matrix(self, count: int = 10) -> dict:
        from .selftest import ping_matrix
        by_region: dict[int, list[str]] = {}
        for c in self.state["containers"]:
            if c["role"] == "shard":
                by_region.setdefault(c["region"], []).append(c["ip"])
        return ping_matrix(lambda r, argv: self.runner._conn(by_region[r][0]).sh(shlex.join(argv)),
                           by_region, self.state["regions"], count)

    def close(self) -> None:
        """Restore the jitter the deployment was brought up with (netem), then drop the SSH connections."""
        try:
            if self.mechanism == "netem":
                self._apply_jitter(self.state.get("jitter_ms", 0))
        finally:
            self.runner.close()
