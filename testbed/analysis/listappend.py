"""The anomaly check of the `append` workload (docs/checker.md, "The anomaly check"): Elle's list-append inference.

Every key's final list in the replicas' state dumps is its version order. Every logged transaction says what it
appended (its pieces' `ops`), and a committed one what each of its reads returned (`outputs`: the list's length
when read and its last elements). From them:
  value level  an element no logged transaction appended (garbage), one appended by a transaction that was given
               up (G1a), an element twice in a list (duplicate), a committed append missing from its final list
               (lost-append), a read that does not fit the final list (incompatible-order), a transaction whose
               appends to a key landed out of its op order or whose read missed its own earlier append in the
               piece (internal), a read that ended in another transaction's intermediate element (G1b), a
               committed read without its output (missing-output), a value appended twice to one key by the
               log's transactions (collision: the workload's values are drawn at random, unique in practice);
  dependencies between committed transactions, each labelled with its key: ww (the writer of element i to the
               writer of element i+1), wr (the writer of a read's last element to the reader), rw (the reader to
               the writer of the element after the last it saw);
  cycles       per strongly connected component of that graph, the most specific cycle found, Adya's and Elle's
               way: G0 (ww edges only), else G1c (ww and wr), else G-single (exactly one rw edge), else G2;
               then (strict serializability) with each client session's order (so) and real time (rt, through
               time points: histories.order_edges) added, the components no data cycle explains, classed the
               same way with -process or -realtime (G-single-realtime: one rw edge and real time close it).
Near-linear: one pass over the logs and the lists, one over the edges for the components; the cycle searches are
breadth-first over a component's edges, the extra ones (shorter cycles, G-single) within a budget of edge visits.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

from testbed.analysis import histories
from testbed.analysis.histories import MAX_LISTED, RunData, Skip, Unreadable, _describe, strongly_connected

CYCLE_CLASSES = tuple(f"{c}{s}" for s in ("", "-process", "-realtime") for c in ("G0", "G1c", "G-single", "G2"))
# The classes, in the order their lines are listed (the first line found is the check's reason).
CLASSES = ("G0", "G1a", "G1b", "G1c", "G-single", "G2", "duplicate", "garbage", "lost-append",
           "incompatible-order", "internal", "missing-output", "collision") + CYCLE_CLASSES[4:]
KINDS = ("ww", "wr", "rw")   # also the preference for a pair of transactions joined by several kinds of edge
ORDER = ("so", "rt")         # session and real-time edges (strict serializability)
CYCLE_STARTS = 8             # breadth-first searches per component for a shorter cycle (budget permitting)
BUDGET_PER_COMPONENT = 10_000   # edge visits of the optional searches: at least this per component, ...
BUDGET_PER_EDGE = 10            # ... or this many per edge of the component,
BUDGET_TOTAL = 4_000_000        # and no more than this in all


@dataclass
class Anomalies:
    lines: list = field(default_factory=list)     # violation lines, each starting with its class (then notes)
    counts: dict = field(default_factory=dict)    # class -> how many were found (listed or not)
    edges: dict = field(default_factory=dict)     # kind -> dependency edges inferred


class _Lines:
    """Violation lines per class: the first MAX_LISTED of each, then how many more; every one counted."""

    def __init__(self):
        self.listed, self.counts, self.notes = defaultdict(list), Counter(), []

    def add(self, cls: str, text: str) -> None:
        self.counts[cls] += 1
        if len(self.listed[cls]) < MAX_LISTED:
            self.listed[cls].append(f"{cls}: {text}")

    def result(self) -> list[str]:
        out = []
        for cls in CLASSES:
            out += self.listed.get(cls, [])
            more = self.counts[cls] - len(self.listed.get(cls, []))
            if more > 0:
                out.append(f"{cls}: ... and {more} more")
        return out + self.notes


class _Budget:
    def __init__(self, total: int):
        self.left = total


class _Graph:
    """The dependency edges between committed transactions, per kind: u -> {v: key} (the first key found)."""

    def __init__(self):
        self.edges = {k: defaultdict(dict) for k in KINDS + ORDER}

    def add(self, kind: str, u: int, v: int, key: str) -> None:
        self.edges[kind][u].setdefault(v, key)

    def union(self, kinds: tuple = KINDS) -> dict:
        adj = defaultdict(set)
        for kind in kinds:
            for u, vs in self.edges[kind].items():
                adj[u].update(vs)
        return adj

    def restricted(self, kinds: tuple, members: set) -> dict:
        """u -> {v: (kind, key)} over edges of these kinds between members (earlier kinds win a pair)."""
        out = {}
        for u in members:
            d = {}
            for kind in kinds:
                for v, key in self.edges[kind].get(u, {}).items():
                    if v in members and v not in d:
                        d[v] = (kind, key)
            if d:
                out[u] = d
        return out

    def counts(self) -> dict:
        return {k: sum(len(vs) for vs in self.edges[k].values()) for k in KINDS}


# ---- reading ---------------------------------------------------------------------------------------------

def _final_lists(dumps: list[dict], out: _Lines) -> dict:
    """key -> its final list (the version order), from the first replica (by name) of each shard."""
    by_shard = defaultdict(list)
    for d in dumps:
        by_shard[int(d["shard"])].append(d)
    lists, shard_of, differ = {}, {}, []
    for shard, ds in sorted(by_shard.items()):
        ds.sort(key=lambda d: d["node"])
        ref = ds[0]
        try:
            ls = ref["append"]["lists"]
            ok = isinstance(ls, dict) and all(isinstance(x, list) and all(type(v) is int for v in x)
                                              for x in ls.values())
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise Unreadable(f"{ref['node']}: no append lists (append.lists: key -> list of integers) in its dump")
        if any(d.get("append") != ref["append"] for d in ds[1:]):
            differ.append(f"shard {shard} ({ref['node']}'s)")
        for key, values in ls.items():
            if key in shard_of:
                raise Unreadable(f"key {key} is in the lists of shard {shard_of[key]} and of shard {shard}")
            shard_of[key], lists[key] = shard, values
    if differ:
        out.notes.append("the replicas of " + ", ".join(differ) + " disagree on their lists (the replicas check "
                         "says how): the anomalies are inferred from the first replica's")
    return lists


def _ops(text, where) -> list[tuple]:
    """A piece's ops: [("r", key, None) | ("a", key, value)]; where() names the piece in an error."""
    if not isinstance(text, str):
        raise Unreadable(f"{where()}: no ops (args.ops.s)")
    ops = []
    for item in text.split(";"):
        f = item.split(" ")
        try:
            if len(f) == 2 and f[0] == "r" and f[1]:
                ops.append(("r", f[1], None))
                continue
            if len(f) == 3 and f[0] == "a" and f[1]:
                ops.append(("a", f[1], int(f[2])))
                continue
        except ValueError:
            pass
        raise Unreadable(f"{where()}: malformed op {item!r}")
    return ops


