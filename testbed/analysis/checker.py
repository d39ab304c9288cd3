"""The run checker (docs/checker.md): state dumps, the run's own health, and the order of execution.

Usage: python -m testbed.analysis.checker RUN_DIR   -> exit 0 CONSISTENT, 1 INCONSISTENT, 2 unreadable input.
It writes check.json, bound to the run (testbed/analysis/validate.py rebind_check) when its raw files are the run's.

Checks, each with a verdict (pass / fail / skipped) and its reason in check.json:
  replicas         replicas of a shard have identical digests and aggregates
  workload         TPC-C consistency conditions 3.3.2.1-3.3.2.12 (as far as the scaled tables allow); TPC-A deltas;
                   append: every list on its shard, the dump's row counts its lists'
  run              no transaction stuck (sent before the run's end and unanswered through the drain), no message
                   dropped or rejected, every server drained in time (transactions given up after the retry limit,
                   and those an open load the system could not keep up with abandoned in flight at the drain, are
                   notes, not violations)
  order            (a) every replica of a shard executed the same pieces, conflicting ones in the same order
  atomicity        (b) committed transactions executed exactly once at every replica they touch, nothing else did;
                   an abandoned one (outcome unknown) either so or nowhere
  durability       nothing a client saw committed is lost: it is in the history (and, append, the final lists) of
                   every live replica of every shard it touched; each shard kept a majority live; a replica the
                   nemesis crashed (faults.jsonl) is excused its missing dump and history (durability.py)
  serializability  (c) the conflict graph of the per-shard orders has no cycle (the shortest one is printed)
  realtime         (e) strict serializability, when the protocol declares it (the registry's `guarantee`): the
                   conflict graph with every client session's order and real time added has no cycle (a
                   transaction answered before another was issued, by more than the clocks' margin, comes first);
                   the cycle's class is named (G-single-realtime, G2-process, ...)
  protocol_order   (f) conflicting pieces ran at every replica in the order of the keys the protocol declared for
                   them in its histories (its timestamps, log positions, ...; the registry's `order_key`)
  anomalies        append only (listappend.py): Elle's list-append inference from the final lists and the clients'
                   reads and appends: value-level anomalies (G1a, G1b, garbage, duplicate, lost append, incompatible
                   order, internal) and dependency cycles classified G0 / G1c / G-single / G2; check.json's
                   anomaly_classes counts them per class
  replay           (d) a serial replay of the committed transactions reproduces every digest and client output
Protocol-neutral: it knows pieces, shards, conflict keys and orders, never how a protocol orders.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from testbed.analysis import durability, histories, listappend, validate
from testbed.core import files, protocols
from testbed.analysis.histories import Skip, Unreadable

TPCA_TABLES = ("customer", "teller", "branch")
EPS = 0.01
CHECKS = ("replicas", "workload", "run", "order", "atomicity", "durability", "serializability", "realtime",
          "protocol_order", "anomalies", "replay")


def load_dumps(run_dir, crashed=None) -> list[dict]:
    """Every server's state dump (replicas and region managers); Unreadable when one is missing or malformed.
    crashed: replicas the nemesis killed, which wrote none (default: durability.crashed_replicas(run_dir))."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise Unreadable(f"{run_dir}: not a directory")
    d = run_dir / "servers" if (run_dir / "servers").is_dir() else run_dir
    files = sorted(d.glob("*.state.json"))
    expected = set()
    if (run_dir / "deploy.yml").is_file():
        try:
            nodes = yaml.safe_load((run_dir / "deploy.yml").read_text())["nodes"]
            expected = {n["name"] for n in nodes if n["kind"] == "replica"}
        except Exception as e:  # noqa: BLE001
            raise Unreadable(f"deploy.yml: {e}") from e
    if not files:
        raise Unreadable(f"{d}: no *.state.json dumps")
    dumps = []
    for f in files:
        try:
            dump = json.loads(f.read_text())
            keys = ("node",) if dump.get("kind") == "manager" else ("node", "shard", "digest", "workload")
            for key in keys:
                if key not in dump:
                    raise ValueError(f"missing key {key!r}")
        except (OSError, ValueError, AttributeError) as e:
            raise Unreadable(f"{f.name}: {e}") from e
        dumps.append(dump)
    if crashed is None:
        crashed = durability.crashed_replicas(run_dir)
    missing = expected - set(crashed) - {x["node"] for x in dumps if x.get("kind") != "manager"}
    if missing:
        raise Unreadable(f"missing state dump(s) for {', '.join(sorted(missing))}")
    if not any(x.get("kind") != "manager" for x in dumps):
        raise Unreadable(f"{d}: no replica state dumps")
    return dumps


