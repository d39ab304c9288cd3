"""Bring a deployment's containers up on a Docker Swarm and take them down again (start_containers.py).

up(cfg, hosts):
  1. connect to Docker on every host of hosts.yml (docker-py; ssh:// URLs go through paramiko);
  2. check: the image exists everywhere, SUBNET clashes with no other Docker network, every host is in the swarm
     (a one-node swarm is initialised here when there is none, and left again by down());
  3. create the attachable overlay SUBNET (with OVERLAY_MTU), unless this deployment's network exists;
  4. a fresh SSH key pair for the deployment (.edge-txn/id_ed25519, never in the image);
  5. one container per shard (placement.plan; with CONTAINERS='replica' one per follower too) with its static IP,
     NET_ADMIN, a CPU limit and labels, and the driver container at DRIVER_IP with the checkout mounted at
     /work/edge-txn, the Docker socket of its host (so a run can say why a container stopped answering) and the
     job-lock folder (testbed/core/lock.py);
  6. wait until every container runs sshd; choose the shaping mechanism (netem probe in a shard container) and,
     with netem, install the tc plan in every container that runs engine processes (/etc/edge-txn/tc.sh, re-run by
     the entrypoint when a container restarts);
  7. write containers.yml (here and, with the private key, into the driver at /etc/edge-txn/).
Idempotent: a container whose spec (and image id) is unchanged and that still runs is kept; a changed one is
replaced (so is every container after an image rebuild under the same tag); containers
of the deployment that are no longer in the plan are removed. Any failure removes everything this call started.
The work on each host (connecting, starting containers, waiting for them, removing them) runs in parallel, one
worker per host (_per_host); containers.yml records bring_up_s and where it went (bring_up_phases_s).
down(): remove every container labelled with the deployment, the network, the key pair, containers.yml, and
the swarm when up() created it.
"""
from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import os
import socket
import tarfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from tenacity import Retrying, stop_after_delay, stop_before_delay, wait_fixed

from testbed.cluster import shaping
from testbed.cluster.hosts import Host
from testbed.cluster.placement import Container, plan
from testbed.core import knobs, lock
from testbed.core.config import ExpConfig, rtt_matrix
from testbed.core.paths import REPO
from testbed.core.polling import poll

LABEL = "edge-txn.deployment"
ENGINE_ROLES = ("shard", "follower")   # the containers that run engine processes (placement.Container.role)
OWNER_LABEL = "edge-txn.checkout"   # the checkout a deployment belongs to: its driver mounts it, results land there
STATE_ROOT = REPO / ".edge-txn"
CONTAINERS_YML = REPO / "containers.yml"   # the default deployment's (DEPLOYMENT = 'edge')
DRIVER_MOUNT = "/work/edge-txn"
DRIVER_ETC = "/etc/edge-txn"
DOCKER_SOCKET = "/var/run/docker.sock"
# docker-py's read timeout per API call. Starting the first container on an overlay (Docker creates the ingress
# sandbox and docker_gwbridge then) took over 20 s on a loaded CI machine; bring-up has its own bound (up_timeout_s).
DOCKER_API_TIMEOUT_S = 180


class SwarmError(RuntimeError):
    """A bring-up or teardown problem, explained in one message."""


class NotOwner(SwarmError):
    """The deployment is up from another checkout (check_owner)."""


def state_paths(deployment: str, repo: Path = REPO) -> tuple[Path, Path]:
    """(key folder, containers.yml) of a deployment in a checkout. The default deployment keeps the well-known
    containers.yml (genConfig.py reads it); any other gets containers.<name>.yml, so a second deployment (the
    tests' own, say) never touches the first one's files."""
    yml = repo / ("containers.yml" if deployment == knobs.default("DEPLOYMENT") else f"containers.{deployment}.yml")
    return repo / ".edge-txn" / deployment, yml


def _say(log, msg):
    (log or print)(msg)


# ---------------------------------------------------------------- one worker per host

HOST_WORKERS = 32   # hosts worked on at once (connect, start, wait, remove); more hosts queue for a free worker


def _group(pairs) -> dict:
    """(host, item) pairs -> host -> [items], in the pairs' order."""
    out = {}
    for host, item in pairs:
        out.setdefault(host, []).append(item)
    return out


def _per_host(items_by_host: dict, fn, workers: int | None = None, stop: threading.Event | None = None) -> dict:
    """fn(item) for every item, one worker thread per host (up to workers, default HOST_WORKERS), each running its
    host's items in order: a docker-py client is not thread-safe, so a host's client (and its containers) is only
    ever used by that host's one worker. Returns host -> [(item, fn(item) or the exception it raised)].
    stop: no item starts once it is set, and an item that raises sets it (a host's list then ends early)."""
    if not items_by_host:
        return {}
    halt = stop if stop is not None else threading.Event()

    def run(items):
        out = []
        for item in items:
            if halt.is_set():
                break
            try:
                out.append((item, fn(item)))
            except Exception as e:  # noqa: BLE001 -- handed to the caller with its item
                out.append((item, e))
                if stop is not None:
                    stop.set()
        return out
    with ThreadPoolExecutor(min(len(items_by_host), workers or HOST_WORKERS), thread_name_prefix="per-host") as pool:
        futures = {host: pool.submit(run, items) for host, items in items_by_host.items()}
        try:
            return {host: f.result() for host, f in futures.items()}
        except BaseException:  # interrupted (Ctrl-C): the workers end their current item, and `with` waits for them
            halt.set()
            raise


def _outcomes(done: dict) -> list:
    """_per_host's answer as one list of (item, result or exception), host by host."""
    return [pair for pairs in done.values() for pair in pairs]


def _first_error(done: dict) -> Exception | None:
    return next((out for _, out in _outcomes(done) if isinstance(out, Exception)), None)


# ---------------------------------------------------------------- connecting

class _Unreachable(Exception):
    """An ssh:// host that cannot be used: what happened, and what to check."""

    def __init__(self, what: str, hint: str):
        super().__init__(what)
        self.what, self.hint = what, hint


