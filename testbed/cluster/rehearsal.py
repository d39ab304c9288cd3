"""A multi-host cluster rehearsed on one machine: extra Docker daemons, each in a network namespace of its own with
its own data and exec roots, joined as workers to this machine's swarm (`make rehearsal`, docs/multi-host.md).

To start_containers.py they are ordinary hosts (hosts.rehearsal.yml lists them with their unix sockets): containers
are spread over them by `cpus`, the overlay crosses them over VXLAN, the driver on the manager reaches the
containers on the workers, and a host is lost by cutting its link. Nothing here reaches beyond the machine: a
namespace has a link to this machine's bridge and a route to the manager's swarm address only.

up() records what it made in STATE; down() undoes exactly that (the swarm too, if up() created it).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import yaml
from tenacity import stop_after_delay, stop_before_delay

from testbed.cluster import swarm as swarm_mod
from testbed.core import knobs
from testbed.core.polling import poll

ROOT = Path("/run/edge-rehearsal")         # sockets, pid files, exec roots, STATE
DATA = Path("/var/lib/edge-rehearsal")     # the daemons' data roots (images, containers)
STATE = ROOT / "state.json"
BRIDGE, NET = "edgerehbr", "172.31.250"    # the hosts' link: this machine is .1, host k is .<k>
MAX_HOSTS = 8
FORWARD_RULE = ("-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")


class RehearsalError(RuntimeError):
    pass


@dataclass(frozen=True)
class FakeHost:
    index: int      # 2.. (this machine, the manager, is 1)

    @property
    def name(self) -> str:
        return f"edgereh{self.index}"

    @property
    def address(self) -> str:
        return f"{NET}.{self.index}"

    @property
    def socket(self) -> Path:
        return ROOT / f"{self.name}.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"


def _run(*argv, check=True, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise RehearsalError(f"{' '.join(map(str, argv))}: {(p.stderr or p.stdout).strip() or f'exit {p.returncode}'}")
    return p


def _say(log, msg):
    if log:
        log(msg)


def _load_state() -> dict:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def _save_state(state: dict) -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state, indent=1))


def hosts_yaml(hosts: list[FakeHost], cpus: float = 1) -> str:
    """hosts.yml for start_containers.py: this machine (the manager) first, then the rehearsal's hosts."""
    doc = {"hosts": [{"address": "localhost", "cpus": cpus}]
           + [{"address": h.address, "docker_url": h.url, "cpus": cpus} for h in hosts]}
    return "# Written by the rehearsal (testbed/cluster/rehearsal.py): this machine and its extra daemons.\n" + \
        yaml.safe_dump(doc, sort_keys=False)


def _manager_addr(main) -> str:
    info = main.info().get("Swarm") or {}
    addr = info.get("NodeAddr")
    if not addr:
        raise RehearsalError("the swarm of this machine has no node address")
    return addr


def busy_swarm_reason(swarm: dict) -> str:
    return (f"this machine is already in a swarm (advertising {swarm.get('NodeAddr')}, e.g. a deployment is up): "
            "the rehearsal makes its own, whose address its hosts share a link with (measured: workers joined to a "
            "swarm advertising this machine's own address exchange overlay traffic with each other but not with the "
            "manager); take it down first (make down)")


def busy() -> str | None:
    """Why up() would refuse now because of this machine's swarm (None: it would not)."""
    c = docker.from_env(timeout=30)
    try:
        swarm = c.info().get("Swarm") or {}
    finally:
        c.close()
    if swarm.get("LocalNodeState") == "active" and not str(swarm.get("NodeAddr", "")).startswith(f"{NET}."):
        return busy_swarm_reason(swarm)
    return None