def _aggregates(dump: dict) -> dict:
    return {"rows": dump.get("rows"), dump["workload"]: dump.get(dump["workload"])}


def check_replicas(dumps) -> list[str]:
    v, by_shard = [], defaultdict(list)
    for d in dumps:
        by_shard[d["shard"]].append(d)
    for shard, ds in sorted(by_shard.items()):
        ref = ds[0]
        for d in ds[1:]:
            if d["digest"] != ref["digest"]:
                v.append(f"shard {shard}: digest of {d['node']} ({d['digest']}) != {ref['node']} ({ref['digest']})")
            elif _aggregates(d) != _aggregates(ref):
                v.append(f"shard {shard}: aggregates of {d['node']} differ from {ref['node']}")
    return v


def _cents(x) -> int:
    return int(round(float(x) * 100))


def check_tpcc(dump: dict) -> list[str]:
    """Conditions of one warehouse (shard); fields an older dump lacks are not checked."""
    v, node = [], dump["node"]
    for w in dump["tpcc"]["warehouses"]:
        dsum = sum(d["d_ytd"] for d in w["districts"])
        if abs(w["w_ytd"] - dsum) > EPS:
            v.append(f"{node}: 3.3.2.1 w {w['w_id']}: w_ytd {w['w_ytd']} != sum(d_ytd) {dsum}")
        if "sum_h_amount" in w and _cents(w["w_ytd"]) != _cents(w["sum_h_amount"]):
            v.append(f"{node}: 3.3.2.8 w {w['w_id']}: w_ytd {w['w_ytd']} != sum(h_amount) {w['sum_h_amount']}")
        for d in w["districts"]:
            where = f"{node}: w {w['w_id']} d {d['d_id']}"
            if d.get("max_o_id") is not None and d["d_next_o_id"] - 1 != d["max_o_id"]:
                v.append(f"{where}: 3.3.2.2 d_next_o_id-1 {d['d_next_o_id'] - 1} != max_o_id {d['max_o_id']}")
            if d["no_count"] > 0:
                if d["d_next_o_id"] - 1 != d["max_no_o_id"]:
                    v.append(f"{where}: 3.3.2.2 d_next_o_id-1 {d['d_next_o_id'] - 1} != max_no_o_id {d['max_no_o_id']}")
                if d["max_no_o_id"] - d["min_no_o_id"] + 1 != d["no_count"]:
                    v.append(f"{where}: 3.3.2.3 max_no_o_id-min_no_o_id+1 "
                             f"{d['max_no_o_id'] - d['min_no_o_id'] + 1} != no_count {d['no_count']}")
            if d["sum_ol_cnt"] != d["ol_count"]:
                v.append(f"{where}: 3.3.2.4 sum(o_ol_cnt) {d['sum_ol_cnt']} != count(order_line) {d['ol_count']}")
            if "o_null_carrier" in d and (d["o_null_carrier"] != d["no_count"] or d["no_with_carrier"]):
                v.append(f"{where}: 3.3.2.5 {d['o_null_carrier']} orders without carrier, {d['no_count']} new-orders "
                         f"({d['no_with_carrier']} of them with a carrier or no order)")
            if d.get("ol_cnt_mismatch"):
                v.append(f"{where}: 3.3.2.6 {d['ol_cnt_mismatch']} orders whose o_ol_cnt != their order lines")
            if d.get("ol_delivery_mismatch"):
                v.append(f"{where}: 3.3.2.7 {d['ol_delivery_mismatch']} order lines delivered iff their order "
                         "has no carrier")
            if "sum_h_amount" in d and _cents(d["d_ytd"]) != _cents(d["sum_h_amount"]):
                v.append(f"{where}: 3.3.2.9 d_ytd {d['d_ytd']} != sum(h_amount) {d['sum_h_amount']}")
            if "deliveries" in d and d["o_count"] - d["no_count"] != d["delivered_at_load"] + d["deliveries"]:
                v.append(f"{where}: 3.3.2.11 count(order)-count(new_order) {d['o_count'] - d['no_count']} != "
                         f"{d['delivered_at_load']} delivered at load + {d['deliveries']} deliveries")
            if d.get("c_balance_mismatch"):
                v.append(f"{where}: 3.3.2.12 {d['c_balance_mismatch']} customers with c_balance + c_ytd_payment "
                         "!= sum of their delivered ol_amount")
    return v


