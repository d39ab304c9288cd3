"""The durability check (docs/checker.md): nothing a client saw committed is lost.

A replica whose process died mid-run (faults.jsonl: a `crash` the nemesis applied, or a `lost` process the runner saw
gone, whatever killed it) left no state dump and no history: its memory died with it, and the checker holds it to
nothing. One restarted after its death (healed by a restart) is live again: a new process that took over the state of
a live replica of its shard (its `caught_up` event) and wrote a dump and history at the end, held to everything a live
replica is (the replicas check compares its final state with its peers', the atomicity check its history with
theirs); it must have caught up. Every other replica is live to the end, and for
each transaction its client saw committed, every live replica of every shard it touched must hold it:
  - in its history (every piece of it there ran; the atomicity check says which pieces and how often);
  - in its final state, where the state says so item by item (append: every value the transaction appended is in
    its list); elsewhere the replay check rebuilds every live replica's digest from the committed transactions.
A shard must keep a majority of its replicas live (what its protocols need to have decided anything), and a replica
recorded as crashed must not have written a dump (the kill failed, or the folder was doctored).

Counts in check.json's stats.durability: committed transactions, (transaction, live replica) copies checked, lost
transactions, the crashed replicas with their time of death (t_s since load start), the restarted ones with their
times of death, restart and catch-up and the events they executed again; `reply_copies`, for a protocol that
reports them, how many (transaction, shard) commits were answered on how many copies.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from testbed.analysis import listappend
from testbed.analysis.histories import MAX_LISTED, RunData, Unreadable
from testbed.core.faults import node_of_process

FAULTS_JSONL = "faults.jsonl"


def _crash_events(run_dir) -> list[dict]:
    """faults.jsonl's crash events (apply, heal by a restart, caught_up) and losses (a process seen gone mid-run,
    whatever killed it), in time order; [] without a faults.jsonl."""
    f = Path(run_dir) / FAULTS_JSONL
    if not f.is_file():
        return []
    out = []
    try:
        lines = f.read_text().splitlines()
    except OSError as e:
        raise Unreadable(f"{FAULTS_JSONL}: {e}") from e
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
            if ev.get("kind") in ("crash", "loss"):
                ev["nodes"] = [str(n) for n in (ev.get("nodes") or [ev["node"]])]
                ev["t_s"] = float(ev["t_s"]) if ev.get("t_s") is not None else None
                out.append(ev)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise Unreadable(f"{FAULTS_JSONL} line {i}: {type(e).__name__} {e}") from e
    return sorted(out, key=lambda ev: ev["t_s"] if ev["t_s"] is not None else 0.0)


def _down(ev: dict) -> bool:
    """The event takes its nodes down: a crash applied (its kill sent), or a loss seen."""
    return ev.get("ok") and ((ev.get("kind") == "crash" and ev.get("event") == "apply") or ev.get("event") == "lost")


def crashed_replicas(run_dir) -> dict[str, float]:
    """node -> t_s of its loss, for every node whose process died mid-run (faults.jsonl: a crash applied, or a loss
    seen, whatever killed it) and was not started again after it (restarted_replicas); {} without a faults.jsonl."""
    out: dict[str, float] = {}
    for ev in _crash_events(run_dir):
        for n in ev["nodes"]:
            if _down(ev):
                out.setdefault(n, ev["t_s"])
            elif ev.get("event") == "heal" and ev.get("ok") and ev.get("action") == "restart":
                out.pop(n, None)
    return out


def lost_processes(run_dir) -> set[str]:
    """The engine processes (the deployment's names: a restarted node's new process counts as its own) faults.jsonl
    records gone at any time: killed by a crash fault, or seen gone; set() without a faults.jsonl."""
    return {node_of_process(str(ev.get("process") or n)) for ev in _crash_events(run_dir) if _down(ev)
            for n in ev["nodes"]}


def restarted_replicas(run_dir, events: list[dict] | None = None) -> dict[str, dict]:
    """node -> {crashed_t_s, restarted_t_s, caught_up_t_s (None: never), events, source} for every node that died
    and was started again, and is live at the end (faults.jsonl: down, then healed by a restart, both ok, and not
    down again after)."""
    evs = _crash_events(run_dir) if events is None else events
    down: dict[str, float] = {}
    out: dict[str, dict] = {}
    for ev in evs:
        for n in ev["nodes"]:
            if _down(ev):
                out.pop(n, None)
                down.setdefault(n, ev["t_s"])
            elif ev.get("event") == "heal" and ev.get("ok") and ev.get("action") == "restart" and n in down:
                out[n] = {"crashed_t_s": down.pop(n), "restarted_t_s": ev["t_s"], "caught_up_t_s": None,
                          "events": None, "source": None}
            elif ev.get("event") == "caught_up" and n in out and out[n]["caught_up_t_s"] is None:
                out[n].update(caught_up_t_s=ev["t_s"], events=ev.get("events"), source=ev.get("from"))
    return out


def check(data: RunData, dumps: list[dict], deployed: dict[int, list[str]], crashed: dict[str, float],
          stats: dict, restarted: dict[str, dict] | None = None, reports_copies: bool = False) -> list[str]:
    """Violations; fills stats (see the module's doc). deployed: shard -> its replicas' names (deploy.yml);
    restarted: restarted_replicas(); reports_copies: the run's protocol names the copies each commit rests on."""
    v = []
    restarted = restarted or {}
    replicas = {n for names in deployed.values() for n in names}
    crashed = {n: t for n, t in crashed.items() if n in replicas}   # a lost process's clients: not replicas
    by_node0 = {d["node"]: d for d in dumps}
    for node, r in sorted(restarted.items()):
        said = ((by_node0.get(node) or {}).get("counters") or {}).get("restarted")
        if node in by_node0 and not said:
            v.append(f"{node} is recorded restarted at t={r['restarted_t_s']:g}s but its dump is not a restarted "
                     "process's (no `restarted` counter): the restart failed, or the run folder was changed")
        if r["caught_up_t_s"] is None:
            v.append(f"{node}, restarted at t={r['restarted_t_s']:g}s, never caught up: it took over no live "
                     "replica's state (no CAUGHT_UP in its log)")
    live = {s: sorted(data.replicas.get(s, [])) for s in deployed}
    by_node = {d["node"]: d for d in dumps}
    for node, t in sorted(crashed.items()):
        if node in by_node:
            v.append(f"{node} is recorded crashed at t={t:g}s but wrote a state dump (its kill failed, or the run "
                     "folder was changed)")
    for s, names in sorted(deployed.items()):
        if 2 * len(live[s]) <= len(names):
            v.append(f"shard {s} kept {len(live[s])} of its {len(names)} replicas live ("
                     + ", ".join(f"{n} crashed at t={crashed[n]:g}s" if n in crashed else f"{n} without a history"
                                 for n in names if n not in live[s]) + "): no majority holds its transactions")
    executed = {node: {t for t, _, _ in events} for node, events in data.histories.items()}
    append = any(d.get("workload") == "append" for d in dumps)
    appends = _committed_appends(data) if append else {}
    final = {node: {k: set(v) for k, v in (((d.get("append") or {}).get("lists")) or {}).items()}
             for node, d in by_node.items()} if append else {}
    n_shards = len(deployed)
    lost, copies, committed = set(), 0, 0
    reply_copies = defaultdict(int)
    for t in sorted(data.txns.values(), key=lambda x: x.id):
        if not t.committed:
            continue
        committed += 1
        if reports_copies:
            v += _answered_on(t, deployed, reply_copies)
        for s in sorted(t.shards()):
            for node in live.get(s, []):
                copies += 1
                if t.id not in executed.get(node, ()):
                    lost.add(t.id)
                    v.append(f"{t.label()}, committed to its client, is missing from the history of {node} "
                             f"(shard {s}, live): lost")
                    continue
                lists = final.get(node)
                if lists is None:
                    continue
                for key, values in sorted(appends.get(t.id, {}).items()):
                    if int(key[1:]) % n_shards != s:
                        continue
                    gone = [x for x in values if x not in lists.get(key, ())]
                    if gone:
                        lost.add(t.id)
                        v.append(f"{t.label()}, committed to its client, appended {gone} to {key}, missing from "
                                 f"{node}'s final list (shard {s}, live): lost")
    stats.update(committed=committed, copies_checked=copies, lost=len(lost),
                 crashed={n: t for n, t in sorted(crashed.items())})
    if reports_copies:
        stats["reply_copies"] = {str(k): n for k, n in sorted(reply_copies.items())}
    if restarted:
        stats["restarted"] = {n: dict(r, caught_up_after_s=None if r["caught_up_t_s"] is None
                                      else round(r["caught_up_t_s"] - r["restarted_t_s"], 3))
                              for n, r in sorted(restarted.items())}
    if len(v) > MAX_LISTED:
        v = v[:MAX_LISTED] + [f"... and {len(v) - MAX_LISTED} more"]
    return v


def _answered_on(t, deployed: dict[int, list[str]], counts: dict) -> list[str]:
    """Violations of committed transaction t's reply: each shard it touched named, on a majority of its replicas;
    counts: copies -> (transaction, shard) pairs, added to."""
    v = []
    for s in sorted(t.shards()):
        n = len(deployed.get(s, ())) or 1
        if s not in t.stored:
            v.append(f"{t.label()} was answered committed without naming the replicas of shard {s} that hold it "
                     "(its protocol reports them: ClientReply.stored)")
            continue
        mask = t.stored[s]
        named = [r for r in range(32) if mask >> r & 1]
        counts[len(named)] += 1
        if named and named[-1] >= n:
            v.append(f"{t.label()} was answered committed on replica {named[-1]} of shard {s}, which has {n}")
        elif 2 * len(named) <= n:
            v.append(f"{t.label()} was answered committed on the copies of replicas {named} of shard {s}: not a "
                     f"majority of its {n} (a crash of {'that one' if len(named) == 1 else 'those'} would lose it)")
    return v


def _committed_appends(data: RunData) -> dict:
    """txn -> {key: [values]} of the committed transactions of an append run."""
    appends, *_ = listappend._transactions(data, listappend._Lines())
    return {t: a for t, a in appends.items() if data.txns[t].committed}


def majority_gaps(run_dir, deployed: dict[int, list[str]], end_s: float) -> list[dict]:
    """Every span of the run during which a shard had no majority of its replicas live and running (down: from its
    process's death, a crash applied or a loss seen, to its restart; paused: from a pause's apply to its heal, or the
    run's end `end_s`), from faults.jsonl: [{shard, from_s, to_s, seconds, out: {node: down|paused}}], in time order.
    No protocol can commit a shard's transactions then; a run may still be CONSISTENT, and say so (a note)."""
    f = Path(run_dir) / FAULTS_JSONL
    if not f.is_file():
        return []
    try:
        evs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as e:
        raise Unreadable(f"{FAULTS_JSONL}: {e}") from e
    spans: dict[str, list[list]] = defaultdict(list)   # node -> [[from, to, why], ...]
    opened: dict[tuple[str, str], float] = {}
    for ev in sorted(evs, key=lambda e: e.get("t_s") if isinstance(e.get("t_s"), (int, float)) else 0.0):
        t = ev.get("t_s")
        if not isinstance(t, (int, float)) or not ev.get("ok"):
            continue
        why = "down" if _down(ev) else "paused" if ev.get("kind") == "pause" else None
        for n in ev.get("nodes") or [ev.get("node")]:
            if why == "down" or (why == "paused" and ev.get("event") == "apply"):
                opened.setdefault((n, why), float(t))
            elif ev.get("event") == "heal":
                key = (n, "down" if ev.get("action") == "restart" else "paused")
                if key in opened:
                    spans[n].append([opened.pop(key), float(t), key[1]])
    for (n, why), t in opened.items():
        spans[n].append([t, end_s, why])
    out = []
    for shard, names in sorted(deployed.items()):
        cuts = sorted({x for n in names for a, b, _ in spans.get(n, ()) for x in (a, b) if x <= end_s})
        gap = None
        for a, b in zip(cuts, cuts[1:]):
            mid = (a + b) / 2
            gone = {n: why for n in names for x, y, why in spans.get(n, ()) if x <= mid < y}
            if 2 * (len(names) - len(gone)) > len(names):
                gap = None
                continue
            if gap is not None and gap["to_s"] == a:
                gap["to_s"] = b
                gap["out"].update(gone)
            else:
                gap = {"shard": shard, "from_s": a, "to_s": b, "out": dict(gone)}
                out.append(gap)
    for g in out:
        g["seconds"] = round(g["to_s"] - g["from_s"], 3)
        g["from_s"], g["to_s"] = round(g["from_s"], 3), round(g["to_s"], 3)
    return sorted(out, key=lambda g: (g["from_s"], g["shard"]))


def gap_note(g: dict) -> str:
    """One line for check.json's notes (and the captions) about a majority_gaps() span."""
    return (f"shard {g['shard']} had no majority of its replicas live and running for {g['seconds']:.2f} s "
            f"(t={g['from_s']:.2f}-{g['to_s']:.2f} s: " + ", ".join(f"{n} {w}" for n, w in sorted(g["out"].items()))
            + "): no protocol could commit its transactions then")


def deployed_replicas(deploy: dict) -> dict[int, list[str]]:
    """Global shard id (region * shards_per_region + the node's `shard`, as the engine numbers them) -> its
    replicas' names, from a deployment file."""
    per_region = int(deploy["shards_per_region"])
    out = defaultdict(list)
    for n in deploy["nodes"]:
        if n.get("kind") == "replica":
            out[int(n["region"]) * per_region + int(n["shard"])].append(n["name"])
    return {s: sorted(ns) for s, ns in out.items()}