def ssh_target(url: str) -> tuple[str, int, str | None, bool]:
    """(hostname, port, user, proxied) that docker-py's paramiko connection uses for an ssh:// URL: the URL's
    values, completed from ~/.ssh/config as docker-py does (proxied: a ProxyCommand carries the connection)."""
    u = urllib.parse.urlsplit(url)
    host, port, user, proxied = u.hostname or "", u.port, u.username, False
    conf_file = Path("~/.ssh/config").expanduser()
    if conf_file.is_file():
        import paramiko
        conf = paramiko.SSHConfig.from_path(str(conf_file)).lookup(host)
        proxied = "proxycommand" in conf
        port = port or (int(conf["port"]) if "port" in conf else None)
        user = user or conf.get("user")
        host = conf.get("hostname", host)
    return host, port or 22, user, proxied


RESET_HINT = "reset by the peer: a firewall or sshd dropping it (MaxStartups)?"


def _tcp_connect(infos, host: str, port: int, timeout_s: float):
    """A socket connected to the first address of infos that accepts, all tried within timeout_s together (as
    paramiko tries them); else _Unreachable: timed out when one of them did, refused when all refused."""
    where, deadline, errors = f"{host}:{port}", time.monotonic() + timeout_s, []
    for family, kind, proto, _, addr in infos:
        left = deadline - time.monotonic()
        if left <= 0:
            errors.append(TimeoutError())
            break
        sock = socket.socket(family, kind, proto)
        sock.settimeout(left)
        try:
            sock.connect(addr)
            return sock
        except OSError as e:
            sock.close()
            errors.append(e)
    if any(isinstance(e, TimeoutError) for e in errors):
        raise _Unreachable(f"timed out connecting to {where} ({timeout_s:g} s)",
                           f"is the host up and port {port} open to this machine (firewall)? "
                           "SSH_CONNECT_TIMEOUT_S in exp_config.py sets the wait")
    if all(isinstance(e, ConnectionRefusedError) for e in errors):
        raise _Unreachable(f"connection refused by {where}", f"is sshd running on {host}, on port {port}?")
    if all(isinstance(e, ConnectionResetError) for e in errors):
        # a reset is the answer to an established connection (a SYN refused is ECONNREFUSED): it came after the
        # handshake, before this thread saw the connect return (a loaded machine), so it is what probe_ssh says
        # of a reset before the banner
        raise _Unreachable(f"{where} reset the connection before its SSH banner", RESET_HINT)
    e = next(e for e in errors if not isinstance(e, ConnectionRefusedError))
    raise _Unreachable(f"cannot connect to {where} ({e.strerror or e})",
                       "is the host up and reachable from this machine?")


def probe_ssh(host: str, port: int, timeout_s: float) -> str:
    """Open TCP to host:port and read the SSH banner, each within timeout_s; returns the banner line.
    _Unreachable says what failed: DNS, connect timeout, refused, no banner, not an SSH server, or the connection
    closed (sshd refusing this machine) or reset (a firewall or an sshd dropping it) before the banner."""
    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise _Unreachable(f"cannot resolve {host} ({e.strerror})", "check the address in hosts.yml") from None
    sock = _tcp_connect(infos, host, port, timeout_s)
    with sock:
        deadline, buf = time.monotonic() + timeout_s, b""
        while True:  # RFC 4253: the server may send other lines before 'SSH-...'
            lines = buf.split(b"\n")
            for line in lines[:-1]:
                if line.startswith(b"SSH-"):
                    try:  # our own version line, so sshd logs a client that left rather than a bad banner
                        sock.sendall(b"SSH-2.0-edge-txn-probe\r\n")
                    except OSError:
                        pass
                    return line.decode(errors="replace").strip()
            if len(buf) > 8192:
                raise _Unreachable(f"{where} is not an SSH server (it sent {lines[0][:40].decode(errors='replace')!r})",
                                   "does the port in hosts.yml (docker_url) belong to sshd?")
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                chunk = sock.recv(1024)
            except TimeoutError:
                chunk = None
            except ConnectionResetError:
                raise _Unreachable(f"{where} reset the connection before its SSH banner", RESET_HINT) from None
            except OSError as e:
                raise _Unreachable(f"{where} dropped the connection before its SSH banner ({e.strerror or e})",
                                   f"is sshd on {host} refusing this machine (MaxStartups, tcp wrappers)?") from None
            if chunk is None:
                raise _Unreachable(f"no SSH banner within {timeout_s:g} s from {where}",
                                   f"something accepts TCP on port {port} but no SSH server speaks: is sshd running "
                                   "there and not overloaded, and is this its port?")
            if not chunk:
                raise _Unreachable(f"{where} closed the connection before its SSH banner",
                                   f"is sshd on {host} refusing this machine (MaxStartups, tcp wrappers)?")
            buf += chunk


def _within(fn, timeout_s: float):
    """fn() in a daemon thread: its result or its exception, or TimeoutError after timeout_s (the thread is left
    to die with the process: paramiko's key exchange has no time limit of its own)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 -- handed to the caller
            out["error"] = e
    t = threading.Thread(target=run, name="docker-connect", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TimeoutError
    if "error" in out:
        raise out["error"]
    return out["value"]


def _open_docker(url: str, timeout: float):
    import docker
    c = docker.DockerClient(base_url=url, timeout=timeout, use_ssh_client=False)
    try:
        c.ping()
    except BaseException:
        c.close()
        raise
    return c


def _connect_ssh(h: Host, timeout: float, ssh_timeout_s: float):
    """A DockerClient for an ssh:// host within about ssh_timeout_s, or _Unreachable."""
    import paramiko

    import docker  # noqa: F401 -- imported here, not inside the time limit below
    host, port, user, proxied = ssh_target(h.url)
    login = (f"-p {port} " if port != 22 else "") + f"{user + '@' if user else ''}{host}"
    if not proxied:  # with a ProxyCommand there is no direct TCP path to probe; the bound below still holds
        probe_ssh(host, port, ssh_timeout_s)
    try:
        return _within(lambda: _open_docker(h.url, timeout), ssh_timeout_s)
    except TimeoutError:
        raise _Unreachable(f"no answer within {ssh_timeout_s:g} s after the SSH banner (key exchange, "
                           "authentication or the Docker API stalled)",
                           f"does `ssh {login} docker version` answer?") from None
    except paramiko.AuthenticationException:
        raise _Unreachable(f"auth failed as {user or 'your ssh user'}",
                           f"can this machine `ssh {login}` with a key and no password (ssh-copy-id)?") from None
    except paramiko.SSHException as e:
        if "known_hosts" in str(e):
            raise _Unreachable(f"the host key of {host} is not in ~/.ssh/known_hosts",
                               f"ssh to it once (`ssh {login}`) to check and accept its key") from None
        raise _Unreachable(f"{_short(e)}", f"does `ssh {login} docker version` answer?") from None


