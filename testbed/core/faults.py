"""The nemesis's schedule: a compact grammar, its seeded resolution against a deployment, and its checks
(docs/nemesis.md).

    spec = "partition:r1@5+3; pause:follower@4+2; clock:r2+50ms; spike:r0-r1+100ms@5+3; jitter:r0+5ms@2+4"
    entries = plan(spec, seed, regions=3, nodes=deploy["nodes"], duration=20)   # deploy.yml `faults` entries

Items are separated by `;`. Times are seconds from the start of the clients' load (t = 0): `@START+LENGTH` is the
window [START, START+LENGTH); a clock fault may take `@START` alone (default 0): it lasts to the end of the run.

    partition:REGIONS@S+T        REGIONS cut from the others, healed at S+T (messages held, then delivered)
    spike:LINKS+Yms@S+T          +Y ms one-way on LINKS
    jitter:LINKS+Jms@S+T         + uniform [0, J] ms one-way on LINKS, every channel FIFO (`jitter:r0 5ms@2+4` too)
    clock:NODES(+|-)Xms[(+|-)Dppm][@S[+T]]   NODES' protocol clock offset by X ms, drifting by D ppm, from S on
                                 (default 0) to the end of the run, or for T s (then it steps back to true time)
    pause:NODE@S+T               NODE's engine process stopped (SIGSTOP) at S, continued (SIGCONT) at S+T
    crash:NODE@S                 NODE's engine process killed (SIGKILL) at S, down for the rest of the run: a
                                 follower (not replica 0: its failover comes later) alone in its process
                                 (`processes: node`), at most one replica of a shard
    crash:NODE@S+T               the same, and a new, empty process started for NODE at S+T: it catches up from
                                 whichever live replica of its shard answers first (state transfer) and votes
                                 again by its protocol's rule (docs/fault-tolerance.md)
    restart:NODE@S               the same as +T on the latest earlier crash item of NODE (the same text: a random
                                 NODE names the node that item drew); a node restarted may crash again later

    REGIONS  rK (0-based, as in node names), several with `,`, or random-region
    LINKS    rA-rB (both directions), rA>rB (one), rA-* (every cross-region link of rA, both directions),
             rA (rA's intra-region links), * (every cross-region link), *>rB (every one into rB); rA may be
             random-region; *>NODE (every cross-region link into one server, chosen as NODE is: only messages to it),
             rA>NODE (rA's link into it; rA its own region: its intra-region links into it)
    NODES    a node name (s0.1.2, m0, c1.0.0), a region rK or random-region (its every node: replicas, role
             nodes, clients), or one replica chosen as NODE is
    NODE     a server's name (s0.1.2, m0), or random-replica, follower (a replica other than 0 of a random shard),
             leader (replica 0 of a random shard); any of these three with -rK: in region K (follower-r2)

Random targets are drawn in the order they appear from random.Random(seed): the same spec and seed give the same
plan. Every problem raises ValueError with one line: `faults: item N 'TEXT': what is wrong`.
"""
from __future__ import annotations

import random
import re

KINDS = ("partition", "spike", "jitter", "clock", "pause", "crash")
DRIVER_KINDS = ("pause", "crash")   # applied by the runner; the others by every engine process itself
NOT_YET: dict[str, str] = {}
CONNECT_TIMEOUT_S = 10.0    # the engine's runtime.connect_timeout_s default: a pause must be shorter

_NUM = r"\d+(?:\.\d+)?"
_WINDOW = re.compile(rf"^(?P<body>.*?)@(?P<start>{_NUM})s?(?:\+(?P<len>{_NUM})s?)?$")
_CLOCK = re.compile(rf"^(?P<target>[^+\-\s]+(?:-[^+\-\s]+)*?)(?P<offs>(?:\s*[+\-]\s*{_NUM}\s*(?:ms|ppm))+)$")


class FaultError(ValueError):
    pass


def _fail(i: int, text: str, what: str):
    raise FaultError(f"faults: item {i} '{text}': {what}")


def split_items(spec: str | None) -> list[str]:
    return [x.strip() for x in (spec or "").split(";") if x.strip()]