def check_tpcc_balances(dumps) -> list[str]:
    """3.3.2.10 summed per customer district: sum(c_balance) = delivered ol_amount - the HISTORY amounts its
    customers paid, wherever those rows are stored (one replica per shard)."""
    per_shard = {}
    for d in dumps:
        per_shard.setdefault(d["shard"], d)
    paid = defaultdict(int)
    for d in per_shard.values():
        for w in d["tpcc"]["warehouses"]:
            if "h_by_customer_district" not in w:
                return []
            for k, x in w["h_by_customer_district"].items():
                paid[k] += _cents(x)
    v = []
    for d in per_shard.values():
        for w in d["tpcc"]["warehouses"]:
            for dd in w["districts"]:
                want = _cents(dd["sum_delivered_ol_amount"]) - paid[f"{w['w_id']}:{dd['d_id']}"]
                if _cents(dd["sum_c_balance"]) != want:
                    v.append(f"{d['node']}: w {w['w_id']} d {dd['d_id']}: 3.3.2.10 sum(c_balance) "
                             f"{dd['sum_c_balance']} != delivered ol_amount - paid h_amount {want / 100:.2f}")
    return v


def check_tpca(dumps) -> list[str]:
    v, per_shard = [], {}
    for dump in dumps:
        for t in TPCA_TABLES:
            x = dump["tpca"]["tables"][t]
            if abs(x["sum"] - x["initial_sum"] - x["applied_delta"]) > EPS:
                v.append(f"{dump['node']}: tpca {t}: sum-initial_sum {x['sum'] - x['initial_sum']} "
                         f"!= applied_delta {x['applied_delta']}")
        per_shard.setdefault(dump["shard"], dump)  # one replica per shard for the global sums
    totals = {t: sum(d["tpca"]["tables"][t]["applied_delta"] for d in per_shard.values()) for t in TPCA_TABLES}
    if max(totals.values()) - min(totals.values()) > EPS:
        v.append("tpca: total deltas differ across tables: " + ", ".join(f"{t} {x}" for t, x in totals.items()))
    return v


def check_append(dumps) -> list[str]:
    """append: every key l<g> of a shard's lists is one of its own (g mod the number of shards is the shard), every
    shard has as many lists, and the dump's rows count its lists and their elements. Its anomalies: listappend.py."""
    v, n_shards = [], len({d["shard"] for d in dumps})
    sizes = {}
    for d in dumps:
        lists, rows = d["append"]["lists"], d.get("rows") or {}
        sizes[d["node"]] = len(lists)
        wrong = sorted(k for k in lists
                       if not (k[:1] == "l" and k[1:].isdigit() and int(k[1:]) % n_shards == d["shard"]))
        if wrong:
            v.append(f"{d['node']}: {len(wrong)} list(s) not of shard {d['shard']} (of {n_shards}): "
                     + ", ".join(wrong[:5]))
        total = sum(len(x) for x in lists.values())
        if rows.get("lists", len(lists)) != len(lists) or rows.get("elements", total) != total:
            v.append(f"{d['node']}: rows say {rows.get('lists')} lists of {rows.get('elements')} elements, its lists "
                     f"are {len(lists)} of {total}")
    if len(set(sizes.values())) > 1:
        v.append("shards hold different numbers of lists: "
                 + ", ".join(f"{n} {k}" for n, k in sorted(sizes.items())[:6]))
    return v