def _output(text, where) -> tuple[int, list[int]]:
    """A read's output "<L>" or "<L>:<v1>,...,<vm>" -> (L, [v1, ..., vm]); where() names the read in an error."""
    try:
        head, _, tail = text.partition(":")
        n, values = int(head), [int(x) for x in tail.split(",")] if tail else []
        if n >= 0:
            return n, values
    except (ValueError, AttributeError):
        pass
    raise Unreadable(f"{where()}: malformed read output {text!r}")


def _transactions(data: RunData, out: _Lines) -> tuple[dict, dict, list, set]:
    """(appends: txn -> {key: [values in op order]}, writer: (key, value) -> txn, reads of committed transactions:
    [(txn, piece, op, key, the txn's last append to key earlier in the piece or None, output or None)],
    collided (key, value) pairs). Pieces in id order, ops in their order."""
    appends, writer, reads, collided = {}, {}, [], set()
    for t in sorted(data.txns.values(), key=lambda x: x.id):
        try:
            e = json.loads(t.line)
            pieces = sorted(e["txn"].get("pieces", []), key=lambda p: int(p.get("id", 0)))
            outputs = e.get("outputs") or {}
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise Unreadable(f"{t.label()}: malformed log entry ({type(err).__name__}: {err})") from err
        mine = {}
        for p in pieces:
            pid = int(p.get("id", 0))
            where = lambda t=t, pid=pid: f"{t.label()} piece {pid}"  # noqa: E731
            args = p.get("args")
            ops = args.get("ops") if isinstance(args, dict) else None
            last = {}
            for i, (op, key, v) in enumerate(_ops(ops.get("s") if isinstance(ops, dict) else None, where)):
                if op == "a":
                    mine.setdefault(key, []).append(v)
                    last[key] = v
                    kv = (key, v)
                    if kv in writer or kv in collided:
                        if kv not in collided:
                            other = writer.pop(kv)
                            collided.add(kv)
                            by = "twice by " + _describe(data, t.id) if other == t.id else \
                                f"by {_describe(data, other)} and by {_describe(data, t.id)}"
                            out.add("collision", f"{v} was appended to {key} {by}: its elements are attributed "
                                                 "to no transaction")
                    else:
                        writer[kv] = t.id
                elif t.committed:
                    o = outputs.get(f"r{pid}_{i}")
                    text = o.get("s") if isinstance(o, dict) else None
                    reads.append((t.id, pid, i, key, last.get(key), text))
        appends[t.id] = mine
    return appends, writer, reads, collided


