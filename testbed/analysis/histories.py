"""What the checker knows about transactions and their execution (docs/checker.md), and the order checks.

Inputs of a run folder: every replica's execution history (servers/<node>.history.txt, named in its state dump),
every client's transaction log (clients/<client>.txns.pb.gz) and raw records (clients/<client>.records.csv,
column `outputs`). Protocol-neutral: only pieces, shards, conflict keys and execution orders.

Checks (each returns violation lines):
  order            (a) every replica of a shard executed the same pieces, conflicting ones in the same order
  atomicity        (b) every committed transaction executed exactly once at every replica of every shard it
                       touches; no given-up attempt and no unknown transaction executed anywhere
  serializability  (c) the union of the per-shard orders over conflicting pieces has no cycle (shortest printed)
  replay           (d) a serial replay (txn-replay) in a topological order reproduces digests and outputs
  realtime         (e) the conflict graph with each client session's order and real time added has no cycle
                       (strict serializability; a transaction answered before another was issued comes first)
  protocol_order   (f) conflicting pieces ran in the order of the keys the protocol declared for them (history
                       lines' `k=<domain>:<hi>.<lo>`), at every replica; and where it declared dependencies
                       (`p=<ids>`), the later of two conflicting pieces depends on the earlier one, and each
                       replica's vote (`v=<ids>`) is among the dependencies its transaction was decided with
"""
from __future__ import annotations

import csv
import heapq
import json
import os
import shutil
import subprocess
from collections import Counter, defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from testbed.core.paths import REPO

HISTORY_MAGIC = "# txn-history v1"
MAX_LISTED = 20  # violations printed per kind; the rest are counted


class Unreadable(Exception):
    """An input is missing, truncated or malformed: nothing can be concluded (exit 2)."""


class Skip(Exception):
    """A check cannot run on this run folder (the reason says why); not a failure."""


@dataclass
class Piece:
    shard: int
    reads: tuple
    writes: tuple


@dataclass
class Txn:
    id: int                       # id of its last attempt
    client: str
    committed: bool
    line: str                     # the raw JSON line (fed to txn-replay)
    pieces: dict                  # piece id -> Piece
    commutative: frozenset
    failed: tuple = ()            # ids of earlier attempts
    type_name: str = "?"
    outputs: str | None = None    # digest from records.csv (committed only)
    stored: dict = field(default_factory=dict)   # committed: shard -> replicas mask its reply named (ClientReply.stored)
    abandoned: bool = False       # still in flight when its client's drain timeout ran out: its outcome is unknown

    def shards(self) -> dict:
        """shard -> sorted piece ids on it."""
        out = defaultdict(list)
        for pid, p in self.pieces.items():
            out[p.shard].append(pid)
        return {s: sorted(ids) for s, ids in out.items()}

    def label(self) -> str:
        return f"txn {self.id} ({self.type_name}, {self.client})"


@dataclass
class RunData:
    txns: dict = field(default_factory=dict)          # txn id -> Txn (last attempts, committed or given up)
    failed_ids: dict = field(default_factory=dict)    # id of an attempt that did not commit -> Txn
    histories: dict = field(default_factory=dict)     # replica node -> [(txn, piece, deferred)]
    replicas: dict = field(default_factory=dict)      # shard -> [replica nodes], ascending
    given_up: list = field(default_factory=list)      # Txn given up (aborted on every attempt)
    abandoned: list = field(default_factory=list)     # Txn abandoned in flight at the drain (outcome unknown)
    times: dict = field(default_factory=dict)         # committed txn id -> (start, end) us, on data.clock
    clocks: dict = field(default_factory=dict)        # client -> its kernel's boot id ("" when it did not say)
    sessions: dict = field(default_factory=dict)      # committed txn id -> (client, session) (records' column)
    clock: str = ""                                   # "monotonic" (one kernel) | "wall" | "" (none recorded)
    order_keys: dict = field(default_factory=dict)    # replica node -> {event index: (domain, hi, lo)}
    deps: dict = field(default_factory=dict)          # replica node -> {txn: frozenset of the txns it declared}
    votes: dict = field(default_factory=dict)         # replica node -> {txn: frozenset of the txns it voted for}
    quorums: dict = field(default_factory=dict)       # replica node -> {txn: frozenset of the replica indexes whose
                                                      # votes its decision counted (`q=`; absent: every replica's)}
    vote_marks: dict = field(default_factory=dict)    # replica node -> {txn: events executed there when it voted}
    accepted: dict = field(default_factory=dict)      # replica node -> {txn: frozenset of the replicas whose
                                                      # acceptance its decision held (`a=`; absent: the fast path)}
    epochs: dict = field(default_factory=dict)        # replica node -> {txn: (its vote's epoch `e=`, its decision's
                                                      # `qe=`)}, 0 where the line says none (docs/checker.md)
    restarted: set = field(default_factory=set)       # replica nodes whose dump is a restarted process's
    _ordered: dict = field(default_factory=dict)      # node -> ordered_events() (computed once)
    _keys: dict | None = None                         # (txn, piece) -> piece_keys() (computed once)
    _commutative: set | None = None                   # (txn, piece) of every commutative piece (computed once)
    _effect: frozenset | None = None                  # took_effect() (computed once)


# ---- reading ---------------------------------------------------------------------------------------------

def _ids(text: str, where: str = "") -> list[int]:
    """Piece ids of a history line: "3", "0-4", "0-2,7"."""
    if text.isdigit():
        return [int(text)]
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        try:
            lo = int(a)
            hi = int(b) if b else lo
        except ValueError:
            raise Unreadable(f"{where}: bad piece ids {text!r}") from None
        out.extend(range(lo, hi + 1))
    return out


def _order_key(text: str, where: str) -> tuple[int, int, int]:
    """A history line's order key "k=<domain>:<hi>.<lo>" -> (domain, hi, lo)."""
    dom, _, val = text[2:].partition(":")
    hi, _, lo = val.partition(".")
    if dom.isdigit() and hi.isdigit() and lo.isdigit():
        return int(dom), int(hi), int(lo)
    raise Unreadable(f"{where}: bad order key {text!r} (k=<domain>:<hi>.<lo>)")


def _vote(text: str, where: str) -> tuple[frozenset, int | None]:
    """A vote "v=<ids>" or "v=<executed>/<ids>" -> (the ids, the events executed when it was cast, or None)."""
    mark, slash, ids = text[2:].partition("/")
    if not slash:
        return _deps(text, where), None
    if not mark.isdigit():
        raise Unreadable(f"{where}: bad vote {text!r} (v=<executed>/<txn id>,...)")
    return _deps("v=" + ids, where), int(mark)


def _epoch(text: str, where: str) -> int:
    """A decision's epoch "qe=<n>" -> n."""
    n = text.partition("=")[2]
    if not n.isdigit():
        raise Unreadable(f"{where}: bad epoch {text!r} (qe=<n>)")
    return int(n)


def _vote_epochs(text: str, where: str) -> frozenset:
    """The epochs a vote was cast in, "e=<n>,<n>,..." (ascending: a vote cast again, the same, in a later epoch names
    both) -> {n}."""
    ns = text.partition("=")[2].split(",")
    if not all(n.isdigit() for n in ns) or [int(n) for n in ns] != sorted({int(n) for n in ns}):
        raise Unreadable(f"{where}: bad epochs {text!r} (e=<n>,<n>,... ascending)")
    return frozenset(int(n) for n in ns)


