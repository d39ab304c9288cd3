"""Build, validate and write deployment files (docs/deploy-schema.md) for the local backend.

Modes, the processes a mode needs besides replicas and clients, its minimum number of regions and its options come
from the engine's protocol registry (testbed/core/protocols.py); nothing here knows a protocol by name.
"""
from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import socket
import time
from pathlib import Path

import yaml

from testbed.core import faults as faultlib, knobs as knoblib, lock as locklib, protocols, rtt as rttlib

REPLICAS = knoblib.default("REPLICAS")

# every knob of a single run and its default (testbed/core/knobs.py); mode None: the registry's default mode (its
# first protocol); protocol_options: {option: value} for the mode's protocol, checked against its schema; unset
# options keep their defaults, and the deployment file gets all of them under protocols.<mode>
DEFAULTS = knoblib.run_defaults()

# the numeric knobs, checked before anything starts; their ranges, units and help are in testbed/core/knobs.py
NUMERIC = tuple(knoblib.run_knobs())


def validate(**knobs) -> dict:
    """Merge knobs over DEFAULTS and check every value; raise ValueError naming the knob and range."""
    unknown = set(knobs) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown knob(s): {', '.join(sorted(unknown))}")
    k = {**DEFAULTS, **{n: v for n, v in knobs.items() if v is not None}}
    for n in NUMERIC:
        k[n] = knoblib.check(n, k[n])
    registry = protocols.load()
    if k["mode"] is None:
        k["mode"] = registry.default_mode()
    proto = registry.get(k["mode"])
    if k["regions"] < proto.min_regions:
        raise ValueError(f"regions={k['regions']}: mode {proto.name} needs regions in "
                         f"[{proto.min_regions}, {knoblib.knob('regions').hi:g}]")
    k["protocol_options"] = protocol_options(proto, k)
    if k["rtt_ms"] is not None:
        k["rtt_ms"] = check_rtt_matrix(k["rtt_ms"], int(k["regions"]))
    for n in ("mechanism", "processes", "transport", "district", "workload", "rate_per"):
        k[n] = knoblib.check(n, k[n])
    if k["rate"] is not None:
        k["rate"] = knoblib.check("OPEN_LOOP_RATE", k["rate"], "rate")
        if k["rate"] * k["duration"] < 1:
            raise ValueError(f"rate={k['rate']:g}: less than one arrival expected in the {k['duration']:g} s run "
                             "(rate x duration < 1)")
    if k["retry_backoff_max"] < k["retry_backoff"]:
        raise ValueError(f"retry_backoff_max={k['retry_backoff_max']:g}: must be >= retry_backoff="
                         f"{k['retry_backoff']:g} (ms)")
    if k["payment_crt_rate"] != -1 and k["payment_crt_rate"] < 0:
        raise ValueError(f"payment_crt_rate={k['payment_crt_rate']}: must be -1 (natural) or in [0, 100]")
    if k["warmup"] + k["cooldown"] >= k["duration"]:
        raise ValueError(f"warmup+cooldown={k['warmup'] + k['cooldown']}: must be < duration={k['duration']}")
    k["faults"] = faultlib.check_syntax(k["faults"])
    if k["faults_seed"] is not None:
        k["faults_seed"] = knoblib.check("seed", k["faults_seed"], "faults_seed")
    if not str(k["name"]).replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"name={k['name']!r}: must be letters, digits, '-' or '_'")
    return k


def protocol_options(proto: protocols.Protocol, k: dict) -> dict:
    """Every option of proto: the protocol_options knob over the schema's defaults."""
    given = k["protocol_options"] if k["protocol_options"] is not None else {}
    if not isinstance(given, dict):
        raise ValueError(f"protocol_options={given!r}: must be a mapping of option names to values")
    return proto.check_options(given)


def client_rate(rate: float, rate_per: str, regions: int, shards: int, clients_per_shard: int) -> float:
    """Each client process's open-loop rate (the deployment's client.rate_tps) for `rate` txn/s offered in total
    (rate_per "total") or in each region ("region"), split evenly over the client processes it covers."""
    return rate / (clients_per_shard * shards * (regions if rate_per == "total" else 1))