def connect(hosts, timeout: float = DOCKER_API_TIMEOUT_S, ssh_timeout_s: float = 15, log=None) -> dict:
    """address -> docker.DockerClient for every host, connected in parallel (one worker per host); SwarmError
    naming the first host (in hosts' order) that cannot be used, after closing the clients that did open.
    Each non-local host is announced; an ssh:// host fails within about ssh_timeout_s (SSH_CONNECT_TIMEOUT_S)
    when it does not answer: TCP connect and the SSH banner are probed first, then docker-py's paramiko
    connection and the ping get that long again."""
    hosts = list(hosts)
    opened, lock = {}, threading.Lock()

    def open_one(h):
        ssh = h.url.startswith("ssh://")
        if not h.is_local:
            _say(log, f"connecting to {h.address} ({h.url}) ...")
        try:
            c = _connect_ssh(h, timeout, ssh_timeout_s) if ssh else _open_docker(h.url, timeout)
        except _Unreachable as e:
            raise SwarmError(f"host {h.address} ({h.url}): cannot reach Docker over SSH: {e.what}; {e.hint}") \
                from None
        except Exception as e:  # noqa: BLE001 -- DockerException, OSError, paramiko's own types for ssh://
            hint = ("is the Docker daemon running? (systemctl start docker)" if h.is_local else
                    f"can this machine ssh to {h.user + '@' if h.user else ''}{h.address} with a key, and does "
                    "Docker run there?")
            over = " over SSH" if ssh else ""
            raise SwarmError(f"host {h.address} ({h.url}): cannot reach Docker{over}: {_short(e)}; {hint}") \
                from None
        with lock:
            opened[h.address] = c
        return c
    try:
        done = _per_host(_group((h.address, h) for h in hosts), open_one)
        failed = {h.address: out for h, out in _outcomes(done) if isinstance(out, Exception)}
        for h in hosts:
            if h.address in failed:
                raise failed[h.address]
    except BaseException:
        for c in opened.values():
            c.close()
        raise
    return {h.address: opened[h.address] for h in hosts}


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[-1] if text else type(e).__name__)[:300]


# ---------------------------------------------------------------- checks

def check_image(clients: dict, image: str) -> dict:
    """address -> the image's id on that host; SwarmError naming the hosts that lack it."""
    from docker.errors import ImageNotFound
    missing, ids = [], {}
    for addr, c in clients.items():
        try:
            ids[addr] = c.images.get(image).id
        except ImageNotFound:
            missing.append(addr)
    if missing:
        raise SwarmError(f"IMAGE_NAME={image!r} is missing on {', '.join(missing)}; build it there with "
                         f"`docker/build_image.sh {image}` (or `docker save | ssh host docker load`)")
    return ids


def check_subnet(clients: dict, cfg: ExpConfig, deployment: str | None = None) -> None:
    """SUBNET must not overlap any other Docker network (or an address of this machine). Not checked here, because
    ensure_network() says more: the deployment's own network (whatever its name and subnet: a changed SUBNET is
    not a clash with itself) and a network named NETWORK_NAME."""
    deployment = deployment or cfg.deployment
    want = ipaddress.IPv4Network(cfg.subnet)
    for addr, c in clients.items():
        for net in c.networks.list():
            attrs = net.attrs
            if attrs.get("Name") == cfg.network_name or (attrs.get("Labels") or {}).get(LABEL) == deployment:
                continue
            for pool in (attrs.get("IPAM") or {}).get("Config") or []:
                sub = pool.get("Subnet")
                try:
                    other = ipaddress.ip_network(sub, strict=False)
                except (TypeError, ValueError):
                    continue
                if other.version == 4 and other.overlaps(want):
                    raise SwarmError(f"SUBNET={cfg.subnet} clashes with Docker network {attrs.get('Name')!r} "
                                     f"({sub}) on {addr}; choose another SUBNET in exp_config.py or remove it")
    for line in os.popen("ip -o -4 addr show 2>/dev/null").read().splitlines():
        parts = line.split()
        if "inet" in parts:
            iface = ipaddress.IPv4Interface(parts[parts.index("inet") + 1])
            if iface.network.overlaps(want) and not parts[1].startswith(("br-", "docker_gwbridge")):
                raise SwarmError(f"SUBNET={cfg.subnet} clashes with {iface} on interface {parts[1]} of this "
                                 "machine; choose another SUBNET in exp_config.py")


# ---------------------------------------------------------------- swarm and network

def ensure_swarm(clients: dict, hosts, log=None) -> bool:
    """The first host must be a swarm manager; a lone host with no swarm gets a one-node swarm (-> True).
    Every other host must already be a node of that swarm (docs/running.md: `docker swarm join`)."""
    first = clients[hosts[0].address]
    info = first.info().get("Swarm") or {}
    created = False
    if info.get("LocalNodeState") != "active":
        if len(hosts) > 1:
            raise SwarmError(f"host {hosts[0].address} is not in a swarm; run `docker swarm init` there and "
                             "`docker swarm join` on the others (docs/running.md, \"Multi-host: the steps\")")
        addr = _advertise_addr(hosts[0])
        _say(log, f"swarm: none on {hosts[0].address}; initialising a one-node swarm (advertise {addr})")
        try:
            first.swarm.init(advertise_addr=addr, listen_addr="0.0.0.0:2377")
        except Exception as e:
            raise SwarmError(f"docker swarm init on {hosts[0].address} failed: {_short(e)}") from None
        created, info = True, first.info().get("Swarm") or {}
    if not info.get("ControlAvailable"):
        raise SwarmError(f"host {hosts[0].address} is a swarm worker; list a manager first in hosts.yml")
    members = {n.attrs.get("ID") for n in first.nodes.list()}
    for h in hosts[1:]:
        node_id = (clients[h.address].info().get("Swarm") or {}).get("NodeID")
        if node_id not in members:
            raise SwarmError(f"host {h.address} is not a node of {hosts[0].address}'s swarm; run there the "
                             f"command `docker swarm join-token worker` prints on {hosts[0].address}")
    return created