def _deps(text: str, where: str) -> frozenset:
    """A history line's declared dependencies "p=<id>,<id>" (or "p=": none), or its vote "v=...", -> the ids."""
    ids = text[2:].split(",") if len(text) > 2 else []
    if all(x.isdigit() for x in ids):
        return frozenset(int(x) for x in ids)
    what = "dependency list" if text[0] == "p" else "vote"
    raise Unreadable(f"{where}: bad {what} {text!r} ({text[0]}=<txn id>,<txn id>,...)")


def read_history(path: Path, events: int | None = None, keys: dict | None = None,
                 deps: dict | None = None, votes: dict | None = None,
                 quorums: dict | None = None, accepted: dict | None = None,
                 vote_marks: dict | None = None, epochs: dict | None = None) -> list[tuple[int, int, bool]]:
    """[(txn, piece, deferred)] in execution order; Unreadable when missing, malformed or truncated. keys: filled
    with event index -> (domain, hi, lo) for the events whose line carries the protocol's order key; deps: with
    txn -> the transactions the protocol declared it depends on (a line's `p=`); votes: with txn -> those this
    replica voted for (`v=`); quorums: with txn -> the replicas whose votes its decision counted (`q=`); accepted:
    with txn -> those whose acceptance it held (`a=`); vote_marks: with txn -> how many events had executed here when
    it voted (`v=<n>/<ids>`); epochs: with txn -> (the epochs its vote was cast in, `e=`, {0} when not said; the
    epoch of its decision's votes, `qe=`, 0 when not said), for a transaction whose line says either."""
    name = path.name
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise Unreadable(f"{name}: {e.strerror or e}") from e
    if not lines or not lines[0].startswith(HISTORY_MAGIC):
        raise Unreadable(f"{name}: not a txn history (no '{HISTORY_MAGIC}' header)")
    if not lines[-1].startswith("# end "):
        raise Unreadable(f"{name}: truncated (no '# end' line)")
    trailer = dict(x.split("=", 1) for x in lines[-1][6:].split() if "=" in x)
    out = []
    for n, line in enumerate(lines[1:-1], start=2):
        f = line.split()
        dep = _deps(f.pop(), f"{name}:{n}") if len(f) > 2 and f[-1].startswith("p=") else None
        vote_epoch = _vote_epochs(f.pop(), f"{name}:{n}") if len(f) > 2 and f[-1].startswith("e=") else None
        vote, mark = _vote(f.pop(), f"{name}:{n}") if len(f) > 2 and f[-1].startswith("v=") else (None, None)
        if vote_epoch is not None and vote is None:
            raise Unreadable(f"{name}:{n}: 'e=' without 'v=' in {line!r}")
        quorum_epoch = _epoch(f.pop(), f"{name}:{n}") if len(f) > 2 and f[-1].startswith("qe=") else None
        acc = _deps(f.pop(), f"{name}:{n}") if len(f) > 2 and f[-1].startswith("a=") else None
        quorum = _deps(f.pop(), f"{name}:{n}") if len(f) > 2 and f[-1].startswith("q=") else None
        if quorum_epoch is not None and quorum is None:
            raise Unreadable(f"{name}:{n}: 'qe=' without 'q=' in {line!r}")
        if acc is not None and quorum is None:
            raise Unreadable(f"{name}:{n}: 'a=' without 'q=' in {line!r}")
        key = _order_key(f.pop(), f"{name}:{n}") if len(f) > 2 and f[-1].startswith("k=") else None
        declaration = len(f) == 2 and f[1] == "=" and f[0].isdigit()   # "<txn> = <declarations>": no events
        if declaration and (key is not None or not any(x is not None for x in (dep, vote, quorum))):
            raise Unreadable(f"{name}:{n}: a declaration line '<txn> =' holds q=, v= or p= (and no k=), got {line!r}")
        if not declaration and (len(f) not in (2, 3) or (len(f) == 3 and f[2] != "d") or not f[0].isdigit()):
            raise Unreadable(f"{name}:{n}: expected '<txn> <pieces> [d] [k=<domain>:<hi>.<lo>] [q=<replicas> "
                             f"[a=<replicas>] [qe=<epoch>]] [v=<ids> [e=<epochs>]] [p=<ids>]' or '<txn> = ' and "
                             f"declarations, got {line!r}")
        t, deferred = int(f[0]), len(f) == 3
        if epochs is not None and (vote_epoch is not None or quorum_epoch is not None):
            was = epochs.get(t, (frozenset({0}), 0))
            epochs[t] = (vote_epoch if vote_epoch is not None else was[0],
                         quorum_epoch if quorum_epoch is not None else was[1])
        if dep is not None and deps is not None:
            deps[t] = deps.get(t, frozenset()) | dep
        if vote is not None and votes is not None:
            votes[t] = votes.get(t, frozenset()) | vote
        if mark is not None and vote_marks is not None:
            vote_marks.setdefault(t, mark)
        if quorum is not None and quorums is not None:
            quorums[t] = quorums.get(t, frozenset()) | quorum
        if acc is not None and accepted is not None:
            accepted[t] = accepted.get(t, frozenset()) | acc
        if declaration:
            continue
        ids = _ids(f[1], f"{name}:{n}")
        if key is not None and keys is not None:
            keys.update((i, key) for i in range(len(out), len(out) + len(ids)))
        out.extend([(t, p, deferred) for p in ids])
    # what was declared of a transaction that never executed here (a declaration line's) is not this history's
    executed = {t for t, _, _ in out}
    for d in (deps, votes, vote_marks, quorums, accepted, epochs):
        if d:
            for t in [t for t in d if t not in executed]:
                del d[t]
    want = {int(trailer.get("events", -1)), events if events is not None else len(out)}
    if want != {len(out)} or int(trailer.get("lines", -1)) != len(lines) - 2:
        raise Unreadable(f"{name}: {len(out)} events in {len(lines) - 2} lines, but the history says "
                         f"events={trailer.get('events')} lines={trailer.get('lines')}"
                         + (f" and the state dump {events}" if events is not None else ""))
    return out


def _parse_entry(line: str, client: str, where: str) -> Txn:
    try:
        e = json.loads(line)
        t = e["txn"]
        pieces = {}
        for p in t.get("pieces", []):
            pieces[int(p.get("id", 0))] = Piece(int(p.get("shard", 0)), tuple(p.get("read_keys", ())),
                                                tuple(p.get("write_keys", ())))
        return Txn(id=int(t["txn_id"]), client=client, committed=bool(e.get("committed", False)),
                   abandoned=bool(e.get("abandoned", False)), line=line,
                   pieces=pieces, commutative=frozenset(int(x) for x in e.get("commutative", ())),
                   failed=tuple(int(x) for x in e.get("failed_attempts", ())),
                   stored={int(c.get("shard", 0)): int(c.get("replicas", 0)) for c in e.get("stored", ())})
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise Unreadable(f"{where}: malformed transaction entry ({type(err).__name__}: {err})") from err


def dump_txn_log(path: Path, binary=None) -> subprocess.CompletedProcess:
    """`txn-replay --dump` of a client's transaction log (binary, src/core/txn_log.h): JSON lines on stdout; binary:
    that txn-replay (the run's build), else replay_binary()'s."""
    return subprocess.run([str(binary or require_replay_binary()), "--dump", str(path)], capture_output=True,
                          text=True)