# ---- the check ---------------------------------------------------------------------------------------------

def analyze(data: RunData, dumps: list[dict], realtime_margin_us: int | None = None, strict: bool = True) -> Anomalies:
    """The anomalies of an append run (its replicas' dumps and logged transactions); Skip for another workload,
    Unreadable when a dump's lists or a log entry's ops or outputs are malformed. Also the cycles that the clients'
    session order closes, and with strict, real time too (when the clients recorded a common clock; margin: its
    uncertainty, histories.realtime_margin)."""
    dumps = [x for x in dumps if x.get("kind") != "manager"]
    workloads = sorted({str(x.get("workload")) for x in dumps})
    if workloads != ["append"]:
        raise Skip(f"the workload is {', '.join(workloads)}, not append")
    out, graph = _Lines(), _Graph()
    lists = _final_lists(dumps, out)
    appends, writer, reads, collided = _transactions(data, out)
    # the committed transactions, and those abandoned at the drain that executed (histories.took_effect: their
    # appends are no G1a, and their order counts as a committed one's)
    committed = histories.took_effect(data)
    d = lambda txn: _describe(data, txn)  # noqa: E731

    # the elements: who appended each, where each value first is
    first, writers = {}, {}
    for key, values in sorted(lists.items()):
        ws, seen = [], defaultdict(list)
        for i, v in enumerate(values):
            kv = (key, v)
            w = writer.get(kv)
            seen[v].append(i)
            ws.append(w)
            if len(seen[v]) > 1:
                continue
            first[kv] = i
            if w is None and kv not in collided:
                out.add("garbage", f"{key}[{i}] = {v}, which no logged transaction appended")
            elif w is not None and w not in committed:
                out.add("G1a", f"{key}[{i}] = {v} was appended by {d(w)}, which was given up")
        for v, at in seen.items():
            if len(at) > 1 and (key, v) not in collided:
                w = writer.get((key, v))
                out.add("duplicate", f"{key} holds {v} {len(at)} times (at {', '.join(map(str, at[:5]))}"
                                     f"{' ...' if len(at) > 5 else ''}), appended once by "
                                     + (d(w) if w is not None else "no logged transaction"))
        writers[key] = ws
        for a, b in zip(ws, ws[1:]):
            if a != b and a in committed and b in committed:
                graph.add("ww", a, b, key)

    # every committed append in its list, in the transaction's op order
    for txn in sorted(committed):
        for key, values in appends.get(txn, {}).items():
            prev = None
            for v in values:
                if (key, v) in collided:
                    continue
                at = first.get((key, v))
                if at is None:
                    out.add("lost-append", f"{d(txn)} committed its append of {v} to {key}, which its final list "
                                           f"({len(lists.get(key, []))} elements) does not hold")
                    continue
                if prev is not None and at < prev[1]:
                    out.add("internal", f"{d(txn)} appended {prev[0]} before {v} to {key}, but {key}[{at}] = {v} "
                                        f"comes before {key}[{prev[1]}] = {prev[0]}")
                prev = (v, at)

    # every read of a committed transaction against its final list
    for txn, pid, i, key, own, text in reads:
        op, values = f"r{pid}_{i}", lists.get(key, [])
        if text is None:
            out.add("missing-output", f"{d(txn)} committed without the output of its read {op} of {key}")
            continue
        n, tail = _output(text, lambda: f"{d(txn)} read {op}")
        if n > len(values):
            out.add("incompatible-order", f"{d(txn)} read {key} ({op}) at length {n}, longer than its final list "
                                          f"({len(values)} elements)")
            continue
        m = len(tail)
        if m > n or values[n - m:n] != tail:
            out.add("incompatible-order", f"{d(txn)} read {key} ({op}) at length {n} ending "
                                          f"[{','.join(map(str, tail))}], where its final list has "
                                          f"[{','.join(map(str, values[max(0, n - m):n]))}]")
            continue
        if own is not None and (key, own) not in collided and first.get((key, own), -1) >= n:
            out.add("internal", f"{d(txn)} read {key} ({op}) at length {n}, without its own append of {own} "
                                f"earlier in piece {pid} ({key}[{first[(key, own)]}])")
        if n > 0:
            w = writers[key][n - 1]
            if w is not None and w != txn and w in committed:
                graph.add("wr", w, txn, key)
                mine = appends[w][key]
                at = mine.index(values[n - 1])
                if at < len(mine) - 1:
                    out.add("G1b", f"{d(txn)} read {key} ({op}) at length {n}, ending in {values[n - 1]} appended "
                                   f"by {d(w)}, which appended {mine[at + 1]} to {key} after it")
        if n < len(values):
            x = writers[key][n]
            if x is not None and x != txn and x in committed:
                graph.add("rw", txn, x, key)

    # the cycles: one per strongly connected component, its most specific class
    budget = _Budget(BUDGET_TOTAL)
    data_comps = sorted(strongly_connected(graph.union()), key=min)
    for comp in data_comps:
        _add_cycle(out, data, graph, comp, budget, ())
    if data.sessions or data.clock:
        # with sessions (and real time, for a strict-serializable protocol): the components that hold no data cycle
        # (those are reported above)
        in_data = {x for c in data_comps for x in c}
        margin = histories.realtime_margin(data, realtime_margin_us)
        for u, vs in histories.order_edges(data, margin, realtime=strict and bool(data.clock)).items():
            for v, (kind, text) in vs.items():
                if (u < 0 or u in committed) and (v < 0 or v in committed):
                    graph.add(kind, u, v, text)
        for comp in sorted(strongly_connected(graph.union(KINDS + ORDER)), key=lambda c: min(x for x in c if x >= 0)):
            if not in_data.intersection(comp):
                _add_cycle(out, data, graph, comp, budget, ORDER)

    return Anomalies(lines=out.result(), counts={c: out.counts[c] for c in CLASSES if out.counts[c]},
                     edges=graph.counts())