def _advertise_addr(host: Host) -> str:
    if not host.is_local:
        return host.address
    # the source address of the default route: an address other swarm nodes could reach
    for line in os.popen("ip -o -4 route get 1.1.1.1 2>/dev/null").read().splitlines():
        parts = line.split()
        if "src" in parts:
            return parts[parts.index("src") + 1]
    return "127.0.0.1"


MTU_OPTION = "com.docker.network.driver.mtu"


def network_changes(attrs: dict, cfg: ExpConfig) -> list[str]:
    """What the exp_config.py values that define a deployment's network (NETWORK_NAME, SUBNET, OVERLAY_MTU) say
    now against what the existing network was made with: ['SUBNET changed from a to b', ...]."""
    subnets = [p.get("Subnet") for p in (attrs.get("IPAM") or {}).get("Config") or []]
    mtu = (attrs.get("Options") or {}).get(MTU_OPTION)
    out = []
    if attrs.get("Name") != cfg.network_name:
        out.append(f"NETWORK_NAME changed from {attrs.get('Name')!r} to {cfg.network_name!r}")
    if subnets != [cfg.subnet]:
        out.append(f"SUBNET changed from {', '.join(map(str, subnets)) or 'none'} to {cfg.subnet}")
    if (mtu or None) != (str(cfg.overlay_mtu) if cfg.overlay_mtu else None):
        out.append(f"OVERLAY_MTU changed from {mtu or 'None'} to {cfg.overlay_mtu}")
    return out


def ensure_network(manager, cfg: ExpConfig, deployment: str, log=None):
    """The deployment's overlay network: the existing one (found by its label) when it matches exp_config.py,
    else SwarmError: changed values while the deployment is up (tear down first), or NETWORK_NAME taken by a
    network that is not this deployment's. Created when there is none."""
    from docker.types import IPAMConfig, IPAMPool
    nets = manager.networks.list()
    for net in nets:
        if (net.attrs.get("Labels") or {}).get(LABEL) != deployment:
            continue
        changes = network_changes(net.attrs, cfg)
        if changes:
            raise SwarmError(f"{' and '.join(changes)} while deployment {deployment} is up (its network "
                             f"{net.attrs.get('Name')} was made with the old value{'s' if len(changes) > 1 else ''}); "
                             "tear it down first with the old exp_config.py values (`make down`, i.e. "
                             "`.venv/bin/python start_containers.py --down`), then bring it up with the new ones")
        return net
    for net in nets:
        if net.attrs.get("Name") != cfg.network_name:
            continue
        subnets = [p.get("Subnet") for p in (net.attrs.get("IPAM") or {}).get("Config") or []]
        raise SwarmError(f"NETWORK_NAME={cfg.network_name!r} exists already (subnets {subnets}) and was not "
                         "made by this deployment; remove it or choose another NETWORK_NAME")
    opts = {MTU_OPTION: str(cfg.overlay_mtu)} if cfg.overlay_mtu else {}
    _say(log, f"network: creating overlay {cfg.network_name} {cfg.subnet}"
         + (f" mtu {cfg.overlay_mtu}" if cfg.overlay_mtu else ""))
    try:
        return manager.networks.create(cfg.network_name, driver="overlay", attachable=True, options=opts,
                                       ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=cfg.subnet)]),
                                       labels={LABEL: deployment})
    except Exception as e:
        raise SwarmError(f"cannot create overlay network {cfg.network_name} {cfg.subnet}: {_short(e)}") from None


# ---------------------------------------------------------------- keys