def read_txn_log(path: Path, client: str, dumped: subprocess.CompletedProcess | None = None) -> list[Txn]:
    """A client's transaction log as its transactions; dumped: its dump_txn_log, if already made."""
    p = dumped if dumped is not None else dump_txn_log(path)
    if p.returncode != 0:
        raise Unreadable((p.stderr.strip().splitlines() or [f"txn-replay --dump exited with {p.returncode}"])[-1]
                         .removeprefix("txn-replay: error: "))
    return [_parse_entry(line, client, f"{path.name}: entry {n}")
            for n, line in enumerate(p.stdout.splitlines(), start=1) if line]


def read_record_outputs(path: Path, attempts: bool = False, times: dict | None = None,
                        sessions: dict | None = None) -> dict[int, tuple]:
    """txn id -> (status, type_name, outputs) from a client's records.csv (+ attempts with attempts=True). times:
    filled with txn id -> (issue, answer) of each committed transaction, relative to its client's run start;
    sessions: with txn id -> its session (the records' `session` column, 0 in records from before it).
    The issue is the first attempt's send, `sent_us` (start_us in records from before it). Under an open load
    start_us is the arrival, earlier by the wait for a coordinator: it measures latency, but as the issue it would
    widen the interval and drop real-time edges (never add a false one), so the send keeps the check whole. The
    answer is start_us + latency_us either way. A session's order is the same by either time: a coordinator takes
    waiting arrivals oldest first and sends each after the last one's answer."""
    out = {}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                rec = (row["status"], row.get("type_name", "?"), row.get("outputs") or "")
                txn = int(row["txn_id"])
                out[txn] = rec + (int(row["attempts"]),) if attempts else rec
                if times is not None and row["status"] == "committed":
                    start = int(row["start_us"])
                    times[txn] = (int(row.get("sent_us") or start), start + int(row["latency_us"]))
                    if sessions is not None:
                        sessions[txn] = int(row.get("session") or 0)
    except (OSError, KeyError, ValueError) as e:
        raise Unreadable(f"{path.name}: {e}") from e
    return out


def load_run(run_dir, replica_dumps: list[dict], binary=None) -> RunData:
    """Histories of the replicas whose dumps name one, and every client's transactions (their logs decoded by
    `binary`, a txn-replay, else replay_binary()'s). Skip when the run recorded neither (a run from before histories
    existed); Unreadable when part of them is missing."""
    run_dir = Path(run_dir)
    servers = run_dir / "servers" if (run_dir / "servers").is_dir() else run_dir
    clients = run_dir / "clients"
    data = RunData()
    named = [d for d in replica_dumps if "execution_history" in d]
    summaries = sorted(clients.glob("*.summary.json")) if clients.is_dir() else []
    logs = sorted(clients.glob("*.txns.pb.gz")) if clients.is_dir() else []
    if not named and not logs:
        raise Skip("the run recorded no execution histories or transaction logs")
    if len(named) != len(replica_dumps):
        raise Unreadable("state dump(s) without an execution history: "
                         + ", ".join(sorted(d["node"] for d in replica_dumps if d not in named)))
    # the logs are decoded by txn-replay processes, all at once (the checker's largest wait)
    with ThreadPoolExecutor(max_workers=max(1, min(len(logs), os.cpu_count() or 1))) as pool:
        dumps = dict(zip(logs, pool.map(lambda log: dump_txn_log(log, binary), logs)))
    for d in sorted(named, key=lambda d: d["node"]):
        h = d["execution_history"]
        node = d["node"]
        data.order_keys[node], data.deps[node], data.votes[node] = {}, {}, {}
        data.quorums[node], data.accepted[node], data.vote_marks[node] = {}, {}, {}
        data.epochs[node] = {}
        if (d.get("counters") or {}).get("restarted"):
            data.restarted.add(node)
        data.histories[node] = read_history(servers / h["file"], int(h["events"]), data.order_keys[node],
                                            data.deps[node], data.votes[node], data.quorums[node],
                                            data.accepted[node], data.vote_marks[node], data.epochs[node])
        data.replicas.setdefault(int(d["shard"]), []).append(d["node"])
    starts, rel_times = {}, {}   # client -> (run start on CLOCK_MONOTONIC, on the wall clock); its records' times
    for s in summaries:
        client = s.name.removesuffix(".summary.json")
        try:
            summ = json.loads(s.read_text())
        except (OSError, ValueError) as e:
            raise Unreadable(f"{s.name}: {e}") from e
        log = clients / f"{client}.txns.pb.gz"
        if "n_txns" not in summ:
            raise Unreadable(f"{s.name}: no n_txns (a client without a transaction log)")
        txns = read_txn_log(log, client, dumps.get(log))
        if len(txns) != summ["n_txns"]:
            raise Unreadable(f"{log.name}: {len(txns)} transactions, but {s.name} says {summ['n_txns']} (truncated?)")
        t0 = summ.get("run_start_mono_us")
        data.clocks[client] = str(summ.get("boot_id") or "") if isinstance(t0, int) else ""
        starts[client] = (t0, summ.get("run_start_wall_us"))
        times, sessions = {}, {}
        recs = read_record_outputs(clients / f"{client}.records.csv", times=times, sessions=sessions)
        rel_times[client] = times
        data.sessions.update((t, (client, s)) for t, s in sessions.items())
        if len(recs) != len(txns):
            raise Unreadable(f"{client}.records.csv: {len(recs)} records for {len(txns)} logged transactions")
        for t in txns:
            status, t.type_name, out = recs.get(t.id, (None, "?", ""))
            logged = status_of(t)
            if t.committed and t.abandoned or status != logged:
                raise Unreadable(f"{client}: txn {t.id} is {'committed and abandoned' if t.committed else logged} "
                                 f"in its log but {status or 'absent'} in its records")
            t.outputs = out if t.committed else None
            if t.id in data.txns:
                raise Unreadable(f"txn id {t.id} logged twice ({data.txns[t.id].client}, {client})")
            data.txns[t.id] = t
            for f in t.failed:
                data.failed_ids[f] = t
            if t.abandoned:
                data.abandoned.append(t)
            elif not t.committed:
                data.given_up.append(t)
    if not summaries or len(summaries) != len(logs):
        raise Unreadable(f"{len(logs)} transaction log(s) for {len(summaries)} client summaries")
    _common_clock(data, starts, rel_times)
    return data


def _common_clock(data: RunData, starts: dict, rel_times: dict) -> None:
    """Puts every committed transaction's (start, end) on one clock: CLOCK_MONOTONIC when every client ran under
    one kernel (every process reads the same one), else the wall clock when every client recorded it (hosts'
    clocks agree only to their synchronisation's error: the real-time check's margin covers it), else none."""
    kernels = set(data.clocks.values())
    if data.clocks and "" not in kernels and len(kernels) == 1:
        data.clock, pick = "monotonic", 0
    elif starts and all(isinstance(w, int) for _, w in starts.values()):
        data.clock, pick = "wall", 1
    else:
        data.clock = ""
        return
    for client, times in rel_times.items():
        t0 = starts[client][pick]
        data.times.update((t, (t0 + a, t0 + b)) for t, (a, b) in times.items())


# ---- helpers -----------------------------------------------------------------------------------------------

class _Collector:
    """Violation lines of one check: the first MAX_LISTED, then how many more."""
    def __init__(self):
        self.lines, self.more = [], 0

    def add(self, line: str) -> None:
        if len(self.lines) < MAX_LISTED:
            self.lines.append(line)
        else:
            self.more += 1

    def result(self) -> list[str]:
        return self.lines + ([f"... and {self.more} more"] if self.more else [])