def check_syntax(spec) -> str | None:
    """The spec if every item parses (no deployment needed), else FaultError; None/'' -> None."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return None
    if not isinstance(spec, str):
        raise FaultError(f"faults={spec!r}: must be a string such as 'partition:r1@5+3; pause:follower@4+2'")
    for i, item in enumerate(split_items(spec), 1):
        _parse(i, item)
    return spec


def _parse(i: int, item: str) -> dict:
    """One item -> {kind, body, start, length, amounts...} without targets resolved."""
    kind, colon, rest = item.partition(":")
    kind = kind.strip()
    if not colon:
        _fail(i, item, f"expected KIND:..., KIND one of {', '.join(KINDS)}")
    if kind in NOT_YET:
        _fail(i, item, NOT_YET[kind])
    if kind not in KINDS and kind != "restart":
        _fail(i, item, f"unknown kind '{kind}' (expected one of {', '.join(KINDS)})")
    rest = rest.strip()
    out = {"kind": kind, "text": item}
    if "@-" in rest.replace(" ", "") or re.search(r"@\s*\d[^;]*\+\s*-", rest):
        _fail(i, item, "times must be >= 0 (seconds from the start of the load)")
    m = _WINDOW.match(rest)
    if kind == "clock":
        if m:
            rest, out["start"] = m.group("body").strip(), float(m.group("start"))
            if m.group("len") is not None:
                out["length"] = float(m.group("len"))
                if out["length"] <= 0:
                    _fail(i, item, "LENGTH must be > 0")
        else:
            out["start"] = 0.0
            if "@" in rest:
                _fail(i, item, "expected @START (seconds) after the clock's offset")
        c = _CLOCK.match(rest)
        if not c:
            _fail(i, item, "expected clock:NODES+Xms, clock:NODES-Xms, +Dppm, or both (e.g. clock:r2+50ms+100ppm@3)")
        out["target"] = c.group("target")
        offset, drift = 0.0, 0.0
        for sign, val, unit in re.findall(rf"([+\-])\s*({_NUM})\s*(ms|ppm)", c.group("offs")):
            v = float(val) * (-1 if sign == "-" else 1)
            if unit == "ms":
                offset += v
            else:
                drift += v
        if offset == 0 and drift == 0:
            _fail(i, item, "a clock fault needs a non-zero offset (ms) or drift (ppm)")
        if abs(offset) > 3_600_000:
            _fail(i, item, f"offset {offset:g} ms: must be in [-3600000, 3600000]")
        if abs(drift) > 100_000:
            _fail(i, item, f"drift {drift:g} ppm: must be in [-100000, 100000]")
        out["offset_ms"], out["drift_ppm"] = offset, drift
        return out
    if kind in ("crash", "restart"):
        if not m or (kind == "restart" and m.group("len") is not None):
            _fail(i, item, "expected crash:NODE@START (down to the end of the run) or crash:NODE@START+LENGTH "
                           "(restarted at START+LENGTH), e.g. crash:follower-r2@10+5" if kind == "crash" else
                           "expected restart:NODE@START (NODE crashed by an earlier item), e.g. restart:s2.0.1@15")
        body = m.group("body").strip()
        if not body or re.search(r"\s", body):
            _fail(i, item, f"expected {kind}:NODE@START")
        out["target"], out["start"] = body, float(m.group("start"))
        if m.group("len") is not None:
            out["length"] = float(m.group("len"))
            if out["length"] <= 0:
                _fail(i, item, "LENGTH must be > 0")
        return out
    if not m or m.group("len") is None:
        _fail(i, item, "expected @START+LENGTH (seconds from the start of the load), e.g. @5+3")
    out["start"], out["length"] = float(m.group("start")), float(m.group("len"))
    if out["length"] <= 0:
        _fail(i, item, "LENGTH must be > 0")
    body = m.group("body").strip()
    if kind in ("spike", "jitter"):
        a = re.match(rf"^(?P<links>\S+?)(?:\s*\+\s*|\s+)(?P<ms>{_NUM})\s*ms$", body)
        if not a:
            _fail(i, item, f"expected {kind}:LINKS+Nms@S+T (e.g. {kind}:r0-r1+100ms@5+3)")
        out["target"], out["ms"] = a.group("links"), float(a.group("ms"))
        if not 0 < out["ms"] <= 60000:
            _fail(i, item, f"{out['ms']:g} ms: must be in (0, 60000]")
        _links_syntax(i, item, out["target"])
    else:
        if not body or re.search(r"\s", body):
            _fail(i, item, f"expected {kind}:TARGET@S+T")
        out["target"] = body
    return out


_REGION = r"(?:r\d+|random-region)"


_NODE_TOKEN = r"[a-z][\w.\-]*"


def _links_syntax(i, item, text):
    if not re.fullmatch(rf"\*|{_REGION}|{_REGION}-\*|{_REGION}[->]{_REGION}|(?:\*|{_REGION})>{_NODE_TOKEN}", text):
        _fail(i, item, f"links '{text}': expected rA-rB, rA>rB, rA-*, rA, *, *>rB, *>NODE or rA>NODE")


class _Topology:
    def __init__(self, regions: int, nodes: list[dict]):
        self.regions, self.nodes = regions, nodes
        self.by_name = {n["name"]: n for n in nodes}

    def region(self, i, item, tok, rng) -> int:
        if tok == "random-region":
            return rng.randrange(self.regions)
        m = re.fullmatch(r"r(\d+)", tok)
        if not m:
            _fail(i, item, f"'{tok}' is not a region (r0..r{self.regions - 1}, random-region)")
        r = int(m.group(1))
        if r >= self.regions:
            _fail(i, item, f"region r{r} is not in this deployment (regions r0..r{self.regions - 1})")
        return r

    def replicas(self):
        return [n for n in self.nodes if n["kind"] == "replica"]


def _links(i, item, text, topo: _Topology, rng) -> tuple[list[list[int]], list[str]]:
    """(the directed region links, the nodes it delays messages to: [] for every node of the links)."""
    R = topo.regions
    m = re.fullmatch(rf"(\*|{_REGION})>({_NODE_TOKEN})", text)
    if m and not re.fullmatch(_REGION, m.group(2)):
        n = _server(i, item, m.group(2), topo, rng)
        to = int(n["region"])
        src = list(range(R)) if m.group(1) == "*" else [topo.region(i, item, m.group(1), rng)]
        return [[a, to] for a in src if m.group(1) != "*" or a != to], [n["name"]]
    return _region_links(i, item, text, topo, rng), []


def _region_links(i, item, text, topo: _Topology, rng) -> list[list[int]]:
    R = topo.regions
    if text == "*":
        return [[a, b] for a in range(R) for b in range(R) if a != b]
    if text.startswith("*>"):
        b = topo.region(i, item, text[2:], rng)
        return [[a, b] for a in range(R) if a != b]
    if text.endswith("-*"):
        a = topo.region(i, item, text[:-2], rng)
        return [[a, b] for b in range(R) if b != a] + [[b, a] for b in range(R) if b != a]
    m = re.fullmatch(rf"({_REGION})([->])({_REGION})", text)
    if m:
        a = topo.region(i, item, m.group(1), rng)
        b = topo.region(i, item, m.group(3), rng)
        if a == b:
            _fail(i, item, f"links '{text}': the same region twice (rA alone is its intra-region links)")
        return [[a, b]] if m.group(2) == ">" else [[a, b], [b, a]]
    a = topo.region(i, item, text, rng)
    return [[a, a]]


def _server(i, item, tok, topo: _Topology, rng) -> dict:
    reps = topo.replicas()
    m = re.fullmatch(r"(replica|random-replica|follower|leader)-r(\d+)", tok)
    if m:   # the same, in one region
        r = int(m.group(2))
        if r >= topo.regions:
            _fail(i, item, f"region r{r} is not in this deployment (regions r0..r{topo.regions - 1})")
        reps, tok = [n for n in reps if int(n["region"]) == r], m.group(1)
    if tok in ("random-replica", "replica"):
        return rng.choice(reps)
    if tok == "follower":
        return rng.choice([n for n in reps if int(n["replica"]) != 0])
    if tok == "leader":
        return rng.choice([n for n in reps if int(n["replica"]) == 0])
    n = topo.by_name.get(tok)
    if n is None:
        _fail(i, item, f"'{tok}' is not a node of this deployment (e.g. s0.0.1, or random-replica, follower, leader)")
    if n["kind"] == "client":
        _fail(i, item, f"'{tok}' is a client: name a server (a replica or a role node)")
    return n


def _process_of(n: dict) -> str:
    return n.get("process") or n["name"]


def plan(spec: str | None, seed: int, regions: int, nodes: list[dict], duration: float,
         connect_timeout_s: float = CONNECT_TIMEOUT_S, transport: str = "tcp") -> list[dict]:
    """The deployment file's `faults` entries (docs/deploy-schema.md) for `spec`, its random targets drawn with
    `seed`; FaultError (one line) for any problem. transport: the deployment's (a restart needs tcp)."""
    rng = random.Random(f"faults:{seed}")
    topo = _Topology(regions, nodes)
    out = []
    for i, item in enumerate(split_items(spec), 1):
        p = _parse(i, item)
        if p["kind"] == "restart":
            _restart(i, item, p, out, duration, transport)
            continue
        e: dict = {"id": f"f{i}", "spec": item, "kind": p["kind"]}
        if p["kind"] == "partition":
            rs = [topo.region(i, item, t.strip(), rng) for t in p["target"].split(",")]
            if len(set(rs)) != len(rs):
                _fail(i, item, "a region listed twice")
            if len(rs) >= regions:
                _fail(i, item, f"a cut needs regions on both sides; this deployment has {regions}")
            e["regions"] = sorted(rs)
        elif p["kind"] in ("spike", "jitter"):
            e["links"], to = _links(i, item, p["target"], topo, rng)
            if not e["links"]:   # '*' (or '*>rB') with one region: no cross-region link to delay
                _fail(i, item, f"links '{p['target']}' name no link of this deployment ({regions} region"
                               f"{'' if regions == 1 else 's'}: no cross-region link)")
            if to:
                e["to_nodes"] = to
            e["extra_ms" if p["kind"] == "spike" else "jitter_ms"] = p["ms"]
        elif p["kind"] == "clock":
            t = p["target"]
            if re.fullmatch(r"(replica|random-replica|follower|leader)(-r\d+)?", t):
                names = [_server(i, item, t, topo, rng)["name"]]
            elif t in topo.by_name:
                names = [t]
            elif re.fullmatch(_REGION, t):
                r = topo.region(i, item, t, rng)
                names = [n["name"] for n in nodes if int(n["region"]) == r]
            else:
                _fail(i, item, f"'{t}' is neither a node nor a region of this deployment")
            e["nodes"] = names
            if p["offset_ms"]:
                e["offset_ms"] = p["offset_ms"]
            if p["drift_ppm"]:
                e["drift_ppm"] = p["drift_ppm"]
        elif p["kind"] == "crash":
            n = _server(i, item, p["target"], topo, rng)
            _crashable(i, item, n, nodes)
            e["node"], e["process"], e["target"] = n["name"], _process_of(n), p["target"]
        else:
            n = _server(i, item, p["target"], topo, rng)
            e["node"] = n["name"]
            e["process"] = _process_of(n)
            e["paused_nodes"] = sorted(m["name"] for m in nodes if _process_of(m) == e["process"])
        e["start_s"] = p["start"]
        if "length" in p:
            e["end_s"] = round(p["start"] + p["length"], 6)
            if e["end_s"] <= p["start"]:   # the deployment file keeps microseconds
                _fail(i, item, f"a window of {p['length']:g} s is shorter than the microsecond the deployment "
                               "file keeps")
        if p["start"] >= duration:
            _fail(i, item, f"starts at {p['start']:g} s, not before the run's end (duration {duration:g} s)")
        if e.get("end_s", 0) > duration:
            _fail(i, item, f"ends at {e['end_s']:g} s, past the run's end (duration {duration:g} s)")
        if p["kind"] == "crash" and "end_s" in e:
            _restartable(i, item, e["end_s"], duration, transport)
        if p["kind"] == "pause" and p["length"] >= connect_timeout_s:
            _fail(i, item, f"a pause of {p['length']:g} s is not shorter than the engine's connect timeout "
                           f"({connect_timeout_s:g} s): its peers would take it for dead")
        _check_overlap(i, item, e, out)
        out.append(e)
    for e in out:
        e.pop("target", None)   # a restart item's key to its crash item, no longer needed
    return out