def up(n: int = 2, image: str = knobs.default("IMAGE_NAME"), hosts_file: Path | None = None, log=print) -> list[FakeHost]:
    """n extra daemons joined to this machine's swarm (created, with its address on the bridge, if there is none),
    each with `image` loaded. Returns them; writes hosts_file if given. RehearsalError names what failed; what was
    made until then is recorded, so down() removes it."""
    if not 1 <= n <= MAX_HOSTS - 1:
        raise RehearsalError(f"hosts={n}: must be in [1, {MAX_HOSTS - 1}]")
    if _load_state():
        raise RehearsalError(f"a rehearsal is up already ({STATE}); take it down first (make rehearsal-down)")
    for tool in ("dockerd", "nsenter", "ip", "iptables", "docker"):
        if not shutil.which(tool):
            raise RehearsalError(f"{tool} not found")
    main = docker.from_env(timeout=120)
    try:
        main.images.get(image)
    except docker.errors.ImageNotFound:
        raise RehearsalError(f"image {image} not on this machine: build it first (make image)") from None
    why = busy()
    if why:
        raise RehearsalError(why)
    state = {"hosts": [], "bridge": False, "swarm_created": False, "nodes": []}
    _save_state(state)
    t0 = time.monotonic()
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    state["bridge"] = True
    _save_state(state)
    _run("ip", "addr", "add", f"{NET}.1/24", "dev", BRIDGE)
    # Frames between two hosts cross this bridge; with br_netfilter (Docker loads it) they meet the FORWARD chain,
    # whose policy Docker sets to DROP. This bridge is a wire between machines: its frames are let through.
    _run("iptables", "-I", "FORWARD", "1", *FORWARD_RULE)
    state["iptables"] = True
    _save_state(state)
    _run("ip", "link", "set", BRIDGE, "up")
    swarm = main.info().get("Swarm") or {}
    if swarm.get("LocalNodeState") != "active":
        # Docker makes docker_gwbridge for a swarm's overlays when there is none: down() removes it then, as the
        # one-node deployments' down does (testbed/cluster/swarm.py)
        state["gwbridge_created"] = not swarm_mod.has_gwbridge(main)
        main.swarm.init(advertise_addr=f"{NET}.1", listen_addr="0.0.0.0:2377")
        state["swarm_created"] = True
        _save_state(state)
    elif not swarm.get("ControlAvailable"):
        raise RehearsalError("this machine is a swarm worker; the rehearsal needs it to be the manager")
    manager = _manager_addr(main)
    token = main.swarm.attrs["JoinTokens"]["Worker"]
    driver = main.info().get("Driver") or "overlay2"
    hosts = [FakeHost(k) for k in range(2, n + 2)]
    for h in hosts:
        _start_host(h, driver, manager, state, log)
        _say(log, f"rehearsal: {h.name} ({h.address}): loading {image}")
        _run("sh", "-c", f"docker save {image} | docker -H {h.url} load", timeout=600)
        cli = docker.DockerClient(base_url=h.url, timeout=120)
        try:
            cli.swarm.join(remote_addrs=[f"{manager}:2377"], join_token=token, advertise_addr=h.address,
                           listen_addr=f"{h.address}:2377")
            state["nodes"].append((cli.info().get("Swarm") or {}).get("NodeID"))
            _save_state(state)
        finally:
            cli.close()
    if hosts_file:
        Path(hosts_file).write_text(hosts_yaml(hosts))
    _say(log, f"rehearsal: {n} extra host(s) up and in the swarm in {time.monotonic() - t0:.1f}s"
              + (f"; hosts in {hosts_file}" if hosts_file else ""))
    main.close()
    return hosts