def _commutes(data: RunData, txn: int, piece: int) -> bool:
    t = data.txns.get(txn)
    return t is not None and piece in t.commutative


def ordered_events(data: RunData, node: str) -> list[tuple[int, int]]:
    """A replica's executions in order, without the commutative pieces (whose place does not matter)."""
    if data._commutative is None:
        data._commutative = {(t.id, p) for t in data.txns.values() for p in t.commutative}
    if node not in data._ordered:
        data._ordered[node] = [(t, p) for t, p, _ in data.histories[node] if (t, p) not in data._commutative]
    return data._ordered[node]


def piece_keys(data: RunData) -> dict:
    """(txn, piece) -> (keys the piece writes, keys it only reads), each once, for every logged piece."""
    if data._keys is None:
        data._keys = {}
        for t in data.txns.values():
            for p, piece in t.pieces.items():
                writes = tuple(dict.fromkeys(piece.writes))
                data._keys[(t.id, p)] = (writes, tuple(k for k in dict.fromkeys(piece.reads) if k not in writes))
    return data._keys


def status_of(t: Txn) -> str:
    """Its records.csv status: committed, given_up (aborted on every attempt) or abandoned (in flight when the
    drain timeout ran out)."""
    return "committed" if t.committed else "abandoned" if t.abandoned else "given_up"


def took_effect(data: RunData) -> frozenset:
    """The transactions whose effects the replicas may hold: the committed ones, and those abandoned in flight at
    the drain that some replica executed. An abandoned transaction's outcome is unknown to its client (as an
    indeterminate operation is to Jepsen's checkers): it may have committed, whole, or not at all; atomicity holds
    one that executed anywhere to executing whole at every replica, as a committed one."""
    if data._effect is None:
        ran = set()
        for events in data.histories.values():
            ran.update(t for t, _, _ in events)
        data._effect = frozenset(t.id for t in data.txns.values()
                                 if t.committed or (t.abandoned and t.id in ran))
    return data._effect


def _describe(data: RunData, txn: int) -> str:
    t = data.txns.get(txn)
    if t is not None:
        return t.label()
    if txn in data.failed_ids:
        return f"txn {txn} (a failed attempt of {data.failed_ids[txn].label()})"
    return f"txn {txn} (in no client's log)"


# ---- (a) the same order of conflicting pieces at every replica of a shard -------------------------------------

def key_accesses(data: RunData, node: str) -> tuple[dict, list]:
    """A replica's order as far as it matters: per conflict key, its accesses in execution order, each write
    (a piece that writes the key, whether or not it also reads it) one group and each run of reads between two
    writes one set (reads of a key commute with each other); and, apart, the pieces of transactions no client
    logged (their keys are unknown, so their order among themselves is compared as it is)."""
    per_key, unknown, keys_of = defaultdict(list), [], piece_keys(data)
    for ev in ordered_events(data, node):
        keys = keys_of.get(ev)
        if keys is None:
            unknown.append(ev)
            continue
        for k in keys[0]:
            per_key[k].append(("w", ev))
        for k in keys[1]:
            groups = per_key[k]
            if groups and groups[-1][0] == "r":
                groups[-1][1].add(ev)
            else:
                groups.append(("r", {ev}))
    return per_key, unknown


def _access(data: RunData, groups: list, i: int) -> str:
    if i >= len(groups):
        return "the end of its accesses"
    kind, what = groups[i]
    if kind == "w":
        return f"{_describe(data, what[0])} piece {what[1]}"
    reads = sorted(what)
    return "reads by " + ", ".join(f"{_describe(data, t)} piece {p}" for t, p in reads[:2]) + \
        (f" and {len(reads) - 2} more" if len(reads) > 2 else "")


def check_order(data: RunData) -> list[str]:
    """(a): the replicas of a shard executed the same pieces, and every two conflicting pieces in the same order.
    Pieces that do not conflict commute, so their interleaving may differ (a protocol like Janus executes
    independent transactions as their dependencies allow); commutative pieces are compared as a multiset."""
    out = _Collector()
    for shard, nodes in sorted(data.replicas.items()):
        ref = nodes[0]
        ref_events = Counter(ordered_events(data, ref))
        ref_keys, ref_unknown = key_accesses(data, ref)
        ref_comm = Counter((t, p) for t, p, _ in data.histories[ref] if _commutes(data, t, p))
        for node in nodes[1:]:
            events = Counter(ordered_events(data, node))
            if events != ref_events:
                diff = (events - ref_events) + (ref_events - events)
                (t, p), _ = min(diff.items())
                out.add(f"shard {shard}: {node} and {ref} executed different pieces ({len(diff)} differ, e.g. "
                        f"{_describe(data, t)} piece {p})")
            elif ordered_events(data, node) != ordered_events(data, ref):  # one sequence has the same accesses
                keys, unknown = key_accesses(data, node)
                differ = sorted(k for k in set(keys) | set(ref_keys) if keys.get(k, []) != ref_keys.get(k, []))
                if differ:
                    k = differ[0]
                    a, b = keys.get(k, []), ref_keys.get(k, [])
                    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                    more = f" ({len(differ)} keys differ)" if len(differ) > 1 else ""
                    out.add(f"shard {shard}: {node} executed conflicting pieces in another order than {ref} on key "
                            f"{k}{more}: its access {i + 1} is {_access(data, a, i)} where {ref} has "
                            f"{_access(data, b, i)}")
                if unknown != ref_unknown:
                    out.add(f"shard {shard}: {node} executed pieces of transactions in no client's log in another "
                            f"order than {ref}")
            comm = Counter((t, p) for t, p, _ in data.histories[node] if _commutes(data, t, p))
            if comm != ref_comm:
                diff = (comm - ref_comm) + (ref_comm - comm)
                (t, p), _ = min(diff.items())
                out.add(f"shard {shard}: {node} and {ref} executed different commutative pieces "
                        f"({len(diff)} differ, e.g. {_describe(data, t)} piece {p})")
    return out.result()


# ---- (b) atomicity ---------------------------------------------------------------------------------------------

def check_atomicity(data: RunData) -> list[str]:
    out = _Collector()
    shard_of = {n: s for s, nodes in data.replicas.items() for n in nodes}
    executed = {}
    for node, events in data.histories.items():
        per = defaultdict(list)
        for t, p, _ in events:
            per[t].append(p)
        executed[node] = per
    effect = took_effect(data)
    for t in sorted(data.txns.values(), key=lambda x: x.id):
        if t.id not in effect:
            continue
        for shard, want in sorted(t.shards().items()):
            if shard not in data.replicas:
                out.add(f"{t.label()} touches shard {shard}, which has no replica dump")
                continue
            for node in data.replicas[shard]:
                got = sorted(executed[node].get(t.id, []))
                if got == want:
                    continue
                missing = sorted(set(want) - set(got))
                twice = sorted(p for p, n in Counter(got).items() if n > 1)
                extra = sorted(set(got) - set(want))
                what = "; ".join(x for x in (
                    f"pieces {missing} never executed" if missing else "",
                    f"pieces {twice} executed more than once" if twice else "",
                    f"unknown pieces {extra}" if extra else "") if x)
                how = " (abandoned at the drain, executed elsewhere)" if not t.committed else ""
                out.add(f"{t.label()}{how} at {node} (shard {shard}): {what}")
    for node, per in sorted(executed.items()):
        shard = shard_of[node]
        for txn in per:
            t = data.txns.get(txn)
            if t is not None and txn in effect:
                if shard not in {p.shard for p in t.pieces.values()}:
                    out.add(f"{t.label()} executed at {node}, but it has no piece on shard {shard}")
            elif t is not None:
                out.add(f"{t.label()} was given up but executed at {node}")
            elif txn in data.failed_ids:
                out.add(f"{_describe(data, txn)} did not commit but executed at {node}")
            else:
                out.add(f"{_describe(data, txn)} executed at {node}")
    return out.result()