def _restart(i, item, p: dict, before: list[dict], duration: float, transport: str) -> None:
    """restart:NODE@S: the latest earlier crash item of NODE (by its text, or by the node it names) is restarted at
    S."""
    crashes = [e for e in before if e["kind"] == "crash"][::-1]   # its latest crash
    c = next((e for e in crashes if e["target"] == p["target"]), None) or \
        next((e for e in crashes if e["node"] == p["target"]), None)
    if c is None:
        _fail(i, item, f"a restart without a crash: no earlier item crashes {p['target']}")
    if "end_s" in c:
        _fail(i, item, f"{c['node']} is restarted twice (item {c['id'][1:]} '{c['spec']}')")
    if p["start"] <= c["start_s"]:
        _fail(i, item, f"restarts {c['node']} at {p['start']:g} s, not after its crash at {c['start_s']:g} s")
    _restartable(i, item, p["start"], duration, transport)
    c["end_s"], c["restart_spec"] = p["start"], item


def _restartable(i, item, at: float, duration: float, transport: str) -> None:
    """A restart at `at` is one the run can carry out: before its end, on a transport that takes a peer back."""
    if at >= duration:
        _fail(i, item, f"restarts at {at:g} s, not before the run's end (duration {duration:g} s): the restarted "
                       "process would have no run to catch up with")
    if transport != "tcp":
        _fail(i, item, f"a restart needs transport tcp (the {transport} transport does not take a given-up peer "
                       "back)")