def load_of(deploy: dict) -> dict:
    """How a deployment loads its servers, for meta.json: {"mode": "closed", "concurrency": n} or {"mode": "open",
    "offered_tps": total, "offered_tps_per_region", "rate_tps_per_client", "max_outstanding", "concurrency"}."""
    c = deploy.get("client") or {}
    out = {"mode": "closed", "concurrency": c.get("n_concurrent")}
    if float(c.get("rate_tps") or 0) > 0:
        total = float(c["rate_tps"]) * sum(1 for node in deploy.get("nodes", ()) if node.get("kind") == "client")
        out.update(mode="open", offered_tps=round(total, 6),
                   offered_tps_per_region=round(total / int(deploy.get("regions") or 1), 6),
                   rate_tps_per_client=float(c["rate_tps"]), max_outstanding=c.get("max_outstanding"))
    return out


def check_rtt_matrix(m, regions: int) -> list[list[float]]:
    """rtt_ms knob: an R x R matrix of RTTs, each in inter_rtt's range (it replaces intra_rtt/inter_rtt)."""
    ok = isinstance(m, (list, tuple)) and len(m) == regions and all(
        isinstance(row, (list, tuple)) and len(row) == regions for row in m)
    if not ok:
        raise ValueError(f"rtt_ms: must be a {regions} x {regions} matrix (regions={regions})")
    return [[float(knoblib.check("inter_rtt", v, "rtt_ms item")) for v in row] for row in m]


def node_list(regions: int, shards: int, clients_per_shard: int, proto: protocols.Protocol) -> list[dict]:
    """Every process of a deployment (no host/port yet): replicas, the processes of the protocol's roles (e.g. one
    manager per region), clients. Names as in docs/deploy-schema.md."""
    nodes = [dict(name=f"s{r}.{s}.{i}", kind="replica", region=r, shard=s, replica=i)
             for r in range(regions) for s in range(shards) for i in range(REPLICAS)]
    nodes += proto.role_nodes(regions)
    nodes += [dict(name=f"c{r}.{s}.{c}", kind="client", region=r, shard=s)
              for r in range(regions) for s in range(shards) for c in range(clients_per_shard)]
    return nodes


def assign_processes(nodes: list[dict], layout: str = "container", alone=()) -> None:
    """Set every node's engine process as its shard container runs it (docs/efficiency.md). "container":
    `shard<r>.<s>` holds the shard's replicas, its clients and, for s = 0, the region's role nodes; "split": `srv<r>.<s>`
    the servers, `cli<r>.<s>` the clients; "node": every node alone (no `process`). Names count from 0, as the
    deployment file does. The nodes named in `alone` (followers in containers of their own, CONTAINERS='replica')
    run alone in every layout: a process never spans two containers."""
    for n in nodes:
        if layout == "node" or n["name"] in alone:
            n.pop("process", None)
        else:
            n["process"] = _container_process(n, layout)


def _container_process(n: dict, layout: str) -> str:
    """The process name of node n in its shard container under layout "container" or "split"."""
    s = 0 if n["kind"] not in ("replica", "client") else n["shard"]
    prefix = "shard" if layout == "container" else "cli" if n["kind"] == "client" else "srv"
    return f"{prefix}{n['region']}.{s}"


def split_clients(deploy: dict) -> dict:
    """A copy of the deployment whose clients that share a process with servers get processes of their own, one
    per container (`cli<r>.<s>`), as the "split" layout has them."""
    d = copy.deepcopy(deploy)
    shared = {p for p, members in processes(d["nodes"]) if len({m["kind"] == "client" for m in members}) == 2}
    for n in d["nodes"]:
        if n["kind"] == "client" and n.get("process") in shared:
            n["process"] = _container_process(n, "split")
    return d


def processes(nodes: list[dict]) -> list[tuple[str, list[dict]]]:
    """[(process name, its nodes)] in the order of their first nodes; a node without `process` runs alone."""
    out: dict[str, list[dict]] = {}
    for n in nodes:
        out.setdefault(n.get("process") or n["name"], []).append(n)
    return list(out.items())


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


# A port handed out stays reserved for this long to the process it went to (machine-wide, in the lock directory):
# between the pick and its engine's bind, another job on this machine (a second run_local.py, a parallel test worker)
# checking the same ports would find them free too. A reservation of an ended process lapses at once.
PORT_HOLD_S = 120.0


@contextlib.contextmanager
def _port_reservations(host: str):
    """The reservations of host's ports (str(port) -> [pid, time]) under an exclusive flock on
    <lock dir>/ports-<host>.json, written back when the block ends without an error; a torn file holds none. With no
    writable lock directory: an empty dict, kept nowhere (the bind check alone, as before reservations)."""
    try:
        fd = os.open(locklib.lock_dir() / f"ports-{host}.json", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield {}
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            held = json.loads(os.pread(fd, 1 << 22, 0) or b"{}")
        except ValueError:
            held = {}
        yield held
        data = json.dumps(held).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)   # drops the flock