# ---- (c) serializability: the conflict graph ---------------------------------------------------------------------

def conflict_graph(data: RunData) -> tuple[dict, list[str]]:
    """({u: {v: (shard, key)}}, violations): an edge u -> v where u's piece executed before a conflicting piece
    of v at some replica (read/write keys; pieces that commute with everything take part in no conflict). Every
    distinct order of a shard contributes, so two replicas that disagree make a cycle."""
    out = _Collector()
    adj = defaultdict(dict)
    for shard, nodes in sorted(data.replicas.items()):
        seen = set()
        for node in nodes:
            for t, p, deferred in data.histories[node]:
                if deferred and not _commutes(data, t, p):
                    out.add(f"{node} deferred {_describe(data, t)} piece {p}, which does not commute")
            seq = tuple(ordered_events(data, node))
            if seq in seen:
                continue
            seen.add(seq)
            last_writer, readers = {}, defaultdict(list)
            for t, p in seq:
                txn = data.txns.get(t)
                piece = txn.pieces.get(p) if txn is not None else None
                if piece is None:
                    continue
                for k in piece.reads:
                    w = last_writer.get(k)
                    if w is not None and w != t and t not in adj[w]:
                        adj[w][t] = (shard, k)
                    readers[k].append(t)
                for k in piece.writes:
                    w = last_writer.get(k)
                    if w is not None and w != t and t not in adj[w]:
                        adj[w][t] = (shard, k)
                    for r in readers.pop(k, ()):
                        if r != t and t not in adj[r]:
                            adj[r][t] = (shard, k)
                    last_writer[k] = t
    return adj, out.result()


def strongly_connected(adj: dict) -> list[list[int]]:
    """Components with more than one node (Tarjan, iterative)."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], 0
    for root in list(adj):
        if root in index:
            continue
        work = [(root, iter(adj.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(adj.get(w, ()))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(comp)
    return comps


def shortest_cycle(adj: dict, comp: list[int], starts=None, budget: float = float("inf")) -> list[int]:
    """The shortest cycle inside one strongly connected component (BFS from each node, or from `starts`, cut at the
    best length; once `budget` edge visits are spent, the best found so far: the first search always completes)."""
    members, best = set(comp), None
    for s in sorted(comp) if starts is None else starts:
        if best is not None and budget <= 0:
            break
        limit = len(best) if best else len(comp) + 1
        parent, frontier, depth, found = {s: None}, [s], 0, None
        while frontier and depth + 1 < limit and found is None:
            depth += 1
            nxt = []
            for u in frontier:
                succ = adj.get(u, ())
                budget -= len(succ)
                for v in succ:
                    if v == s:
                        found = u
                        break
                    if v in members and v not in parent:
                        parent[v] = u
                        nxt.append(v)
                if found is not None:
                    break
            frontier = nxt
        if found is not None:
            path, x = [], found
            while x is not None:
                path.append(x)
                x = parent[x]
            best = path[::-1]  # s ... found, and found -> s closes it
            if len(best) == 2:
                break
    return best


def describe_cycle(data: RunData, adj: dict, cycle: list[int]) -> str:
    parts = []
    for i, u in enumerate(cycle):
        v = cycle[(i + 1) % len(cycle)]
        shard, key = adj[u][v]
        parts.append(f"{_describe(data, u)} -> [shard {shard}, {key}] ->")
    return " ".join(parts) + f" {_describe(data, cycle[0])}"


def check_serializability(data: RunData, adj: dict, pre: list[str],
                          counts: Counter | None = None) -> tuple[list[str], list]:
    """(violations, components with a cycle); the shortest cycle's class is counted into counts."""
    comps = strongly_connected(adj)
    v = list(pre)
    if comps:
        best = min((shortest_cycle(adj, c) for c in comps), key=len)
        kinds = [edge_kind(data, u, best[(i + 1) % len(best)], *adj[u][best[(i + 1) % len(best)]])
                 for i, u in enumerate(best)]
        cls = cycle_class(kinds)
        if counts is not None:
            counts[cls] += 1
        v.insert(0, f"the conflict graph has {len(comps)} cycle component(s) over "
                    f"{sum(len(c) for c in comps)} transactions; shortest cycle ({len(best)} transactions): "
                    f"{cls}: " + describe_cycle(data, adj, best))
    return v, comps


# ---- (e) strict serializability: sessions and real time --------------------------------------------------------

# How much later than another's answer a transaction must be issued to count as after it. On one kernel 0: every
# client reads the same CLOCK_MONOTONIC, in us, taking its answer's time after the answer arrived and its next
# issue's time before sending, so an answer stamped earlier than an issue really came first. Across kernels the
# clients' wall clocks are compared, which agree only as well as the hosts' clocks are synchronised.
REALTIME_MARGIN_US = 0
WALL_MARGIN_US = 10_000   # the default across hosts: NTP on a LAN keeps clocks within about a millisecond

# What a protocol may declare (the registry's `guarantee`): strict serializability is checked with session and
# real-time order, serializability with session order only (a client's next transaction, issued after its answer,
# is ordered after it: every protocol here keeps that, and a protocol that did not would surprise its users)
GUARANTEES = ("strict_serializable", "serializable")


def realtime_margin(data: RunData, margin_us: int | None = None) -> int:
    return margin_us if margin_us is not None else (REALTIME_MARGIN_US if data.clock == "monotonic"
                                                    else WALL_MARGIN_US)


def order_edges(data: RunData, margin_us: int, realtime: bool = True) -> dict:
    """Session and real-time edges between committed transactions: u -> {v: (kind, label)}. "so": the next
    transaction of the same client session (a coordinator issues one at a time). "rt": real time through time
    points (virtual nodes, ids < 0): u -> the point of its answer (+ margin) -> every later point -> the point of
    v's issue -> v, so u reaches v exactly when u was answered more than margin_us before v was issued; 2 nodes
    and 3 edges per transaction instead of one edge per such pair."""
    extra = defaultdict(dict)
    by_session = defaultdict(list)
    for t, sess in data.sessions.items():
        if t in data.times:
            by_session[sess].append((data.times[t][0], t))
    for (client, sess), ts in by_session.items():
        ts.sort()
        for (_, a), (_, b) in zip(ts, ts[1:]):
            extra[a][b] = ("so", f"{client} session {sess}")
    if not realtime:
        return extra
    # issue points sort before answer points at the same time: an answer reaches only later issues
    points = sorted([(s, 0, t) for t, (s, _) in data.times.items()] +
                    [(e + margin_us, 1, t) for t, (_, e) in data.times.items()])
    for i, (_, kind, t) in enumerate(points):
        node = -(i + 1)
        if i + 1 < len(points):
            extra[node][-(i + 2)] = ("rt", "")
        if kind == 0:
            extra[node][t] = ("rt", "")
        else:
            extra[t][node] = ("rt", "")
    return extra