def _crashable(i, item, n: dict, nodes: list[dict]) -> None:
    """A crash kills one follower replica and nothing else (docs/nemesis.md)."""
    if n["kind"] != "replica":
        _fail(i, item, f"'{n['name']}' is not a replica: only a follower replica may crash")
    if int(n["replica"]) == 0:
        _fail(i, item, f"'{n['name']}' is replica 0 of its shard (its leader or coordinator): its failover is not "
                       "implemented; crash a follower")
    others = [m["name"] for m in nodes if _process_of(m) == _process_of(n) and m["name"] != n["name"]]
    if others:
        _fail(i, item, f"'{n['name']}' shares process {_process_of(n)} with {len(others)} other node(s) "
                       f"({', '.join(others[:3])}{' ...' if len(others) > 3 else ''}): a crash needs a process per "
                       "node (processes=node)")


def _overlap(a: dict, b: dict) -> bool:
    inf = float("inf")
    return a["start_s"] < b.get("end_s", inf) and b["start_s"] < a.get("end_s", inf)


def _check_overlap(i, item, e, before):
    for o in before:
        j = int(o["id"][1:])
        if {o["kind"], e["kind"]} <= {"pause", "crash"} and "crash" in (o["kind"], e["kind"]) \
                and o["process"] == e["process"]:
            c, other = (o, e) if o["kind"] == "crash" else (e, o)
            if other["kind"] == "crash":   # again once restarted: a new process, as after any restart
                if "end_s" not in o:
                    _fail(i, item, f"{e['node']} crashed twice: item {j} '{o['spec']}' does not restart it (give "
                                   f"its restart first, e.g. {o['spec']}+5)")
                if e["start_s"] <= o["end_s"]:
                    _fail(i, item, f"{e['node']} crashed again at {e['start_s']:g} s, not after its restart at "
                                   f"{o['end_s']:g} s (item {j} '{o['spec']}')")
                continue
            if _overlap(other, c) or other["start_s"] <= c["start_s"] < other.get("end_s", float("inf")):
                _fail(i, item, f"{c['node']} is paused while it is down (crashed at {c['start_s']:g} s"
                               + (f", restarted at {c['end_s']:g} s" if "end_s" in c else "") + f"; item {j} "
                               f"'{o['spec']}'): pause it before its crash or after its restart")
        if e["kind"] == "crash" and o["kind"] == "crash" and _shard(o) == _shard(e) and o["node"] != e["node"] \
                and _overlap(o, e):
            _fail(i, item, f"{e['node']} and {o['node']} (item {j}) are replicas of one shard down at once: it would "
                           "lose its majority")
        if o["kind"] != e["kind"]:
            continue
        if e["kind"] == "partition" and _overlap(o, e):
            _fail(i, item, f"overlaps item {j} '{o['spec']}' in time (one partition at a time)")
        if e["kind"] in ("spike", "jitter") and _overlap(o, e):
            common = [tuple(x) for x in e["links"] if x in o["links"]]
            if common and (not e.get("to_nodes") or not o.get("to_nodes") or set(e["to_nodes"]) & set(o["to_nodes"])):
                _fail(i, item, f"overlaps item {j} '{o['spec']}' on link r{common[0][0]}>r{common[0][1]} in time")
        if e["kind"] == "clock" and _overlap(o, e):
            common = sorted(set(e["nodes"]) & set(o["nodes"]))
            if common:
                _fail(i, item, f"a second clock fault on {common[0]} (item {j} '{o['spec']}')")
        if e["kind"] == "pause" and o["process"] == e["process"] and _overlap(o, e):
            _fail(i, item, f"overlaps item {j} '{o['spec']}': the same process {e['process']} paused twice")