def keypair(state_dir: Path) -> tuple[Path, str]:
    """The deployment's ed25519 key pair (created once per deployment; down() deletes it). -> (private, public)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    priv, pub = state_dir / "id_ed25519", state_dir / "id_ed25519.pub"
    if priv.is_file() and pub.is_file():
        return priv, pub.read_text().strip()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                            serialization.NoEncryption())
    line = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode() + " edge-txn-deployment"
    fd = os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub.write_text(line + "\n")
    return priv, line


# ---------------------------------------------------------------- whose deployment

def checkout_id(repo: Path = REPO) -> str:
    """The checkout a deployment brought up from here belongs to: this machine's name and the checkout's path."""
    return f"{socket.gethostname()}:{Path(repo).resolve()}"


def owner_of(clients: dict, deployment: str) -> str | None:
    """The checkout the deployment's driver belongs to (checkout_id form), None when no driver runs. A driver from
    before the owner label is known by its mount of the checkout."""
    for addr, ct in _labelled(clients, deployment):
        if ct.labels.get("edge-txn.role") != "driver":
            continue
        if ct.labels.get(OWNER_LABEL):
            return ct.labels[OWNER_LABEL]
        source = next((m.get("Source") for m in ct.attrs.get("Mounts") or [] if m.get("Destination") == DRIVER_MOUNT),
                      None)
        if source:
            name = clients[addr].info().get("Name") or addr
            return f"{name}:{source}"
    return None


def check_owner(clients: dict, deployment: str, repo: Path = REPO, take_over: bool = False, log=None,
                removing: bool = False) -> None:
    """SwarmError when the deployment is up from another checkout (jobs would write into that checkout's results/
    and run its code), unless take_over (then said in one line)."""
    owner, me = owner_of(clients, deployment), checkout_id(repo)
    if owner is None or owner == me:
        return
    if not take_over:
        how = "start_containers.py --take-over" + (" --down" if removing else "")
        raise NotOwner(f"deployment {deployment!r} belongs to another checkout, {owner} (its driver mounts that "
                         "checkout: jobs would write their results there); `make down` there first, or give this "
                         "checkout its own DEPLOYMENT, NETWORK_NAME, SUBNET and DRIVER_IP in exp_config.py, or "
                         f"{'remove' if removing else 'take over'} it from here with `{how}`")
    _say(log, f"{'removing' if removing else 'taking over'} deployment {deployment!r} of {owner}"
         + ("" if removing else ": its containers are replaced")
         + "; that checkout's containers.yml no longer describes what runs")


def ensure_owner(cfg: ExpConfig, hosts, deployment: str | None = None, repo: Path = REPO) -> None:
    """check_owner() for a job about to use the deployment (the driver runs on the first host)."""
    clients = connect(list(hosts)[:1], ssh_timeout_s=cfg.ssh_connect_timeout_s)
    try:
        check_owner(clients, deployment or cfg.deployment, repo)
    finally:
        for c in clients.values():
            c.close()


# ---------------------------------------------------------------- containers

@dataclass
class Spec:
    container: Container
    kwargs: dict
    digest: str = ""
    files: dict = field(default_factory=dict)  # path in container -> bytes, installed after start


def cpu_limit(cfg: ExpConfig, host_cpus: int, on_host: int) -> float | None:
    """CPUs a container may use: CONTAINER_CPUS (None: no limit), 'auto': 2x its fair share of the host
    (>= 0.5, <= host)."""
    v = cfg.container_cpus
    if v is None:
        return None
    if v == "auto":
        return round(min(float(host_cpus), max(0.5, 2.0 * host_cpus / max(1, on_host))), 2)
    return float(v)


def specs(cfg: ExpConfig, containers: list[Container], pubkey: str, deployment: str, host_cpus: dict,
          repo: Path = REPO, image_ids: dict | None = None) -> list[Spec]:
    """The docker run arguments of every container. The digest covers them and the image's id on the container's
    host (image_ids: address -> id), so a rebuilt image under the same tag replaces the containers."""
    per_host = {}
    for c in containers:
        per_host[c.host.address] = per_host.get(c.host.address, 0) + 1
    out = []
    for c in containers:
        labels = {LABEL: deployment, OWNER_LABEL: checkout_id(repo), "edge-txn.role": c.role,
                  "edge-txn.region": str(c.region), "edge-txn.shard": str(c.shard),
                  **({"edge-txn.replica": str(c.replica)} if c.replica else {})}
        kw = dict(image=cfg.image_name, name=c.name, hostname=c.name, detach=True, cap_add=["NET_ADMIN"],
                  environment={"EDGE_TXN_AUTHORIZED_KEYS": pubkey, "EDGE_TXN_NAME": c.name},
                  labels=labels, restart_policy={"Name": "unless-stopped"})
        cpus = cpu_limit(cfg, host_cpus[c.host.address], per_host[c.host.address])
        if cpus:
            kw["nano_cpus"] = int(cpus * 1e9)
        if c.role == "driver":
            kw["volumes"] = {str(repo): {"bind": DRIVER_MOUNT, "mode": "rw"},
                             DOCKER_SOCKET: {"bind": DOCKER_SOCKET, "mode": "rw"},
                             str(lock.lock_dir()): {"bind": str(lock.DEFAULT_DIR), "mode": "rw"}}
            kw["environment"]["PYTHONPATH"] = DRIVER_MOUNT
            kw["working_dir"] = DRIVER_MOUNT
        image_id = (image_ids or {}).get(c.host.address)
        digest = hashlib.sha256(json.dumps([kw, c.ip, cfg.network_name, image_id], sort_keys=True, default=str)
                                .encode()).hexdigest()[:16]
        kw["labels"]["edge-txn.spec"] = digest
        out.append(Spec(c, kw, digest))
    return out


def _tar(files: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put_files(container, files: dict) -> None:
    """files: absolute path -> (bytes, mode); parents are created."""
    dirs = {str(Path(p).parent) for p in files}
    container.exec_run(["mkdir", "-p", *sorted(dirs)])
    container.put_archive("/", _tar(files))


def exec_run(container, argv) -> tuple[int, str]:
    r = container.exec_run(argv, demux=False)
    return r.exit_code, (r.output or b"").decode(errors="replace").strip()


def _labelled(clients: dict, deployment: str):
    for addr, c in clients.items():
        for ct in c.containers.list(all=True, filters={"label": f"{LABEL}={deployment}"}):
            yield addr, ct


def _start(client, spec: Spec, network: str):
    """The started container. A start whose answer timed out may still have gone through in the daemon: the
    container is then looked up by name and handed to the up-wait, which tells whether it runs."""
    from docker.types import EndpointConfig
    endpoint = EndpointConfig(client.api._version, ipv4_address=spec.container.ip)
    try:
        return client.containers.run(network=network, networking_config={network: endpoint}, **spec.kwargs)
    except Exception as e:
        if not _is_read_timeout(e):
            raise
        try:
            ct = client.containers.get(spec.container.name)
        except Exception:  # noqa: BLE001 -- not created: the timeout is the error to report
            raise e from None
        if ct.status == "created":  # created, and the start is what timed out (or never came)
            ct.start()
        return ct


def _is_read_timeout(e: BaseException) -> bool:
    import requests
    return isinstance(e, (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError)) and \
        "timed out" in str(e).lower()


def _died(name: str, ct) -> SwarmError:
    logs = ct.logs(tail=15).decode(errors="replace").strip() or "(no output)"
    code = ct.attrs.get("State", {}).get("ExitCode")
    return SwarmError(f"container {name} died during bring-up (exit code {code}); its last output:\n"
                      + "\n".join("    " + x for x in logs.splitlines()))


def _has_died(ct) -> bool:
    """Exited, or exited and being restarted by its restart policy (a container that restarts during bring-up
    died: its status flips between restarting and running, so the restart count is what tells)."""
    return ct.status in ("exited", "dead", "restarting") or int(ct.attrs.get("RestartCount") or 0) > 0


def _raise_if_one_died(started: dict) -> None:
    for name, ct in started.items():
        try:
            ct.reload()
        except Exception:  # noqa: BLE001 -- gone entirely: nothing to report from it
            continue
        if _has_died(ct):
            raise _died(name, ct)


def _sshd_up(ct) -> bool:
    from docker.errors import APIError
    try:
        return exec_run(ct, ["test", "-s", "/run/sshd.pid"])[0] == 0
    except APIError:  # stopped or restarting between reload() and exec: the next round sees why
        return False


def health_problem(ct, network: str, ip: str) -> str | None:
    """What keeps a running container from serving the deployment, as Docker sees it: not attached to the overlay
    (e.g. `docker network disconnect`), another address on it, or no sshd; None when healthy."""
    nets = (ct.attrs.get("NetworkSettings") or {}).get("Networks") or {}
    if network not in nets:
        return f"is not attached to the overlay network {network} (disconnected)"
    got = ((nets[network] or {}).get("IPAMConfig") or {}).get("IPv4Address") or (nets[network] or {}).get("IPAddress")
    if got != ip:
        return f"has address {got or 'none'} on {network}, not {ip}"
    if not _sshd_up(ct):
        return "runs no sshd"
    return None


# Run in the driver: connect to port 22 of every address given, in parallel; print the ones that fail and why.
_PROBE_SSH = """
import socket, sys, concurrent.futures as cf
def probe(ip):
    try:
        with socket.create_connection((ip, 22), timeout=3) as s:
            s.settimeout(3)
            return None if s.recv(4).startswith(b"SSH") else "no SSH banner"
    except OSError as e:
        return e.strerror or type(e).__name__