def edge_kind(data: RunData, u: int, v: int, shard: int, key) -> str:
    """ww, wr or rw: how u's access to key on shard and v's later one conflict."""
    def writes(t):
        txn = data.txns.get(t)
        return txn is not None and any(p.shard == shard and key in p.writes for p in txn.pieces.values())
    wu, wv = writes(u), writes(v)
    return "ww" if wu and wv else ("wr" if wu else "rw")


def cycle_class(kinds) -> str:
    """Adya's/Elle's class of a cycle by its edges' kinds: G0 (ww only), G1c (ww and wr), G-single (one rw), G2
    (more rw); "-process" when it needs a session edge, "-realtime" when it needs real time."""
    c = Counter(kinds)
    base = "G2" if c["rw"] > 1 else "G-single" if c["rw"] == 1 else "G1c" if c["wr"] else "G0"
    return base + ("-realtime" if c["rt"] else "-process" if c["so"] else "")


def render_cycle(data: RunData, cycle: list, label) -> tuple[str, list[str]]:
    """(the cycle from its smallest transaction, its edges' kinds): label(u, v) -> (kind, text) for a data edge;
    a run through time points is one real-time edge, with the two transactions' times."""
    k = min((i for i, u in enumerate(cycle) if u >= 0), key=lambda i: cycle[i])
    cycle = cycle[k:] + cycle[:k]
    parts, kinds, i, n = [], [], 0, len(cycle)
    t0 = min((s for s, _ in data.times.values()), default=0)
    while i < n:
        u = cycle[i]
        j = i + 1
        while cycle[j % n] < 0:
            j += 1
        v = cycle[j % n]
        if j > i + 1:   # through time points
            kinds.append("rt")
            ue, vs = data.times[u][1], data.times[v][0]
            parts.append(f"{_describe(data, u)} -realtime (answered at {(ue - t0) / 1e3:.3f} ms, "
                         f"{(vs - ue) / 1e3:.3f} ms before the next was issued)->")
        else:
            kind, text = label(u, v)
            kinds.append(kind)
            parts.append(f"{_describe(data, u)} -{kind} {text}->")
        i = j
    return " ".join(parts) + f" txn {cycle[0]}", kinds


def check_realtime(data: RunData, adj: dict, margin_us: int | None = None, guarantee: str = "strict_serializable",
                   counts: Counter | None = None) -> list[str]:
    """Strict serializability: the conflict graph, plus each session's order and real time (order_edges), has no
    cycle; for a protocol that declares serializability only, plus each session's order. Run on a serializable conflict graph (else the serializability check has failed the run already), so
    every cycle found needs a session or real-time edge; one line per component, its shortest cycle found and its
    class (G0/G1c/G-single/G2 with -process or -realtime, counted into counts). Clients' times are on one kernel's
    CLOCK_MONOTONIC (margin 0) or, across kernels, on their wall clocks (margin WALL_MARGIN_US unless given)."""
    if guarantee not in GUARANTEES:
        raise Skip(f"the protocol declares {guarantee or 'no guarantee'}, neither of {', '.join(GUARANTEES)}")
    strict = guarantee == "strict_serializable"
    if not data.clock and strict:
        raise Skip("the clients recorded no common clock (a run from before run_start_mono_us and "
                   "run_start_wall_us)")
    if strongly_connected(adj):
        raise Skip("the conflict graph has a cycle already (serializability): real time is checked on "
                   "serializable runs")
    margin = realtime_margin(data, margin_us)
    extra = order_edges(data, margin, realtime=strict and bool(data.clock))
    nodes = set(adj) | set(extra)
    combined = {u: list(adj.get(u, ())) + [v for v in extra.get(u, ()) if v not in adj.get(u, ())] for u in nodes}

    def label(u, v):
        if v in adj.get(u, ()):
            shard, key = adj[u][v]
            return edge_kind(data, u, v, shard, key), f"[shard {shard}, {key}]"
        kind, text = extra[u][v]
        return kind, f"[{text}]"
    out = _Collector()
    comps = sorted(strongly_connected(combined), key=lambda c: min(x for x in c if x >= 0))
    for comp in comps:
        real = sorted(x for x in comp if x >= 0)
        cycle = shortest_cycle(combined, comp, starts=real[:8], budget=2_000_000)
        text, kinds = render_cycle(data, cycle, label)
        cls = cycle_class(kinds)
        if counts is not None:
            counts[cls] += 1
        out.add(f"{cls}: {text}" + (f" (one component of {len(real)} transactions)" if len(real) > 2 else ""))
    return out.result()


# ---- (f) the protocol's own order ----------------------------------------------------------------------------

def check_protocol_order(data: RunData) -> list[str]:
    """(f): at every replica, two conflicting pieces (a key both access, at least one writing it; commutative and
    deferred pieces aside) whose history lines carry order keys of one domain ran in the keys' order: the order
    the protocol says it decided (DAST's timestamps, SLOG's log positions, ...); and where the protocol declared
    each transaction's dependencies (Janus, TAPIR), the later of two conflicting pieces belongs to a transaction
    that depends on the earlier one's, and where a replica declared its vote (Janus), the transaction was decided
    with every dependency of it (docs/checker.md). Skipped when no replica's history carries any of them."""
    if not any(data.order_keys.values()) and not any(data.deps.values()) and not any(data.votes.values()):
        raise Skip("no history carries the protocol's order keys, dependencies or votes (it declares none, or a run "
                   "from before them)")
    out, keys_of = _Collector(), piece_keys(data)
    comm = data._commutative if data._commutative is not None else \
        {(t.id, p) for t in data.txns.values() for p in t.commutative}
    checked = []   # (history, keys, deps) already checked: a replica identical to another is not checked again
    every: dict = {}   # every replica's declarations united: a path may leave the shard (Janus's components span
    for d in data.deps.values():     # shards)
        for t, ds in d.items():
            every[t] = every.get(t, frozenset()) | ds
    comps = _Components(every)
    for node, hist in sorted(data.histories.items()):
        okeys, deps = data.order_keys.get(node) or {}, data.deps.get(node) or {}
        if (not okeys and not deps) or any(h == hist and k == okeys and d == deps for h, k, d in checked):
            continue
        checked.append((hist, okeys, deps))
        if okeys:
            _key_order(data, node, hist, okeys, keys_of, comm, out)
        if deps:
            _dependency_order(data, node, hist, deps, every, keys_of, comm, out)
            _dependencies_first(data, node, hist, deps, comps, comm, out)
    for node, votes in sorted(data.votes.items()):
        if votes:
            _votes_held(data, node, votes, out)
            _votes_name_pending(data, node, votes, keys_of, comm, out)
    _quorums_agree(data, out)
    return out.result()