def check_workload(dumps) -> list[str]:
    workloads = {d["workload"] for d in dumps}
    if len(workloads) != 1:
        raise Unreadable(f"dumps disagree on the workload: {sorted(workloads)}")
    wl = workloads.pop()
    try:
        if wl == "tpcc":
            return [x for d in dumps for x in check_tpcc(d)] + check_tpcc_balances(dumps)
        if wl == "tpca":
            return check_tpca(dumps)
        if wl == "append":
            return check_append(dumps)
    except (KeyError, TypeError, AttributeError) as e:
        raise Unreadable(f"malformed dump section: {type(e).__name__} {e}") from e
    raise Unreadable(f"unknown workload {wl!r}")


PROCESS_FACTS = (("dropped_to_clients", "dropped {} message(s) to clients"),
                 ("malformed_messages", "received {} malformed message(s)"),
                 ("rejected_messages", "rejected {} message(s) (bad message)"))


def _client_knobs(run_dir: Path, *keys: str) -> list[float | None]:
    """The deployment file's client.<key> for each key, as numbers; None where it does not say (read once)."""
    try:
        client = yaml.safe_load((run_dir / "deploy.yml").read_text())["client"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        client = None
    out = []
    for key in keys:
        try:
            out.append(float(client[key]))
        except (ValueError, KeyError, TypeError):
            out.append(None)
    return out


@dataclass
class Unfinished:
    """The transactions of a run that did not commit, by why (records.csv's status and times):
      exhausted   given up after every attempt the retry limit allows: a protocol that aborts on conflict gave
                  them up (a note; atomicity holds them to executing nowhere)
      abandoned   in flight when the drain timeout ran out, sent after the run's end: arrivals that waited for a
                  coordinator past the end (an open load the system could not keep up with). Their outcome is
                  unknown: checked as possibly committed (histories.took_effect), counted, never a violation
      stuck       in flight when the drain timeout ran out although sent before the run's end: unanswered through
                  the whole drain (a violation), and given-up transactions below the retry limit (run folders
                  from before `abandoned`)
    unsent, shed: an open load's arrivals never sent (waiting when the drain ran out) and refused
    (client.max_outstanding); both counted by the clients (load)."""
    exhausted: list = field(default_factory=list)
    abandoned: list = field(default_factory=list)
    stuck: list = field(default_factory=list)
    unsent: int = 0
    shed: int = 0

    def overloaded(self) -> str:
        """One line saying the open load outran the system, or "" when it did not."""
        if not (self.unsent or self.abandoned or self.shed):
            return ""
        parts = [f"{n} {what}" for n, what in ((self.shed, "arrival(s) shed (client.max_outstanding)"),
                                               (self.unsent, "arrival(s) never sent (still waiting at the drain)"),
                                               (len(self.abandoned), "transaction(s) abandoned in flight at the "
                                                "drain (outcome unknown: checked as possibly committed)")) if n]
        return "could not keep up with the offered load: " + ", ".join(parts)


def _listed(labels: list[str]) -> str:
    return ", ".join(labels[:5]) + (" ..." if len(labels) > 5 else "")


def unfinished_transactions(run_dir) -> Unfinished:
    """What became of the run's transactions that did not commit (Unfinished), from the clients' records.csv,
    summaries and the deployment's client knobs."""
    run_dir = Path(run_dir)
    clients, out = run_dir / "clients", Unfinished()
    limit, end_s = _client_knobs(run_dir, "retry_limit", "duration_s")
    for f in sorted(clients.glob("*.records.csv")) if clients.is_dir() else []:
        client = f.name.removesuffix(".records.csv")
        try:
            with open(f, newline="") as fh:
                rows = [r for r in csv.DictReader(fh) if r["status"] != "committed"]
            for r in rows:
                label = f"txn {r['txn_id']} ({r.get('type_name', '?')}, {client})"
                if r["status"] == "abandoned":
                    sent = int(r.get("sent_us") or r["start_us"])
                    (out.abandoned if end_s is not None and sent >= end_s * 1e6 else out.stuck).append(label)
                elif limit is not None and int(r["attempts"]) >= limit:
                    out.exhausted.append(label)
                else:
                    out.stuck.append(label)
        except (OSError, KeyError, ValueError) as e:
            raise Unreadable(f"{f.name}: {e}") from e
        try:
            load = json.loads((clients / f"{client}.summary.json").read_text()).get("open_loop") or {}
            out.unsent += int(load.get("unsent", 0))
            out.shed += int(load.get("shed", 0))
        except (OSError, ValueError, AttributeError, TypeError):
            pass   # no summary: the run check says so
    return out


def check_run_health(run_dir, dumps, lost=(), unfinished: Unfinished | None = None,
                     junk: list | None = None) -> list[str]:
    """Transactions stuck (unanswered through the whole drain: Unfinished), and what every process said about
    itself: malformed or rejected messages, messages dropped to a server process that was never lost (lost: the
    processes faults.jsonl records gone at some time, durability.lost_processes: a drop to one of those is what a
    peer going silent costs, a drop to any other a lost message), a server given up as unreachable that was never
    lost, a drain that timed out, an interrupted client. Transactions
    given up after the retry limit, and those an overloaded open load abandoned at the drain, are not violations:
    check_run notes them, as it notes the connections from outside the deployment each process refused (junk: the
    list they are added to)."""
    run_dir, v = Path(run_dir), []
    clients = run_dir / "clients"
    stuck = (unfinished or unfinished_transactions(run_dir)).stuck
    if stuck:
        v.append(f"{len(stuck)} transaction(s) sent before the run's end were still unanswered when the drain "
                 f"timeout ran out: {_listed(stuck)}")
    procs = [(d["node"], d) for d in dumps]
    for f in sorted(clients.glob("*.summary.json")) if clients.is_dir() else []:
        try:
            procs.append((f.name.removesuffix(".summary.json"), json.loads(f.read_text())))
        except (OSError, ValueError) as e:
            raise Unreadable(f"{f.name}: {e}") from e
    said = set()  # (process, fact): a process of several nodes says its own facts in each of their files
    for node, d in procs:
        facts = d.get("process", {})
        proc = facts.get("name", node)
        who = node if proc == node else f"{node} (process {proc})"
        for key, text in PROCESS_FACTS:
            if facts.get(key) and (key == "rejected_messages" or (proc, key) not in said):
                said.add((proc, key))
                v.append(f"{who}: " + text.format(facts[key]))
        if facts.get("drain_timed_out") and (proc, "drain") not in said:
            said.add((proc, "drain"))
            v.append(f"{who}: still busy when its 10 s drain ran out")
        if d.get("interrupted"):
            v.append(f"{node}: interrupted before its run finished")
        if facts.get("junk_connections") and (proc, "junk") not in said and junk is not None:
            said.add((proc, "junk"))   # not the protocol's doing: a note (check_run), never a violation
            junk.append(f"{who}: refused {facts['junk_connections']} connection(s) from outside the deployment "
                        f"(first from {facts.get('junk_from', '?')}; not opened with the deployment's token)")
        if (proc, "dropped") not in said:
            to = dict(facts.get("dropped_to") or {}) if isinstance(facts.get("dropped_to") or {}, dict) else {}
            unnamed = (facts.get("dropped_messages") or 0) - sum(to.values())
            if unnamed > 0:   # drops it did not say the destination of (an older engine): each counts as lost
                to["?"] = to.get("?", 0) + unnamed
            live = {p: n for p, n in to.items() if n and p not in lost}
            never = [p for p in facts.get("unreachable_peers") or [] if p not in lost]
            if live or never:
                said.add((proc, "dropped"))
            if live:
                v.append(f"{who}: dropped {sum(live.values())} message(s) to servers that were never lost ("
                         + ", ".join(f"{n} to {p}" if p != "?" else f"{n} to a process it did not name"
                                     for p, n in sorted(live.items())) + ")")
            if never:
                v.append(f"{who}: gave up {', '.join(never)} as unreachable, but no such process was lost "
                         "(faults.jsonl)")
    return v


class _Report:
    def __init__(self):
        self.checks, self.violations, self.stats = {}, [], {}

    def run(self, name: str, fn) -> None:
        try:
            found = fn()
        except Skip as s:
            self.skip(name, str(s))
            return
        self.checks[name] = {"verdict": "fail" if found else "pass", "reason": found[0] if found else "",
                             "violations": len(found)}
        self.violations += [f"[{name}] {x}" for x in found]

    def skip(self, name: str, reason: str) -> None:
        self.checks[name] = {"verdict": "skipped", "reason": reason, "violations": 0}


def _deployed(run_dir, replicas) -> dict[int, list[str]]:
    """shard -> its replicas' names: deploy.yml's, else those of the dumps (a folder without its deployment file)."""
    try:
        return durability.deployed_replicas(yaml.safe_load((Path(run_dir) / "deploy.yml").read_text()))
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        out: dict[int, list[str]] = {}
        for d in replicas:
            out.setdefault(int(d["shard"]), []).append(d["node"])
        return {s: sorted(ns) for s, ns in out.items()}


def _duration(run_dir) -> float:
    """deploy.yml's client.duration_s (the run's end, for what lasted to it); inf when it does not say."""
    try:
        return float(yaml.safe_load((Path(run_dir) / "deploy.yml").read_text())["client"]["duration_s"])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return float("inf")


def _declared(run_dir):
    """The run's protocol as the registry (`txn-server --list-modes --json`) declares it; None when the registry
    or the run does not say."""
    try:
        mode = yaml.safe_load((Path(run_dir) / "deploy.yml").read_text())["mode"]
        return protocols.load().get(mode)
    except Exception:  # noqa: BLE001 - no deploy file, no built registry, an unknown mode
        return None


def declared_guarantee(run_dir) -> str:
    """The guarantee the run's protocol declares in the registry; strict_serializable (the strictest) when the
    registry or the run does not say."""
    return getattr(_declared(run_dir), "guarantee", "") or "strict_serializable"


def _classes(found: list, realtime: Counter, serial: Counter) -> dict:
    """check.json's anomaly_classes: the anomaly check's counts (append), the real-time check's cycle classes,
    and the serializability check's shortest cycle's class when the anomaly check inferred no cycle."""
    out = dict(found[-1].counts) if found else {}
    for cls, n in realtime.items():
        out[cls] = out.get(cls, 0) + n
    if not any(c in out for c in listappend.CYCLE_CLASSES):
        out.update(serial)
    return out


def check_run(run_dir, write: bool = True, replay_bin=None, realtime_margin_us: int | None = None) -> dict:
    """Check a run folder; returns {'verdict', 'exit_code', 'violations', 'checks', ...} and writes check.json.
    realtime_margin_us: the clocks' uncertainty for the real-time check (default: 0 on one kernel, else
    histories.WALL_MARGIN_US)."""
    t0 = time.monotonic()
    rep = _Report()
    found = []   # the anomaly check's listappend.Anomalies, when it ran
    data, classes, serial = None, Counter(), Counter()   # cycle classes: real-time check's, serializability's
    try:
        crashed = durability.crashed_replicas(run_dir)
        dumps = load_dumps(run_dir, crashed)
        replicas = [d for d in dumps if d.get("kind") != "manager"]
        rep.run("replicas", lambda: check_replicas(replicas))
        rep.run("workload", lambda: check_workload(replicas))
        unfinished = unfinished_transactions(run_dir)
        junk: list[str] = []
        rep.run("run", lambda: check_run_health(run_dir, dumps, durability.lost_processes(run_dir), unfinished,
                                                junk))
        try:
            data = histories.load_run(run_dir, replicas, replay_bin)
        except Skip as s:
            for name in CHECKS[3:]:
                rep.skip(name, str(s))
        else:
            rep.run("order", lambda: histories.check_order(data))
            rep.run("atomicity", lambda: histories.check_atomicity(data))
            rep.stats["durability"] = {}
            rep.run("durability", lambda: durability.check(data, replicas, _deployed(run_dir, replicas), crashed,
                                                           rep.stats["durability"],
                                                           durability.restarted_replicas(run_dir),
                                                           getattr(_declared(run_dir), "reports_copies", False)))
            adj, pre = histories.conflict_graph(data)
            rep.stats.update({"histories": len(data.histories),
                         "executions": sum(len(h) for h in data.histories.values()),
                         "transactions": len(data.txns), "given_up": len(data.given_up),
                         "abandoned": len(data.abandoned),
                         "abandoned_executed": len(histories.took_effect(data)) - sum(t.committed for t in
                                                                                      data.txns.values()),
                         "conflict_edges": sum(len(v) for v in adj.values())})
            rep.run("serializability", lambda: histories.check_serializability(data, adj, pre, serial)[0])
            guarantee = declared_guarantee(run_dir)
            rep.run("realtime", lambda: histories.check_realtime(data, adj, realtime_margin_us, guarantee, classes))
            rep.run("protocol_order", lambda: histories.check_protocol_order(data))

            def anomalies():
                found.append(listappend.analyze(data, replicas, realtime_margin_us,
                                                guarantee == "strict_serializable"))
                return found[-1].lines
            rep.run("anomalies", anomalies)
            if found:
                rep.stats["dependency_edges"] = found[-1].edges
            rep.run("replay", lambda: histories.check_replay(data, adj, Path(run_dir) / "deploy.yml", replicas,
                                                             replay_bin))
        n = len(rep.violations)
        exhausted = unfinished.exhausted
        notes = [f"{len(exhausted)} transaction(s) given up after the retry limit (aborted on every attempt; "
                 f"they executed nowhere: atomicity checks it): {_listed(exhausted)}"] if exhausted else []
        if unfinished.overloaded():
            notes.append(unfinished.overloaded())
        notes += junk
        try:   # a shard without a live, running majority for a while: a note, and the seconds in stats
            gaps = durability.majority_gaps(run_dir, _deployed(run_dir, replicas), _duration(run_dir))
        except Unreadable:
            gaps = []
        notes += [durability.gap_note(g) for g in gaps]
        rep.stats["no_majority_s"] = round(sum(g["seconds"] for g in gaps), 3)
        if gaps:
            rep.stats["no_majority"] = gaps
        res = {"verdict": "CONSISTENT" if not n else f"INCONSISTENT ({n} violations)", "exit_code": 1 if n else 0,
               "violations": rep.violations, "notes": notes, "given_up_after_retries": len(exhausted),
               "abandoned_at_drain": len(unfinished.abandoned), "overloaded": bool(unfinished.overloaded()),
               "checks": rep.checks, "dumps": len(replicas),
               "shards": len({d["shard"] for d in replicas}), "workload": replicas[0]["workload"],
               "stats": rep.stats, "anomaly_classes": _classes(found, classes, serial),
               "clock": {"kind": data.clock, "margin_us": histories.realtime_margin(data, realtime_margin_us)}
               if data is not None else {}}
    except Unreadable as e:
        res = {"verdict": "UNREADABLE", "exit_code": 2, "violations": rep.violations, "checks": rep.checks,
               "error": str(e)}
    res["elapsed_s"] = round(time.monotonic() - t0, 3)
    if write and Path(run_dir).is_dir():
        files.write_text(Path(run_dir, "check.json"), json.dumps(res, indent=2) + "\n")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.analysis.checker", description="Check a run folder.")
    ap.add_argument("run_dir")
    ap.add_argument("--realtime-margin-ms", type=float, default=None,
                    help="the clocks' uncertainty for the real-time order (default 0 on one kernel, "
                         f"{histories.WALL_MARGIN_US / 1000:g} across hosts)")
    try:
        args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if args.realtime_margin_ms is not None and not 0 <= args.realtime_margin_ms <= 60_000:
        print(f"checker: error: --realtime-margin-ms {args.realtime_margin_ms:g}: must be in [0, 60000]",
              file=sys.stderr)
        return 2
    argv = [args.run_dir]
    margin = None if args.realtime_margin_ms is None else int(round(args.realtime_margin_ms * 1000))
    res = check_run(argv[0], realtime_margin_us=margin)
    if (Path(argv[0]) / validate.MANIFEST).is_file():  # a run folder: the new verdict is bound to it as the run's was
        why = validate.rebind_check(argv[0])
        if why:
            print(f"checker: note: check.json is not bound to the run ({why}): sweeps run it again, figures "
                  "skip it", file=sys.stderr)
    for line in res["violations"]:
        print(line)
    for line in res.get("notes", []):
        print("[note] " + line)
    for name, c in res.get("checks", {}).items():
        print(f"  {name:16s} {c['verdict']}" + (f": {c['reason']}" if c["verdict"] == "skipped" else ""))
    if res["exit_code"] == 2:
        print(f"checker: error: {res['error']}", file=sys.stderr)
    print(res["verdict"])
    return res["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