def allocate_ports(n: int, host: str, base: int) -> list[int]:
    """n free ports counting up from base: busy ones are skipped, and so are those another live process of this
    machine was given in the last PORT_HOLD_S seconds (the reservations: <lock dir>/ports-<host>.json)."""
    now, me = time.time(), os.getpid()
    with _port_reservations(host) as held:
        others = {port: (pid, t) for port, (pid, t) in held.items()
                  if pid != me and now - t < PORT_HOLD_S and Path(f"/proc/{pid}").exists()}
        ports, p = [], base
        while len(ports) < n:
            if p > 65535:
                raise ValueError(f"base_port={base}: not enough free ports above it ({n} needed)")
            if str(p) not in others and port_free(host, p):
                ports.append(p)
            p += 1
        held.clear()
        held.update(others)
        held.update({str(q): (me, now) for q in ports})
        return ports


def build_deployment(place=None, **knobs) -> dict:
    """Deployment dict for R regions x N shards x 3 replicas (+ managers, + clients).
    place(nodes) sets every node's host and port, and may return the names of nodes it put in containers of their
    own (each then runs alone, assign_processes); default: all on knobs['host'] with free ports from base_port."""
    k = validate(**knobs)
    R, N, C, host = int(k["regions"]), int(k["shards"]), int(k["clients_per_shard"]), k["host"]
    nodes = node_list(R, N, C, protocols.load().get(k["mode"]))
    alone = None
    if place is None:
        for node, port in zip(nodes, allocate_ports(len(nodes), host, int(k["base_port"]))):
            node.update(host=host, port=port)
    else:
        alone = place(nodes)
    assign_processes(nodes, k["processes"], alone or ())
    rtt = k["rtt_ms"] or rttlib.matrix(R, float(k["intra_rtt"]), float(k["inter_rtt"]))
    d = {
        "name": k["name"], "mode": k["mode"], "regions": R, "shards_per_region": N,
        "replicas": REPLICAS, "seed": int(k["seed"]),
        "link": {"mechanism": k["mechanism"], "rtt_ms": rtt,
                 "jitter_ms": float(k["jitter"])},
        "workload": {"name": k["workload"], "scale": float(k["scale"]), "zipf": float(k["zipf"]),
                     "payment_crt_rate": int(k["payment_crt_rate"]), "district": k["district"],
                     "append_keys": int(k["append_keys"]), "append_crt_ratio": float(k["append_crt_ratio"]),
                     "append_read_tail": int(k["append_read_tail"])},
        "client": {"n_concurrent": int(k["concurrency"]), "duration_s": float(k["duration"]),
                   "warmup_s": float(k["warmup"]), "cooldown_s": float(k["cooldown"]),
                   "drain_timeout_s": float(k["drain_timeout"]),
                   # attempts per transaction before it is given up (the artifact's 20); only protocols that
                   # abort on conflict (TAPIR) retry
                   "retry_limit": int(k["retry_limit"]),
                   # a retry backoff only when set, so that a deployment file without one stays what it was
                   **({"retry_backoff_ms": float(k["retry_backoff"]),
                       "retry_backoff_max_ms": float(k["retry_backoff_max"])} if k["retry_backoff"] > 0 else {}),
                   # open loop (docs/workloads.md): written only when a rate is set, so a closed-loop deployment file
                   # stays what an engine from before open loop reads
                   **({"rate_tps": client_rate(float(k["rate"]), k["rate_per"], R, N, C),
                       "max_outstanding": int(k["max_outstanding"])} if k["rate"] is not None else {})},
        "protocols": {k["mode"]: k["protocol_options"]},
        # the delivery grid only when not the engine's default (250 us), so that the file stays what an engine from
        # before the grid reads
        "runtime": {"transport": k["transport"],
                    **({"delivery_grid_us": int(k["delivery_grid_us"])} if k["delivery_grid_us"] != 250 else {})},
        "nodes": nodes,
    }
    if k["faults"]:
        seed = int(k["seed"] if k["faults_seed"] is None else k["faults_seed"])
        d["faults"] = faultlib.deploy_entries(faultlib.plan(k["faults"], seed, R, nodes, float(k["duration"]),
                                                            transport=k["transport"]))
    return d


def write_yaml(deploy: dict, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(deploy, sort_keys=False, default_flow_style=None, width=120)
    path.write_text(text)
    return path


def load_yaml(path) -> dict:
    """A deployment file, read with libyaml when PyYAML has it (7x faster: run folders are read often)."""
    return yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