def _votes_name_pending(data: RunData, node: str, votes: dict, keys_of: dict, comm: set, out: _Collector) -> None:
    """Where votes carry when they were cast (`v=<executed>/<ids>`): two transactions that conflict at this replica
    (a key both access, one writing it) and that had neither executed here when the other's vote was cast were
    pending at once, so the later one's vote names the earlier (Janus: a decision on a majority's votes relies on
    it, docs/protocols/janus.md). The later to execute here, U, voted when `mark` events had executed; every
    conflicting T executed before U but at or after that mark was then still to execute. At a restarted replica a T it
    holds no vote for is left out: its PreAccept came before it voted again (or while it was down), and the decision
    that counted other replicas' votes is held to them at theirs."""
    marks = data.vote_marks.get(node) or {}
    if not marks:
        return
    hist = data.histories.get(node) or []
    last = {}
    for i, (t, _, _) in enumerate(hist):
        last[t] = i
    per_key: dict = defaultdict(dict)   # key -> {txn: writes it}
    for t, p, deferred in hist:
        keys = keys_of.get((t, p))
        if keys is None or deferred or (t, p) in comm:
            continue
        for k in keys[0]:
            per_key[k][t] = True
        for k in keys[1]:
            per_key[k].setdefault(t, False)
    reported = set()
    for key, acc in sorted(per_key.items()):
        order = sorted(acc, key=lambda x: last[x])
        for j, u in enumerate(order):
            if u not in marks:
                continue
            for t in reversed(order[:j]):
                if last[t] < marks[u]:
                    break   # it had executed here before U voted (and so had every one before it)
                if node in data.restarted and t not in votes:
                    continue   # a restarted replica never saw it (sent before it voted): the replicas that decided it
                    #            did, and they are checked the same way
                if (acc[t] or acc[u]) and t not in votes.get(u, ()) and u not in votes.get(t, ()) \
                        and (t, u) not in reported:
                    reported.add((t, u))
                    out.add(f"{node}: {_describe(data, t)} and {_describe(data, u)} conflict on {key} and neither had "
                            "executed here when the other voted, yet neither vote names the other")


REPLICAS = 3   # replicas per shard (the only count the testbed supports): a decision's quorum needs 2


def _replica_index(node: str) -> int | None:
    tail = node.rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _quorums_agree(data: RunData, out: _Collector) -> None:
    """A decision that names the replicas whose votes it counted (`q=`) counted a majority's; taken without an
    Accept round (no `a=`), every replica's (the fast quorum: a decision no majority accepted would not survive its
    coordinator); taken by one, accepted by a majority (`a=`); and every replica of the shard that executed the
    transaction names the same decision."""
    majority = REPLICAS // 2 + 1
    for shard, nodes in sorted(data.replicas.items()):
        seen: dict = {}
        for node in nodes:
            acc = data.accepted.get(node) or {}
            for t, q in sorted((data.quorums.get(node) or {}).items()):
                a = acc.get(t)
                if len(q) < majority or any(r >= REPLICAS for r in q):
                    out.add(f"{node}: {_describe(data, t)} was decided on the votes of replicas "
                            f"{sorted(q)} of shard {shard}: not a majority of its {REPLICAS}")
                elif a is None and len(q) < REPLICAS:
                    out.add(f"{node}: {_describe(data, t)} was decided on the fast path on the votes of replicas "
                            f"{sorted(q)} of shard {shard}: the fast quorum is all {REPLICAS}, fewer need an "
                            "Accept round")
                elif a is not None and (len(a) < majority or any(r >= REPLICAS for r in a)):
                    out.add(f"{node}: {_describe(data, t)} was decided with the acceptance of replicas {sorted(a)} "
                            f"of shard {shard}: not a majority of its {REPLICAS}")
                if t in seen and seen[t][1:] != (q, a):
                    out.add(f"{node} and {seen[t][0]} name different decisions of {_describe(data, t)} on shard "
                            f"{shard}")
                seen.setdefault(t, (node, q, a))
        _epochs_agree(data, shard, nodes, out)


def _epochs_agree(data: RunData, shard: int, nodes: list, out: _Collector) -> None:
    """A decision counts votes of one epoch (a rejoin's, `qe=`; docs/checker.md, "Votes"): every replica it counted
    that holds its vote for the transaction cast it, or cast it again, in that epoch (one of its `e=`); and a replica
    that holds no vote for a transaction whose decision counted its vote in epoch E (a restarted replica: the vote was
    its predecessor's, forgotten) cast none of its own votes in an epoch at or below E, where its forgotten one could
    be contradicted (checked at a restarted replica only: elsewhere a vote not held is one not declared, TAPIR's
    refusals)."""
    by_index = {_replica_index(n): n for n in nodes}
    executed = {n: {x for x, _, _ in data.histories.get(n, ())} for n in nodes}   # once per replica, not per vote
    counted_forgotten: dict = {}   # replica node -> the highest epoch a decision counted a vote of it it does not hold
    for node in nodes:
        ep = data.epochs.get(node) or {}
        for t, q in sorted((data.quorums.get(node) or {}).items()):
            e = ep.get(t, (0, 0))[1]
            for r in sorted(q):
                voter = by_index.get(r)
                if voter is None or t not in executed[voter]:
                    continue
                if t in (data.votes.get(voter) or {}):
                    cast = (data.epochs.get(voter) or {}).get(t, (frozenset({0}), 0))[0]
                    if e not in cast:
                        out.add(f"{node}: {_describe(data, t)} was decided on shard {shard} on votes of epoch {e}, "
                                f"counting {voter}'s, cast in epoch {', '.join(map(str, sorted(cast)))}")
                elif voter in data.restarted:
                    counted_forgotten[voter] = max(counted_forgotten.get(voter, -1), e)
    for voter, e in sorted(counted_forgotten.items()):
        low = [t for t, (cast, _) in (data.epochs.get(voter) or {}).items()
               if t in (data.votes.get(voter) or {}) and min(cast) <= e]
        low += [t for t in (data.votes.get(voter) or {}) if t not in (data.epochs.get(voter) or {})]   # epoch 0
        if low:
            out.add(f"{voter}: votes it forgot were counted in epoch {e} (a decision counted them, it holds none), "
                    f"yet it voted in epoch {e} or below again, for {_describe(data, min(low))}"
                    + (f" and {len(set(low)) - 1} more" if len(set(low)) > 1 else ""))


def _votes_held(data: RunData, node: str, votes: dict, out: _Collector) -> None:
    """At one replica, every transaction it voted for and executed was decided with dependencies that hold its
    whole vote, where the decision counted it (`q=`; without one, every replica's vote counts): a protocol whose
    decision must hold the votes it heard (our Janus: a replica's latest access per key may be the only link it
    knows of between two conflicting transactions) left none out."""
    deps = data.deps.get(node) or {}
    quorums = data.quorums.get(node) or {}
    me = _replica_index(node)
    executed = {t for t, _, _ in data.histories.get(node, ())}
    for t, vote in sorted(votes.items()):
        if t not in executed or (t in quorums and me not in quorums[t]):
            continue
        if t not in deps:
            out.add(f"{node}: executed {_describe(data, t)}, which it voted for, without declaring the dependencies "
                    f"it was decided with")
        elif vote - deps[t]:
            out.add(f"{node}: voted for dependencies of {_describe(data, t)} that its decision left out: "
                    + ", ".join(_describe(data, x) for x in sorted(vote - deps[t])))


def _key_order(data: RunData, node: str, hist: list, okeys: dict, keys_of: dict, comm: set,
               out: _Collector) -> None:
    writers, accessed = {}, {}   # (conflict key, domain) -> (largest order key, its (txn, piece)) so far
    for i, (t, p, deferred) in enumerate(hist):
        ok = okeys.get(i)
        if ok is None or deferred or (t, p) in comm:
            continue
        rw = keys_of.get((t, p))
        if rw is None:
            continue
        dom, val = ok[0], ok[1:]
        for keys, seen in ((rw[0], accessed), (rw[1], writers)):
            for k in keys:
                prev = seen.get((k, dom))
                if prev is not None and prev[0] > val and prev[1][0] != t:
                    out.add(f"{node}: {_describe(data, t)} piece {p} (key {dom}:{val[0]}.{val[1]}) ran after "
                            f"{_describe(data, prev[1][0])} piece {prev[1][1]} (key {dom}:{prev[0][0]}."
                            f"{prev[0][1]}), a conflicting piece the protocol ordered after it [{k}]")
        for k in rw[0]:
            for seen in (writers, accessed):
                if seen.get((k, dom), ((-1, -1),))[0] < val:
                    seen[(k, dom)] = (val, (t, p))
        for k in rw[1]:
            if accessed.get((k, dom), ((-1, -1),))[0] < val:
                accessed[(k, dom)] = (val, (t, p))