with cf.ThreadPoolExecutor(32) as pool:
    for ip, why in zip(sys.argv[1:], pool.map(probe, sys.argv[1:])):
        if why:
            print(ip, why)
"""


def unreachable_from(driver, targets: dict) -> dict:
    """{name: why} of the targets (name -> ip) whose sshd the driver container cannot reach over the overlay."""
    if not targets:
        return {}
    by_ip = {ip: name for name, ip in targets.items()}
    rc, out = exec_run(driver, ["python3", "-c", _PROBE_SSH, *by_ip])
    if rc != 0:
        return {name: f"the probe failed in the driver: {out[-200:]}" for name in targets}
    found = {}
    for line in out.splitlines():
        ip, _, why = line.partition(" ")
        if ip in by_ip:
            found[by_ip[ip]] = why
    return found


def _wait_up(started: dict, timeout_s: float, log=None, host_of: dict | None = None) -> None:
    """Every container running and its sshd up; SwarmError with the logs of the first that died.
    host_of: name -> host address; each round looks at the containers of every host in parallel (names without
    a host share one worker)."""
    pending = dict(started)
    host_of = host_of or {}

    def look(name) -> bool:  # on its host's worker
        ct = pending[name]
        ct.reload()
        if _has_died(ct):
            raise _died(name, ct)
        return ct.status == "running" and _sshd_up(ct)

    def all_up() -> bool:  # one look at those not up yet; a death raises at once (not retried)
        done = _per_host(_group((host_of.get(name), name) for name in pending), look, stop=threading.Event())
        err = _first_error(done)
        if err is not None:
            raise err
        for name, is_up in _outcomes(done):
            if is_up:
                del pending[name]
        return not pending
    if not poll(all_up, stop_after_delay(timeout_s), 0.3):
        raise SwarmError(f"containers not up after {timeout_s:g}s: {', '.join(sorted(pending)[:8])}")


def up(cfg: ExpConfig, hosts, deployment: str | None = None, repo: Path = REPO, state_dir: Path | None = None,
       containers_yml: Path | None = None, log=None, up_timeout_s: float = 120, take_over: bool = False) -> dict:
    """Bring the deployment up (see the module doc); returns the containers.yml content.
    deployment: the label value (default: DEPLOYMENT); state_dir/containers_yml default to state_paths().
    A deployment up from another checkout is refused (SwarmError) unless take_over."""
    deployment = deployment or cfg.deployment
    default_dir, default_yml = state_paths(deployment, repo)
    state_dir, containers_yml = state_dir or default_dir, containers_yml or default_yml
    hosts = list(hosts)
    t_start = mark = time.monotonic()
    phases = {}  # where the bring-up time goes: phase -> seconds

    def lap(phase):
        nonlocal mark
        now = time.monotonic()
        phases[phase], mark = round(now - mark, 2), now
    containers = plan(cfg, hosts)  # ValueError for a too-small subnet, before anything is touched
    clients = connect(hosts, ssh_timeout_s=cfg.ssh_connect_timeout_s, log=log)
    lap("connect")
    created_swarm, created_net, started, attempted = False, False, {}, set()
    fresh_key = not (state_dir / "id_ed25519").is_file()
    prev = load_state(containers_yml)
    gwbridge_before = has_gwbridge(clients[hosts[0].address])
    try:
        check_owner(clients, deployment, repo, take_over, log)
        image_ids = check_image(clients, cfg.image_name)
        check_subnet(clients, cfg, deployment)
        created_swarm = ensure_swarm(clients, hosts, log)
        manager = clients[hosts[0].address]
        had_net = any((n.attrs.get("Labels") or {}).get(LABEL) == deployment for n in manager.networks.list())
        ensure_network(manager, cfg, deployment, log)
        created_net = not had_net
        key_path, pubkey = keypair(state_dir)
        host_cpus = {a: int(c.info().get("NCPU") or 1) for a, c in clients.items()}
        wanted = {s.container.name: s for s in specs(cfg, containers, pubkey, deployment, host_cpus, repo,
                                                      image_ids)}

        def keep(labelled) -> bool:  # on the container's host's worker: True to keep it, else it is removed
            addr, ct = labelled
            s = wanted.get(ct.name)
            if s and s.container.host.address == addr and ct.labels.get("edge-txn.spec") == s.digest \
                    and ct.status == "running":
                sick = health_problem(ct, cfg.network_name, s.container.ip)
                if sick is None:
                    return True
                _say(log, f"container {ct.name} {sick}: replacing it")
            ct.remove(force=True)
            return False
        done = _per_host(_group((addr, (addr, ct)) for addr, ct in _labelled(clients, deployment)), keep,
                         stop=threading.Event())
        if (err := _first_error(done)) is not None:
            raise err
        kept = {ct.name: ct for (_, ct), keep_it in _outcomes(done) if keep_it}
        driver_name = containers[-1].name
        if driver_name in kept:  # what the runs need of a kept shard: its sshd reachable from the driver
            for name, why in unreachable_from(kept[driver_name], {n: wanted[n].container.ip for n in kept
                                                                  if n != driver_name}).items():
                _say(log, f"container {name} cannot be reached from the driver ({why}): replacing it")
                kept.pop(name).remove(force=True)
        for name, ct in kept.items():
            wanted[name].kwargs = None  # keep it
            started[name] = ct
        new = [s for s in wanted.values() if s.kwargs is not None]
        attempted = {s.container.name for s in new}

        def exists(s) -> bool:  # on its host's worker
            try:
                clients[s.container.host.address].containers.get(s.container.name)
            except Exception:  # noqa: BLE001 -- not there: good
                return False
            return True
        done = _per_host(_group((s.container.host.address, s) for s in new), exists)
        taken = {s.container.name for s, there in _outcomes(done) if there is True}
        for s in new:
            if s.container.name in taken:
                raise SwarmError(f"a container named {s.container.name} exists on {s.container.host.address} "
                                 f"and is not part of this deployment; remove it (docker rm -f {s.container.name})")
        lap("checks")
        # One canary per host first, up and running before the others start. A host leaves the overlay when its
        # last container on it exits; a container started at that moment fails ("network not found") and Docker
        # leaks its network attachment, which keeps the overlay from ever being removed until the swarm is left.
        # With a live container per host, none of the others can race a host leaving the overlay; and an image
        # whose containers die at once is found with one container started per host, not all of them.
        # Each batch is started by one worker per host (its containers in order); a failed start stops every
        # worker before its next start.
        canaries = list({s.container.host.address: s for s in reversed(new)}.values())
        rest = [s for s in new if s not in canaries]
        host_of = {c.name: c.host.address for c in containers}
        started_lock, failure = threading.Lock(), threading.Event()

        def start(s):  # on its host's worker
            ct = _start(clients[s.container.host.address], s, cfg.network_name)
            with started_lock:
                started[s.container.name] = ct
        for batch in (canaries, rest):
            done = _per_host(_group((s.container.host.address, s) for s in batch), start, stop=failure)
            failed = {s.container.name: e for s, e in _outcomes(done) if isinstance(e, Exception)}
            if failed:
                _raise_if_one_died(started)  # the root cause, e.g. the overlay vanished with its last container
                s = next(s for s in batch if s.container.name in failed)
                raise SwarmError(f"cannot start {s.container.name} ({s.container.ip}) on "
                                 f"{s.container.host.address}: {_short(failed[s.container.name])}")
            if batch is canaries and rest:
                _wait_up({s.container.name: started[s.container.name] for s in canaries}, up_timeout_s, log,
                         host_of)
        lap("start")
        _say(log, f"containers: {len(new)} started, {len(kept)} kept (unchanged and healthy); waiting for sshd")
        _wait_up(started, up_timeout_s, log, host_of)
        lap("wait_up")
        far = {}

        def all_reachable() -> bool:  # a new container's overlay path may take a moment after its sshd is up
            far.clear()
            far.update(unreachable_from(started[driver_name], {c.name: c.ip for c in containers
                                                               if c.name != driver_name}))
            return not far
        if not poll(all_reachable, stop_after_delay(30), 1.0):
            raise SwarmError("from the driver, cannot reach the sshd of " + "; ".join(
                f"{n} ({why})" for n, why in sorted(far.items())[:5]) + " (the overlay network between hosts?)")
        lap("reach")

        probe = None
        if cfg.shaping != "app":  # netem only when the kernel of every host has it (one container per host)
            probe = (True, "netem available")
            engines = [c for c in containers if c.role in ENGINE_ROLES]
            for addr in dict.fromkeys(c.host.address for c in engines):
                ct = next(started[c.name] for c in engines if c.host.address == addr)
                ok, detail = shaping.netem_supported(run=lambda argv, ct=ct: exec_run(ct, argv), dev="lo")
                if not ok:
                    probe = (False, f"on {addr}: {detail}")
                    break
        mechanism, detail = shaping.choose_mechanism(cfg.shaping, probe, log=lambda m: _say(log, m))
        if mechanism == "netem":
            apply_netem(cfg, containers, started, cfg.jitter_ms)
        lap("shaping")
        state = {
            "deployment": deployment, "network": cfg.network_name, "subnet": cfg.subnet, "image": cfg.image_name,
            "mechanism": mechanism, "mechanism_detail": detail, "jitter_ms": cfg.jitter_ms,
            "swarm_created": bool(created_swarm or (prev or {}).get("swarm_created")),
            # Docker makes docker_gwbridge for the first overlay container; removed by down() if it was not there
            "gwbridge_created": bool((prev or {}).get("gwbridge_created") if prev else not gwbridge_before),
            "key": str(key_path), "regions": cfg.max_regions, "shards_per_region": cfg.shards_per_region,
            "rtt_ms": rtt_matrix(cfg), "scale": cfg.scale,
            "hosts": [h.address for h in hosts],
            "container_layout": cfg.containers,
            "containers": [dict(name=c.name, ip=c.ip, host=c.host.address, region=c.region, shard=c.shard,
                                role=c.role, id=started[c.name].id[:12],
                                **({"replica": c.replica} if c.replica else {})) for c in containers],
            "bring_up_s": round(time.monotonic() - t_start, 2),
            "bring_up_phases_s": phases,
        }
        write_state(state, containers_yml)
        driver = started[containers[-1].name]
        put_files(driver, {f"{DRIVER_ETC}/containers.yml": (yaml.safe_dump(state, sort_keys=False).encode(), 0o644),
                           f"{DRIVER_ETC}/id_ed25519": (key_path.read_bytes(), 0o600)})
        return state
    except BaseException:
        # nothing half-started: remove what this call started, or created and failed to start (kept containers
        # stay; so does everything when it stopped before starting any, e.g. refused another checkout's deployment)
        for addr, ct in _labelled(clients, deployment):
            if ct.name in attempted:
                ct.remove(force=True)
        if created_net:  # only a network this call made (never one an up deployment uses)
            _remove_network(clients[hosts[0].address], cfg.network_name, deployment)
        if prev is None:
            if fresh_key:
                _remove_keys(state_dir)
            if created_swarm:
                clients[hosts[0].address].swarm.leave(force=True)
            if not gwbridge_before:
                _remove_gwbridge(clients[hosts[0].address])
        raise
    finally:
        for c in clients.values():
            c.close()


def apply_netem(cfg: ExpConfig, containers, started: dict, jitter_rtt_ms: float) -> None:
    """Install and run the tc plan in every container that runs engine processes (kept as /etc/edge-txn/tc.sh for
    restarts)."""
    for c in containers:
        if c.role not in ENGINE_ROLES:
            continue
        script = shaping.to_shell(shaping.tc_plan_for(cfg, c.region, jitter_ms=jitter_rtt_ms))
        ct = started[c.name]
        put_files(ct, {f"{DRIVER_ETC}/tc.sh": (script.encode(), 0o755)})
        rc, out = exec_run(ct, ["sh", f"{DRIVER_ETC}/tc.sh"])
        if rc != 0:
            raise SwarmError(f"tc plan failed in {c.name}: {out}")


def _remove_network(manager, name: str, deployment: str, timeout_s: float = 60) -> str | None:
    """Remove the deployment's overlay; None when done (or not there), else why not (Docker's last word)."""
    for net in manager.networks.list(names=[name]):
        if (net.attrs.get("Labels") or {}).get(LABEL) == deployment:
            t0 = time.monotonic()
            try:  # endpoints of just-removed containers linger a while: any error is retried, the last reported
                Retrying(stop=stop_before_delay(timeout_s), wait=wait_fixed(0.5), reraise=True)(net.remove)
            except Exception as e:  # noqa: BLE001 -- reported
                return _short(e)
            # a swarm network leaves the manager at once but this node's list a moment later; both steps share
            # the one timeout
            unlisted = lambda: not any(n.id == net.id for n in manager.networks.list(names=[name]))
            if poll(unlisted, stop_before_delay(timeout_s - (time.monotonic() - t0)), 0.2):
                return None
            return "still listed on this node"
    return None


def has_gwbridge(client) -> bool:
    """Whether docker_gwbridge is there (Docker makes it for a swarm's overlays when there is none)."""
    return bool(client.networks.list(names=["docker_gwbridge"]))


def _remove_gwbridge(client) -> None:
    """docker_gwbridge, when no container uses it any more (Docker created it for this deployment's overlay)."""
    for _ in range(10):  # the swarm's own endpoints (ingress-sbox, gateway_*) leave a moment after the swarm
        nets = client.networks.list(names=["docker_gwbridge"])
        if not nets:
            return
        nets[0].reload()
        users = [v.get("Name", k) for k, v in (nets[0].attrs.get("Containers") or {}).items()]
        if any(not (u.startswith("gateway_") or u == "ingress-sbox") for u in users):
            return  # a container that is not ours uses it: leave it
        try:
            nets[0].remove()
            return
        except Exception:  # noqa: BLE001 -- endpoints still going away; retry
            time.sleep(0.5)


def _remove_keys(state_dir: Path) -> None:
    for f in ("id_ed25519", "id_ed25519.pub"):
        (state_dir / f).unlink(missing_ok=True)
    for d in (state_dir, state_dir.parent):  # .edge-txn/<deployment>, then .edge-txn when it is empty
        try:
            d.rmdir()
        except OSError:
            break


def load_state(path: Path = CONTAINERS_YML) -> dict | None:
    """containers.yml of a running deployment (None when there is none)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SwarmError(f"{path}: not valid YAML ({_short(e)}); remove it and run start_containers.py again")
    if not isinstance(data, dict) or "containers" not in data:
        raise SwarmError(f"{path}: not a containers.yml written by start_containers.py")
    return data


def write_state(state: dict, path: Path) -> None:
    head = "# Written by start_containers.py: the running deployment (read by genConfig.py and the swarm backend).\n"
    Path(path).write_text(head + yaml.safe_dump(state, sort_keys=False))


def down(cfg: ExpConfig, hosts, deployment: str | None = None, state_dir: Path | None = None,
         containers_yml: Path | None = None, log=None, repo: Path = REPO, take_over: bool = False) -> dict:
    """Remove everything of the deployment; returns counts. Works without containers.yml (labels suffice).
    A deployment that belongs to another checkout is refused (SwarmError) unless take_over. Containers are removed
    in parallel, one worker per host; down_s: the seconds it all took."""
    t_start = time.monotonic()
    deployment = deployment or cfg.deployment
    default_dir, default_yml = state_paths(deployment)
    state_dir, containers_yml = state_dir or default_dir, containers_yml or default_yml
    state = load_state(containers_yml) or {}
    hosts = list(hosts)
    clients = connect(hosts, ssh_timeout_s=cfg.ssh_connect_timeout_s, log=log)
    try:
        check_owner(clients, deployment, repo, take_over, log, removing=True)
        done = _per_host(_group(_labelled(clients, deployment)), lambda ct: ct.remove(force=True),
                         stop=threading.Event())
        if (err := _first_error(done)) is not None:
            raise err
        n = len(_outcomes(done))
        manager = clients[hosts[0].address]
        stuck = _remove_network(manager, state.get("network", cfg.network_name), deployment)
        left = False
        if stuck and not state.get("swarm_created"):
            _say(log, f"network: could not remove {state.get('network', cfg.network_name)} ({stuck}); Docker keeps "
                 "it while a swarm task holds it: `docker swarm leave --force` on a swarm nothing else uses, or a "
                 "restart of dockerd, frees it")
        if state.get("swarm_created"):
            try:
                manager.swarm.leave(force=True)
                left = True
            except Exception as e:
                _say(log, f"swarm: could not leave the swarm this deployment created: {_short(e)}")
        if state.get("gwbridge_created") and (left or not state.get("swarm_created")):
            _remove_gwbridge(manager)
        _remove_keys(state_dir)
        Path(containers_yml).unlink(missing_ok=True)
        return {"containers_removed": n, "swarm_left": left, "down_s": round(time.monotonic() - t_start, 2)}
    finally:
        for c in clients.values():
            c.close()


# kill every run's wrappers, life limits and engines at once (so no wrapper writes into a folder being removed),
# then the folders; prints how many engine processes there were. The command line must not contain the text
# the pattern matches ('[/]' does not match itself; the folder is spelled through $d), or pkill kills it too.
ENGINE_SWEEP = ("n=$( (pgrep -x txn-server; pgrep -x txn-client) | wc -l); pkill -9 -f '[/]tmp/edge-run/'; "
                "pkill -9 -x txn-server; pkill -9 -x txn-client; d=/tmp/edge-run; rm -rf \"$d\"/*; echo $n")


def stop_engines(hosts, state: dict) -> dict:
    """Kill every engine process in the deployment's shard (and follower) containers and remove their run folders
    (after a job was cut off, e.g. its driver container stopped). Returns {container: processes stopped} for those
    that had any; containers that do not run are skipped. One worker per host."""
    clients = connect(hosts)
    try:
        by_name = {c["name"]: c for c in state.get("containers", []) if c.get("role") in ENGINE_ROLES}

        def sweep(ct) -> int:  # on its host's worker
            try:
                rc, out = exec_run(ct, ["sh", "-c", ENGINE_SWEEP])
            except Exception:  # noqa: BLE001 -- stopped between list and exec: nothing runs there
                return 0
            return int(out.split()[-1]) if out.split() and out.split()[-1].isdigit() else 0
        done = _per_host(_group((addr, ct) for addr, ct in _labelled(clients, state.get("deployment", ""))
                                if ct.name in by_name and ct.status == "running"), sweep)
        if (err := _first_error(done)) is not None:
            raise err
        return {ct.name: n for ct, n in _outcomes(done) if n}
    finally:
        for c in clients.values():
            c.close()