def _add_cycle(out: _Lines, data: RunData, graph: _Graph, comp: list, budget: _Budget, extra: tuple) -> None:
    cls, steps, cut = _classify(graph, set(comp), budget, extra)
    line = _render(data, steps)
    real = sum(1 for x in comp if x >= 0)
    length = sum(1 for u, _, _ in steps if u >= 0)
    if real > length:
        line += f" (a cycle of {length} among {real} transactions that form one component)"
    if cut and cls.startswith("G2"):
        line += " (the search for a cycle with a single rw edge was cut short)"
    out.add(cls, line)


def check_anomalies(data: RunData, dumps: list[dict]) -> list[str]:
    """The violation lines of analyze()."""
    return analyze(data, dumps).lines


# ---- cycles ----------------------------------------------------------------------------------------------------

def class_of(steps: list[tuple]) -> str:
    """A cycle's class by its edges' kinds: G0 (ww only), G1c (ww and wr), G-single (one rw), G2 (more), with
    -process / -realtime when a session / real-time edge closes it (histories.cycle_class)."""
    return histories.cycle_class(kind for _, kind, _ in steps)


def _classify(graph: _Graph, members: set, budget: _Budget, extra: tuple = ()) -> tuple[str, list, bool]:
    """(class, cycle steps [(txn, kind, key)], whether the G-single search was cut short) of one component;
    extra: the kinds of order edges every search may use besides the data edges (so, rt)."""
    size = sum(len(graph.edges[k].get(u, {})) for k in KINDS + extra for u in members)
    local = _Budget(min(budget.left, max(BUDGET_PER_COMPONENT, BUDGET_PER_EDGE * size)))
    spent = local.left
    try:
        for kinds in (("ww",), ("ww", "wr")):
            steps = _some_cycle(graph.restricted(kinds + extra, members), local)
            if steps:
                return class_of(steps), steps, False
        steps, cut = _single_rw_cycle(graph, members, local, extra)
        if steps:
            return class_of(steps), steps, cut
        steps = _some_cycle(graph.restricted(KINDS + extra, members), local)
        return class_of(steps), steps, cut
    finally:
        budget.left -= spent - max(local.left, 0)