def _shard(e: dict) -> str:
    """A replica's shard as its name gives it: s<region>.<shard>.<replica> -> s<region>.<shard>."""
    return e["node"].rsplit(".", 1)[0]


ENGINE_KEYS = {"partition": ("regions",), "spike": ("links", "to_nodes", "extra_ms"),
               "jitter": ("links", "to_nodes", "jitter_ms"),
               "clock": ("nodes", "offset_ms", "drift_ppm"), "pause": ("node",), "crash": ("node",)}


def deploy_entries(entries: list[dict]) -> list[dict]:
    """The entries as the engine's deployment file takes them (docs/deploy-schema.md): the plan's extras
    (process, paused_nodes) left out."""
    keep = ("id", "spec", "kind", "start_s", "end_s")
    return [{k: v for k, v in e.items() if k in keep or k in ENGINE_KEYS[e["kind"]]} for e in entries]


_RESTARTED = re.compile(r"\+restart\d*$")


def restarted_process(node: str, k: int) -> str:
    """The name of the process started for `node` at its k-th restart (1, 2, ...): <node>+restart, <node>+restart2,
    ... (its log is logs/<that>.log)."""
    return f"{node}+restart" + (str(k) if k > 1 else "")


def node_of_process(name: str) -> str:
    """A restarted node's process name back to its node (s0.0.1+restart2 -> s0.0.1); any other name as it is."""
    return _RESTARTED.sub("", name)