DEPS_SEARCH_BUDGET = 5000   # transactions one dependency search may visit before the pair counts as unknown


def _depends(every: dict, b: int, a: int) -> bool | None:
    """Is a an ancestor of b through the declared dependencies (every: all replicas' declarations)? None: the
    search would visit more than DEPS_SEARCH_BUDGET transactions."""
    if a in every.get(b, ()):
        return True
    seen, todo = {b}, [b]
    while todo:
        for y in every.get(todo.pop(), ()):
            if y == a:
                return True
            if y not in seen and y in every:
                if len(seen) >= DEPS_SEARCH_BUDGET:
                    return None
                seen.add(y)
                todo.append(y)
    return False


class _Components:
    """The strongly connected components of the declared dependencies (every: all replicas' declarations), computed
    once, on first use: x, a dependency of t, depends back on t exactly when the two share one."""
    def __init__(self, every: dict):
        self.every, self.of = every, None

    def same(self, a: int, b: int) -> bool:
        if self.of is None:
            self.of = {t: i for i, comp in enumerate(strongly_connected(self.every)) for t in comp}
        return a in self.of and self.of.get(b) == self.of[a]


def _dependencies_first(data: RunData, node: str, hist: list, deps: dict, comps: _Components, comm: set,
                        out: _Collector) -> None:
    """At one replica, a transaction executed after every dependency it declared that this replica executes too
    (the rule a protocol that orders by dependencies executes by), whether or not the two share a key in the
    history; a dependency that depends back on it (a cycle: Janus runs a strongly connected component in one
    order of its own) aside. A transaction's place is that of its first piece whose place matters (deferred and
    commutative pieces aside, as in the pass above)."""
    first: dict = {}
    for i, (t, p, deferred) in enumerate(hist):
        if not deferred and (t, p) not in comm:
            first.setdefault(t, i)
    for t, ds in sorted(deps.items()):
        at = first.get(t)
        if at is None:
            continue
        for x in sorted(ds):
            if first.get(x, -1) > at and not comps.same(x, t):
                out.add(f"{node}: executed {_describe(data, t)} before {_describe(data, x)}, a dependency it "
                        f"declared (the protocol's decision), which does not depend on it")


def _dependency_order(data: RunData, node: str, hist: list, deps: dict, every: dict, keys_of: dict, comm: set,
                      out: _Collector) -> None:
    """At one replica (deps: what its history declared), every access to a conflict key against the accesses it
    conflicts with just before it (the key's last writer; for a write also the readers since): the accessing
    transaction must depend on theirs through the declared dependencies (every: all replicas' declarations; a path
    may pass through other shards). Consecutive pairs suffice: dependence is transitive.
    A pair the dependencies leave unordered may run in either order at another replica (a protocol that orders by
    its dependencies has no other order to keep them in); one whose dependencies say the opposite ran against them."""
    writer, readers = {}, {}     # conflict key -> its last writer here; the transactions that read it since
    for t, p, deferred in hist:
        if deferred or (t, p) in comm:
            continue
        rw = keys_of.get((t, p))
        if rw is None:
            continue
        before = {}              # earlier conflicting transaction -> a key of the conflict
        for k in rw[0]:
            before.update((r, k) for r in readers.get(k, ()))
        for k in (*rw[0], *rw[1]):
            if k in writer:
                before.setdefault(writer[k], k)
        before.pop(t, None)
        if t in deps:
            for a, k in before.items():
                if a in deps and _depends(every, t, a) is False:
                    how = ("against the declared dependencies (the earlier depends on the later)"
                           if _depends(every, a, t) else "the declared dependencies leave the two unordered")
                    out.add(f"{node}: {_describe(data, a)} ran before {_describe(data, t)} piece {p}, which conflicts "
                            f"with it on {k}: {how}")
        for k in rw[0]:
            writer[k], readers[k] = t, []
        for k in rw[1]:
            rs = readers.setdefault(k, [])
            if not rs or rs[-1] != t:
                rs.append(t)


# ---- (d) serial replay --------------------------------------------------------------------------------------------

def topological_order(data: RunData, adj: dict) -> list[Txn]:
    """The transactions that took effect (the committed ones and the abandoned ones some replica executed:
    took_effect) in an order that respects every conflict edge between them (Kahn, ties by id)."""
    committed = took_effect(data)
    indeg = Counter()
    for u, vs in adj.items():
        if u in committed:
            for v in vs:
                if v in committed:
                    indeg[v] += 1
    ready = [t for t in committed if indeg[t] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.append(data.txns[u])
        for v in adj.get(u, ()):
            if v in committed:
                indeg[v] -= 1
                if indeg[v] == 0:
                    heapq.heappush(ready, v)
    if len(order) != len(committed):
        raise Skip("the conflict graph has a cycle: no serial order to replay")
    return order


def replay_binary() -> Path | None:
    """txn-replay: $EDGE_TXN_REPLAY, else build/txn-replay of this checkout, else on PATH."""
    for cand in (os.environ.get("EDGE_TXN_REPLAY"), REPO / "build" / "txn-replay", shutil.which("txn-replay")):
        if cand and os.access(cand, os.X_OK):
            return Path(cand)
    return None


def require_replay_binary() -> Path:
    binary = replay_binary()
    if binary is None:
        raise Unreadable("txn-replay not found (build it with `make build`, or set EDGE_TXN_REPLAY)")
    return binary


def check_replay(data: RunData, adj: dict, deploy_file: Path, dumps: list[dict], binary=None) -> list[str]:
    order = topological_order(data, adj)
    binary = binary or require_replay_binary()
    if not deploy_file.is_file():
        raise Unreadable(f"{deploy_file.name} missing: the replay needs the deployment")
    p = subprocess.run([str(binary), "--config", str(deploy_file)], input="\n".join(t.line for t in order) + "\n",
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise Unreadable((p.stderr.strip().splitlines() or [f"txn-replay exited with {p.returncode}"])[-1])
    outputs, digests, end = {}, {}, None
    for line in p.stdout.splitlines():
        f = line.split()
        if f[0] == "t":
            outputs[int(f[1])] = f[2]
        elif f[0] == "s":
            digests[int(f[1])] = f[2]
        elif f[0] == "end":
            end = int(f[1])
    if end != len(order):
        raise Unreadable(f"txn-replay replayed {end} of {len(order)} transactions")
    out = _Collector()
    for d in sorted(dumps, key=lambda d: d["node"]):
        want = digests.get(int(d["shard"]))
        if d["digest"] != want:
            out.add(f"shard {d['shard']}: the serial replay ends in state {want}, {d['node']} in {d['digest']}")
    wrong = [t for t in order if t.outputs is not None and t.outputs != outputs.get(t.id)]
    for t in wrong:
        out.add(f"{t.label()}: the client received outputs {t.outputs}, the serial replay produces "
                f"{outputs.get(t.id)}")
    return out.result()