def _bfs(adj: dict, s: int, within: set, budget: _Budget, goal) -> list[int] | None:
    """Shortest path from s to a node for which goal(node) holds (s itself only through an edge back to it), over
    adj inside within: [s, ..., node]; None when there is none."""
    parent, queue = {s: None}, deque([s])
    while queue:
        u = queue.popleft()
        nexts = adj.get(u, {})
        budget.left -= len(nexts)
        for v in nexts:
            if goal(v):
                path = [u]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path[::-1] + ([] if v == s else [v])
            if v in within and v not in parent:
                parent[v] = u
                queue.append(v)
    return None


def _steps(adj: dict, nodes: list[int]) -> list[tuple]:
    return [(u, *adj[u][v]) for u, v in zip(nodes, nodes[1:] + nodes[:1])]


def _some_cycle(adj: dict, budget: _Budget) -> list[tuple] | None:
    """A short cycle of adj, or None when it has none: in its smallest strongly connected component, the shortest
    cycle through each of its first nodes (the first search always, the others within the budget)."""
    comps = strongly_connected(adj)
    if not comps:
        return None
    comp = min(comps, key=lambda c: (len(c), min(c)))
    within, best = set(comp), None
    for s in sorted(comp, key=lambda x: (x < 0, x))[:CYCLE_STARTS]:   # transactions first, time points after
        if best is not None and (len(best) == 2 or budget.left <= 0):
            break
        nodes = _bfs(adj, s, within, budget, lambda v, s=s: v == s)
        if best is None or len(nodes) < len(best):
            best = nodes
    return _steps(adj, best)


def _single_rw_cycle(graph: _Graph, members: set, budget: _Budget, extra: tuple = ()) -> tuple[list | None, bool]:
    """(a short cycle with exactly one rw edge, or None; whether the budget ran out first): for the rw edges
    u -> v of the component, grouped by v, the shortest path from v back to one of their u over ww and wr edges
    (and the extra kinds)."""
    adj = graph.restricted(("ww", "wr") + extra, members)
    sources = defaultdict(dict)   # v -> {u: key} of the rw edges u -> v
    for u in members:
        for v, key in graph.edges["rw"].get(u, {}).items():
            if v in members:
                sources[v][u] = key
    best = None
    for v in sorted(sources):
        if budget.left <= 0:
            return best, True
        want = sources[v]
        path = _bfs(adj, v, members, budget, lambda x, want=want: x in want)
        if path and (best is None or len(path) < len(best[0])):
            best = (path, want[path[-1]])
            if len(path) == 2:
                break
    if best is None:
        return None, False
    path, key = best
    return [(a, *adj[a][b]) for a, b in zip(path, path[1:])] + [(path[-1], "rw", key)], False


def _render(data: RunData, steps: list[tuple]) -> str:
    """'txn 5 (append, c0.1.0) -wr l3-> txn 9 (append, c1.0.0) -ww l7-> txn 5', from its smallest transaction;
    a path through time points is one -realtime edge (histories.render_cycle)."""
    kinds = {u: (kind, key) for u, kind, key in steps}
    text, _ = histories.render_cycle(data, [u for u, _, _ in steps], lambda u, v: kinds[u])
    return text