def restarts(entries: list[dict]) -> list[dict]:
    """The crash entries whose node is restarted (end_s: when)."""
    return [e for e in entries if e["kind"] == "crash" and "end_s" in e]


def describe(e: dict) -> str:
    """One line for logs: `f1 partition r1 cut [5, 8) s`."""
    w = f"[{e['start_s']:g}, {e['end_s']:g}) s" if "end_s" in e else f"from {e['start_s']:g} s"
    k = e["kind"]
    if k == "partition":
        what = "+".join(f"r{r}" for r in e["regions"]) + " cut from the other regions"
    elif k in ("spike", "jitter"):
        amt = e.get("extra_ms", e.get("jitter_ms"))
        what = f"{'+' if k == 'spike' else '~'}{amt:g} ms on " + ", ".join(f"r{a}>r{b}" for a, b in e["links"])
        if e.get("to_nodes"):
            what += " into " + ", ".join(e["to_nodes"])
    elif k == "clock":
        what = (f"clock {e.get('offset_ms', 0):+g} ms {e.get('drift_ppm', 0):+g} ppm on "
                + (", ".join(e["nodes"]) if len(e["nodes"]) <= 4 else f"{len(e['nodes'])} nodes"))
    elif k == "crash":
        what = f"process {e['process']} killed" + (", then restarted empty" if "end_s" in e else "")
    else:
        what = f"process {e['process']} ({', '.join(e['paused_nodes'])}) paused"
    return f"{e['id']} {k}: {what}, {w}"