def _start_host(h: FakeHost, driver: str, manager: str, state: dict, log) -> None:
    _say(log, f"rehearsal: {h.name} ({h.address}): namespace, link, dockerd")
    _run("ip", "netns", "add", h.name)
    state["hosts"].append(h.index)
    _save_state(state)
    _run("ip", "link", "add", f"{h.name}a", "type", "veth", "peer", "name", f"{h.name}b")
    _run("ip", "link", "set", f"{h.name}b", "netns", h.name)
    _run("ip", "link", "set", f"{h.name}a", "master", BRIDGE, "up")
    _run("ip", "-n", h.name, "addr", "add", f"{h.address}/24", "dev", f"{h.name}b")
    _run("ip", "-n", h.name, "link", "set", f"{h.name}b", "up")
    _run("ip", "-n", h.name, "link", "set", "lo", "up")
    if not manager.startswith(f"{NET}."):  # the manager's swarm address is this machine's own: one route to it
        _run("ip", "-n", h.name, "route", "add", f"{manager}/32", "via", f"{NET}.1")
    exec_root, data_root = ROOT / h.name, DATA / h.name
    for d in (exec_root, data_root):
        d.mkdir(parents=True, exist_ok=True)
    cfg = ROOT / f"{h.name}.json"   # an empty daemon.json: the machine's own would set the main daemon's roots
    cfg.write_text("{}")
    log_file = open(ROOT / f"{h.name}.log", "w")
    # nsenter, not `ip netns exec`: that remounts /sys and hides the cgroup mounts dockerd needs
    _DAEMONS[h.index] = subprocess.Popen(["nsenter", f"--net=/run/netns/{h.name}", "dockerd", "--config-file", str(cfg),
                      "--data-root", str(data_root), "--exec-root", str(exec_root), "-H", h.url,
                      "--pidfile", str(ROOT / f"{h.name}.pid"), "--storage-driver", driver],
                     stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    answers = lambda: _run("docker", "-H", h.url, "version", check=False).returncode == 0
    if poll(answers, stop_before_delay(60), 0.5):  # no ask starts later than 60 s
        return
    raise RehearsalError(f"{h.name}: dockerd did not answer within 60 s; its log: {ROOT / (h.name + '.log')}")


_DAEMONS: dict[int, subprocess.Popen] = {}   # the daemons this process started (reaped by down())


def _gone(pid: int) -> bool:
    """The process has exited (a zombie counts: reaped here when it is our child)."""
    for p in _DAEMONS.values():
        if p.pid == pid:
            return p.poll() is not None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def cut(h: FakeHost) -> None:
    """Lose the host: its link goes down (its daemon and containers stay, unreachable)."""
    _run("ip", "link", "set", f"{h.name}a", "down")


def mend(h: FakeHost) -> None:
    _run("ip", "link", "set", f"{h.name}a", "up")


def down(log=print) -> list[str]:
    """Remove what up() made: nodes out of the swarm, daemons stopped, their data, namespaces, links, bridge, and
    the swarm if up() created it. Returns what could not be removed (empty: everything)."""
    state = _load_state()
    if not state:
        return []
    left = []
    main = docker.from_env(timeout=60)
    for k in state.get("hosts", []):
        h = FakeHost(k)
        if _run("docker", "-H", h.url, "swarm", "leave", "--force", check=False).returncode != 0:
            pass  # not joined, or its daemon is gone
        pid_file = ROOT / f"{h.name}.pid"
        if pid_file.exists():
            try:
                pid = int(pid_file.read_text())
                os.kill(pid, signal.SIGTERM)
                if not poll(lambda: _gone(pid), stop_after_delay(30), 0.3):  # a last look once 30 s are up
                    left.append(f"{h.name}: dockerd (pid {pid}) still running 30 s after SIGTERM")
            except (ProcessLookupError, ValueError):
                pass
        _DAEMONS.pop(k, None)
        _run("ip", "netns", "del", h.name, check=False)
        _run("ip", "link", "del", f"{h.name}a", check=False)
        shutil.rmtree(DATA / h.name, ignore_errors=True)
        shutil.rmtree(ROOT / h.name, ignore_errors=True)
    for node_id in state.get("nodes", []):
        if node_id:
            try:
                main.nodes.get(node_id).remove(force=True)
            except docker.errors.APIError as e:
                if e.status_code != 404:
                    left.append(f"swarm node {node_id}: {e.explanation or e}")
    if state.get("swarm_created"):
        try:
            main.swarm.leave(force=True)
            if state.get("gwbridge_created"):   # unless a container of someone else's uses it by now
                swarm_mod._remove_gwbridge(main)
        except docker.errors.APIError as e:
            left.append(f"swarm: {e.explanation or e}")
    if state.get("iptables"):
        _run("iptables", "-D", "FORWARD", *FORWARD_RULE, check=False)
    if state.get("bridge"):
        _run("ip", "link", "del", BRIDGE, check=False)
    main.close()
    if not left:
        shutil.rmtree(ROOT, ignore_errors=True)
        _say(log, "rehearsal: down, nothing left")
    return left
