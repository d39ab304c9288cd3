"""The checker's order checks on a real local run (real txn-server/txn-client/txn-replay), copied and modified:
planted faults must be caught with their reason printed. Plus unit tests of the graph and file readers."""
import csv
import gzip
import json
from collections import Counter
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.analysis import checker, histories
from testbed.core import deploy
from testbed.runs.local import LocalRunner

from conftest import REPO

BUILD = Path(os.environ.get("TXN_BUILD_DIR", REPO / "build"))
BINARIES = [BUILD / b for b in ("txn-server", "txn-client", "txn-replay")]
needs_build = pytest.mark.skipif(not all(os.access(b, os.X_OK) for b in BINARIES),
                                 reason="build/txn-server, txn-client or txn-replay not built (run `make build`)")


# ---- unit tests: no run needed ------------------------------------------------------------------------------

def test_shortest_cycle_is_found_among_longer_ones():
    # 1 -> 2 -> 3 -> 4 -> 1 (length 4) and 2 -> 5 -> 2 (length 2), plus an acyclic tail 4 -> 6
    adj = {1: {2: (0, "a")}, 2: {3: (0, "b"), 5: (1, "c")}, 3: {4: (0, "d")}, 4: {1: (1, "e"), 6: (0, "f")},
           5: {2: (1, "g")}}
    comps = histories.strongly_connected(adj)
    assert len(comps) == 1 and sorted(comps[0]) == [1, 2, 3, 4, 5]
    cyc = histories.shortest_cycle(adj, comps[0])
    assert sorted(cyc) == [2, 5]
    assert histories.strongly_connected({1: {2: (0, "a")}, 2: {3: (0, "a")}}) == []


def test_conflict_graph_orders_only_conflicting_pieces_and_skips_commutative_ones():
    P = histories.Piece
    txns = {
        1: histories.Txn(1, "c", True, "", {0: P(0, ("x",), ("x",))}, frozenset()),
        2: histories.Txn(2, "c", True, "", {0: P(0, ("y",), ())}, frozenset()),        # no conflict with 1
        3: histories.Txn(3, "c", True, "", {0: P(0, ("x",), ())}, frozenset()),        # reads what 1 wrote
        4: histories.Txn(4, "c", True, "", {0: P(0, (), ("x",)), 1: P(0, (), ("h",))}, frozenset({1})),
        5: histories.Txn(5, "c", True, "", {0: P(0, (), ("h",))}, frozenset({0})),     # commutes
    }
    data = histories.RunData(txns=txns, replicas={0: ["r0", "r1"]},
                             histories={n: [(1, 0, False), (2, 0, False), (5, 0, False), (3, 0, False),
                                            (4, 0, False), (4, 1, True)] for n in ("r0", "r1")})
    adj, pre = histories.conflict_graph(data)
    assert pre == []
    edges = {(u, v) for u, vs in adj.items() for v in vs}
    assert edges == {(1, 3), (1, 4), (3, 4)}
    assert adj[3][4] == (0, "x")
    assert [t.id for t in histories.topological_order(data, adj)] == [1, 2, 3, 4, 5]
    # a replica that ran 3 before 1 contributes the reverse edge: a 2-cycle through shard 0
    data.histories["r1"] = [(3, 0, False), (1, 0, False), (2, 0, False), (5, 0, False), (4, 0, False),
                            (4, 1, True)]
    data._ordered.clear()
    adj, _ = histories.conflict_graph(data)
    v, comps = histories.check_serializability(data, adj, [])
    assert comps and "shortest cycle (2 transactions)" in v[0] and "txn 1 " in v[0] and "txn 3 " in v[0]
    # deferring a piece that does not commute is reported
    data.histories["r0"] = [(1, 0, True)]
    assert "does not commute" in histories.conflict_graph(data)[1][0]


def _rt_data(pieces: dict, history: list, times: dict, sessions=None, clock="monotonic") -> histories.RunData:
    """Shard 0, one replica r0 executing `history` (txn ids, piece 0 each); pieces: txn -> (reads, writes)."""
    P = histories.Piece
    txns = {t: histories.Txn(t, "c", True, "", {0: P(0, *rw)}, frozenset()) for t, rw in pieces.items()}
    return histories.RunData(txns=txns, replicas={0: ["r0"]}, histories={"r0": [(t, 0, False) for t in history]},
                             times=times, sessions=sessions or {}, clock=clock, clocks={"c": "boot-a"})


def test_realtime_flags_an_execution_before_a_conflicting_transaction_answered_before_it_was_issued():
    x, y = ("x",), ("y",)
    # 2 executed before 1 on shard 0, although 1 was answered (at 5 ms) before 2 was issued (at 20 ms)
    data = _rt_data({1: (x, x), 2: (x, x), 3: (x, x), 4: (y, y)}, [2, 1, 3, 4],
                    {1: (1_000, 5_000), 2: (20_000, 30_000), 3: (25_000, 40_000), 4: (0, 1_000)})
    adj, _ = histories.conflict_graph(data)
    assert histories.check_serializability(data, adj, [])[0] == []   # serializable: 2, 1, 3
    counts = Counter()
    v = histories.check_realtime(data, adj, counts=counts)
    assert v == ["G0-realtime: txn 1 (?, c) -realtime (answered at 5.000 ms, 15.000 ms before the next was issued)-> "
                 "txn 2 (?, c) -ww [shard 0, x]-> txn 1"], v
    assert counts == {"G0-realtime": 1}
    # overlapping in time (2 issued before 1's answer): either order is fine; a margin widens the overlap
    data.times[2] = (4_999, 30_000)
    assert histories.check_realtime(data, adj) == []
    data.times[2] = (5_001, 30_000)
    assert len(histories.check_realtime(data, adj)) == 1
    assert histories.check_realtime(data, adj, margin_us=2) == []
    data.times[2] = (20_000, 30_000)
    data.histories["r0"] = [(t, 0, False) for t in (1, 2, 3)]
    data._ordered.clear()
    assert histories.check_realtime(data, histories.conflict_graph(data)[0]) == []
    # not held to it: a protocol that declares serializability only; no common clock; a cycle already
    assert histories.check_realtime(data, adj, guarantee="serializable") == []   # session order only
    with pytest.raises(histories.Skip, match="declares linearizable"):
        histories.check_realtime(data, adj, guarantee="linearizable")
    data.clock = ""
    with pytest.raises(histories.Skip, match="no common clock"):
        histories.check_realtime(data, adj)
    data.clock = "monotonic"
    with pytest.raises(histories.Skip, match="cycle already"):
        histories.check_realtime(data, {1: {2: (0, "x")}, 2: {1: (0, "x")}})


def test_realtime_finds_inversions_reached_only_through_a_chain_of_conflicts():
    """1 answered before 3 was issued; they share no key, but 3 -> 2 (on y) and 2 -> 1 (on x) put 3 first:
    a one-edge-deep check sees nothing, the cycle search finds it (G2: both conflicts are reads before writes)."""
    x, y = ("x",), ("y",)
    data = _rt_data({1: ((), x), 2: (x, y), 3: (y, ())}, [3, 2, 1],
                    {1: (0, 1_000), 2: (500, 9_000), 3: (2_000, 3_000)})
    adj, _ = histories.conflict_graph(data)
    assert 3 not in adj.get(1, {}) and 1 not in adj.get(3, {})
    counts = Counter()
    v = histories.check_realtime(data, adj, counts=counts)
    assert v == ["G2-realtime: txn 1 (?, c) -realtime (answered at 1.000 ms, 1.000 ms before the next was issued)-> "
                 "txn 3 (?, c) -rw [shard 0, y]-> txn 2 (?, c) -rw [shard 0, x]-> txn 1 (one component of 3 "
                 "transactions)"], v
    assert counts == {"G2-realtime": 1}


def test_session_order_is_checked_where_clocks_cannot_order_two_transactions():
    """Across hosts (wall clocks, a 10 ms margin) real time cannot order two transactions 1 ms apart, but one
    coordinator issued them one after the other: its session order still does."""
    x = ("x",)
    data = _rt_data({1: (x, x), 2: (x, x)}, [2, 1], {1: (0, 1_000), 2: (2_000, 3_000)},
                    sessions={1: ("c", 0), 2: ("c", 0)}, clock="wall")
    adj, _ = histories.conflict_graph(data)
    counts = Counter()
    v = histories.check_realtime(data, adj, counts=counts)
    assert v == ["G0-process: txn 1 (?, c) -so [c session 0]-> txn 2 (?, c) -ww [shard 0, x]-> txn 1"], v
    assert histories.check_realtime(data, adj, guarantee="serializable") == v   # held to session order too
    data.clock = ""
    assert histories.check_realtime(data, adj, guarantee="serializable") == v   # which needs no clock
    data.clock = "wall"
    data.sessions[2] = ("c", 1)   # another coordinator: within the margin, either order is fine
    assert histories.check_realtime(data, adj) == []
    assert histories.realtime_margin(data) == histories.WALL_MARGIN_US


def test_the_clock_is_the_kernels_monotonic_one_else_the_wall_clock():
    data = histories.RunData(clocks={"a": "k1", "b": "k1"})
    histories._common_clock(data, {"a": (100, 5_000), "b": (200, 6_000)}, {"a": {1: (10, 20)}, "b": {2: (1, 2)}})
    assert data.clock == "monotonic" and data.times == {1: (110, 120), 2: (201, 202)}
    data = histories.RunData(clocks={"a": "k1", "b": "k2"})
    histories._common_clock(data, {"a": (100, 5_000), "b": (200, 6_000)}, {"a": {1: (10, 20)}, "b": {2: (1, 2)}})
    assert data.clock == "wall" and data.times == {1: (5_010, 5_020), 2: (6_001, 6_002)}
    data = histories.RunData(clocks={"a": "k1", "b": "k2"})
    histories._common_clock(data, {"a": (100, 5_000), "b": (200, None)}, {"a": {1: (10, 20)}, "b": {2: (1, 2)}})
    assert data.clock == "" and data.times == {}


def test_protocol_order_holds_conflicting_pieces_to_their_declared_keys():
    P = histories.Piece
    pieces = {1: ((), ("x",)), 2: (("x",), ()), 3: (("x",), ()), 4: ((), ("x",)), 5: ((), ("z",))}
    txns = {t: histories.Txn(t, "c", True, "", {0: P(0, *rw)}, frozenset()) for t, rw in pieces.items()}
    data = histories.RunData(txns=txns, replicas={0: ["r0"]},
                             histories={"r0": [(t, 0, False) for t in (1, 3, 2, 4, 5)]},
                             order_keys={"r0": {0: (0, 1, 0), 1: (0, 3, 0), 2: (0, 2, 0), 3: (0, 4, 0),
                                                4: (0, 0, 9)}})
    # reads 3 and 2 out of key order (reads commute), z unrelated: in order
    assert histories.check_protocol_order(data) == []
    data.order_keys["r0"][3] = (0, 2, 5)   # the write 4 ran after the read 3, which the protocol ordered after it
    v = histories.check_protocol_order(data)
    assert v == ["r0: txn 4 (?, c) piece 0 (key 0:2.5) ran after txn 3 (?, c) piece 0 (key 0:3.0), a conflicting "
                 "piece the protocol ordered after it [x]"], v
    data.order_keys["r0"][3] = (1, 2, 5)   # another domain: not compared
    assert histories.check_protocol_order(data) == []
    data.order_keys["r0"][3] = (0, 2, 5)
    txns[4].commutative = frozenset({0})   # a commutative piece's place does not matter
    data._commutative = None
    assert histories.check_protocol_order(data) == []
    txns[4].commutative = frozenset()
    data._commutative = None
    data.histories["r0"][3] = (4, 0, True)   # nor does a deferred one's
    assert histories.check_protocol_order(data) == []
    data.order_keys = {"r0": {}}
    with pytest.raises(histories.Skip, match="no history carries"):
        histories.check_protocol_order(data)


def test_protocol_order_holds_conflicting_pieces_to_their_declared_dependencies():
    P = histories.Piece
    # 1 writes x; 2 and 3 read it; 4 writes it again; 5 writes z; 6 (another shard's replica r1) writes y
    pieces = {1: ((), ("x",)), 2: (("x",), ()), 3: (("x",), ()), 4: ((), ("x",)), 5: ((), ("z",)), 6: ((), ("y",))}
    txns = {t: histories.Txn(t, "c", True, "", {0: P(0, *rw)}, frozenset()) for t, rw in pieces.items()}
    deps = {1: frozenset(), 2: frozenset({1}), 3: frozenset({1}), 4: frozenset({2, 3}), 5: frozenset()}
    data = histories.RunData(txns=txns, replicas={0: ["r0"], 1: ["r1"]},
                             histories={"r0": [(t, 0, False) for t in (1, 3, 2, 4, 5)], "r1": [(6, 0, False)]},
                             deps={"r0": deps, "r1": {6: frozenset()}})
    # the reads in either order (they commute); 4 reaches 1 through them; 5 conflicts with nothing
    assert histories.check_protocol_order(data) == []
    deps[4] = frozenset({2})   # the write 4 does not depend on the read 3 that ran before it
    assert histories.check_protocol_order(data) == [
        "r0: txn 3 (?, c) ran before txn 4 (?, c) piece 0, which conflicts with it on x: the declared dependencies "
        "leave the two unordered"]
    deps[4] = frozenset({2, 6})   # through another shard's transaction, declared at its replica
    data.deps["r1"][6] = frozenset({3})
    assert histories.check_protocol_order(data) == []
    deps[4] = frozenset({2, 3})
    data.histories["r0"] = [(t, 0, False) for t in (2, 1, 3, 4, 5)]   # the read 2 before the write it depends on
    assert histories.check_protocol_order(data) == [
        "r0: txn 2 (?, c) ran before txn 1 (?, c) piece 0, which conflicts with it on x: against the declared "
        "dependencies (the earlier depends on the later)",
        "r0: executed txn 2 (?, c) before txn 1 (?, c), a dependency it declared (the protocol's decision), which "
        "does not depend on it"]
    data.histories["r0"][0] = (2, 0, True)   # a deferred piece's place does not matter
    assert histories.check_protocol_order(data) == []
    data.histories["r0"][0] = (2, 0, False)
    del deps[2]   # nor does that of a transaction without declared dependencies
    assert histories.check_protocol_order(data) == []
    data.deps = {"r0": {}, "r1": {}}
    with pytest.raises(histories.Skip, match="no history carries"):
        histories.check_protocol_order(data)


def test_protocol_order_runs_every_declared_dependency_first_even_without_a_shared_key():
    P = histories.Piece
    pieces = {1: ((), ("x",)), 2: ((), ("y",)), 3: ((), ("z",))}
    txns = {t: histories.Txn(t, "c", True, "", {0: P(0, *rw)}, frozenset()) for t, rw in pieces.items()}
    deps = {1: frozenset(), 2: frozenset({1, 9}), 3: frozenset()}   # 9 never ran here: nothing to hold 2 to
    data = histories.RunData(txns=txns, replicas={0: ["r0"]}, histories={"r0": [(t, 0, False) for t in (1, 2, 3)]},
                             deps={"r0": deps})
    assert histories.check_protocol_order(data) == []
    deps[2] = frozenset({1, 3})   # 2 applied before 3, which its decision says it depends on (a Commit on arrival)
    assert histories.check_protocol_order(data) == [
        "r0: executed txn 2 (?, c) before txn 3 (?, c), a dependency it declared (the protocol's decision), which "
        "does not depend on it"]
    deps[3] = frozenset({2})      # a cycle (Janus runs a component in an order of its own): not a violation
    assert histories.check_protocol_order(data) == []
    deps[3] = frozenset()
    data.histories["r0"][1] = (2, 0, True)   # a deferred piece's place does not count
    assert histories.check_protocol_order(data) == []


def test_protocol_order_holds_each_decision_to_every_vote():
    P = histories.Piece
    pieces = {1: ((), ("x",)), 2: ((), ("x",)), 3: ((), ("y",))}
    txns = {t: histories.Txn(t, "c", True, "", {0: P(0, *rw)}, frozenset()) for t, rw in pieces.items()}
    run = [(t, 0, False) for t in (1, 2, 3)]
    data = histories.RunData(txns=txns, replicas={0: ["r0", "r1"]}, histories={"r0": run, "r1": list(run)},
                             deps={"r0": {1: frozenset(), 2: frozenset({1}), 3: frozenset()},
                                   "r1": {1: frozenset(), 2: frozenset({1}), 3: frozenset()}},
                             votes={"r0": {2: frozenset({1})}, "r1": {2: frozenset(), 9: frozenset({1})}})
    # each vote within its decision; 9 never ran at r1: nothing to hold it to
    assert histories.check_protocol_order(data) == []
    data.votes["r1"][3] = frozenset({1, 2})   # a replica whose vote the decision of 3 did not hear
    assert histories.check_protocol_order(data) == [
        "r1: voted for dependencies of txn 3 (?, c) that its decision left out: txn 1 (?, c), txn 2 (?, c)"]
    del data.deps["r1"][3]                    # voted, then ran it without a declared decision
    assert histories.check_protocol_order(data) == [
        "r1: executed txn 3 (?, c), which it voted for, without declaring the dependencies it was decided with"]
    data.deps, data.votes = {}, {"r0": {}, "r1": {3: frozenset()}}   # votes alone are enough for the check to run
    assert histories.check_protocol_order(data) == [
        "r1: executed txn 3 (?, c), which it voted for, without declaring the dependencies it was decided with"]


def test_a_decision_on_fewer_than_every_vote_names_a_majority_and_its_accept_round():
    """Janus after its PreAccept timeout (docs/checker.md, "Votes"): `q=` the replicas whose votes a decision
    counted, `a=` those that accepted it (absent: the fast path)."""
    P = histories.Piece
    txns = {t: histories.Txn(t, "c", True, "", {0: P(0, (), ("x",))}, frozenset()) for t in (1, 2)}
    run = [(1, 0, False), (2, 0, False)]
    nodes = ["s0.0.0", "s0.0.1", "s0.0.2"]
    data = histories.RunData(txns=txns, replicas={0: nodes}, histories={n: list(run) for n in nodes},
                             deps={n: {1: frozenset(), 2: frozenset({1})} for n in nodes},
                             votes={"s0.0.0": {2: frozenset({1})}, "s0.0.1": {2: frozenset({1})},
                                    "s0.0.2": {2: frozenset({1, 7})}},   # its vote holds 7: left out, not counted
                             quorums={n: {2: frozenset({0, 1})} for n in nodes},
                             accepted={n: {2: frozenset({0, 2})} for n in nodes})
    assert histories.check_protocol_order(data) == []
    data.quorums["s0.0.2"][2] = frozenset({0, 2})   # now counted: its vote must be held, and the decisions differ
    assert histories.check_protocol_order(data) == [
        "s0.0.2: voted for dependencies of txn 2 (?, c) that its decision left out: txn 7 (in no client's log)",
        "s0.0.2 and s0.0.0 name different decisions of txn 2 (?, c) on shard 0"]
    for n in nodes:
        data.quorums[n][2] = frozenset({0})          # a minority's votes
    assert "decided on the votes of replicas [0] of shard 0: not a majority of its 3" in \
        histories.check_protocol_order(data)[0]
    for n in nodes:
        data.quorums[n][2], data.accepted[n] = frozenset({0, 1}), {}   # 2 of 3 without an Accept round
    assert "decided on the fast path on the votes of replicas [0, 1] of shard 0: the fast quorum is all 3" in \
        histories.check_protocol_order(data)[0]
    for n in nodes:
        data.accepted[n] = {2: frozenset({1})}       # accepted by one replica only
    assert "with the acceptance of replicas [1] of shard 0: not a majority of its 3" in \
        histories.check_protocol_order(data)[0]
    for n in nodes:
        data.quorums[n][2], data.accepted[n] = frozenset({0, 1, 2}), {}   # the fast path on every vote: held to all
    assert histories.check_protocol_order(data) == [
        "s0.0.2: voted for dependencies of txn 2 (?, c) that its decision left out: txn 7 (in no client's log)"]


def test_a_decision_counts_votes_of_its_epoch_and_a_vote_cast_again_names_each_epoch(tmp_path):
    """A decision counts the votes of one epoch (`qe=`, 0 when not said), and a vote names every epoch it was cast
    in (`e=`): a coordinator that asked a replica again after a seal may count the vote it cast first (found by a
    stress run of Janus: a partition held the first replies until after the replicas had cast the vote again in the
    new epoch; the history named the later epoch only, and the unbroken protocol failed the check)."""
    P = histories.Piece
    txns = {5: histories.Txn(5, "c", True, "", {0: P(0, (), ("x",))}, frozenset())}
    nodes = ["s0.0.0", "s0.0.1", "s0.0.2"]

    def run(e0: str, e1: str, qe: str) -> list:
        data = histories.RunData(txns=txns, replicas={0: nodes})
        for n, e in zip(nodes, (e0, e1, "")):
            f = tmp_path / f"{n}.history.txt"
            vote = "v=0/" + (f" e={e}" if e else "")
            f.write_text(f"# txn-history v1 node={n} shard=0\n5 0 q=0,1 a=0,1{qe} {vote}\n# end events=1 lines=1\n")
            for m in ("deps", "votes", "quorums", "accepted", "vote_marks", "epochs"):
                getattr(data, m)[n] = {}
            data.histories[n] = histories.read_history(f, deps=data.deps[n], votes=data.votes[n],
                                                        quorums=data.quorums[n], accepted=data.accepted[n],
                                                        vote_marks=data.vote_marks[n], epochs=data.epochs[n])
        return [v for v in histories.check_protocol_order(data) if "epoch" in v]

    assert run("", "", "") == []                      # every vote and the decision of epoch 0
    assert run("0,1", "1", " qe=1") == []             # cast in 0, again in 1; the decision counted epoch 1's
    assert run("0,1", "0,1", "") == []                # ... or the first casts, of epoch 0 (the stress run's case)
    assert run("1", "0,1", "") == [                   # cast in epoch 1 only, counted in a decision of epoch 0
        f"{n}: txn 5 (?, c) was decided on shard 0 on votes of epoch 0, counting s0.0.0's, cast in epoch 1"
        for n in nodes]
    assert run("0,1", "", " qe=1")[0].endswith("counting s0.0.1's, cast in epoch 0")
    bad = tmp_path / "bad.history.txt"
    bad.write_text("# txn-history v1 node=b shard=0\n5 0 v=0/ e=1,0\n# end events=1 lines=1\n")
    with pytest.raises(histories.Unreadable, match="bad epochs 'e=1,0'"):
        histories.read_history(bad, votes={}, epochs={})


def test_votes_cast_together_name_each_other():
    """A vote carries how many pieces had executed when it was cast (`v=<n>/<ids>`): transactions that conflict and
    were pending at once at a replica are named by the later one's vote (Janus's pending ones)."""
    P = histories.Piece
    keys = {1: ((), ("x",)), 2: ((), ("x",)), 3: ((), ("x",)), 4: (("x",), ()), 5: (("x",), ())}
    txns = {t: histories.Txn(t, "c", True, "", {0: P(0, *rw)}, frozenset()) for t, rw in keys.items()}
    run = [(t, 0, False) for t in (1, 2, 3, 4, 5)]
    votes = {1: frozenset(), 2: frozenset({1}), 3: frozenset({1, 2}), 4: frozenset({3}), 5: frozenset({3})}
    data = histories.RunData(txns=txns, replicas={0: ["s0.0.1"]}, histories={"s0.0.1": run},
                             deps={"s0.0.1": dict(votes)}, votes={"s0.0.1": dict(votes)},
                             vote_marks={"s0.0.1": {1: 0, 2: 0, 3: 0, 4: 2, 5: 4}})
    # 4 voted once 1 and 2 had executed, 5 once 1-4 had (two reads need not name each other)
    assert histories.check_protocol_order(data) == []
    data.votes["s0.0.1"][3] = frozenset({2})   # the direct predecessor only: 1 was pending too
    assert histories.check_protocol_order(data) == [
        "s0.0.1: txn 1 (?, c) and txn 3 (?, c) conflict on x and neither had executed here when the other voted, yet "
        "neither vote names the other"]
    data.vote_marks["s0.0.1"][3] = 1           # 1 had executed when 3 voted: nothing to name
    assert histories.check_protocol_order(data) == []


def test_history_lines_carry_order_keys(tmp_path):
    f = tmp_path / "r.history.txt"
    f.write_text("# txn-history v1 node=r shard=0\n5 0-2 k=3:17.4\n6 1 d k=0:2.0\n7 0\n# end events=5 lines=3\n")
    keys = {}
    assert histories.read_history(f, 5, keys) == [(5, 0, False), (5, 1, False), (5, 2, False), (6, 1, True),
                                                   (7, 0, False)]
    assert keys == {0: (3, 17, 4), 1: (3, 17, 4), 2: (3, 17, 4), 3: (0, 2, 0)}
    f.write_text("# txn-history v1 node=r shard=0\n5 0 k=3:x.4\n# end events=1 lines=1\n")
    with pytest.raises(histories.Unreadable, match="bad order key"):
        histories.read_history(f)
    # declared dependencies, on a transaction's first line (none: "p=")
    f.write_text("# txn-history v1 node=r shard=0\n5 0 k=0:5.0 p=3,4\n6 0 d p=\n5 1 k=0:5.0\n# end events=3 lines=3\n")
    keys, deps = {}, {}
    assert histories.read_history(f, 3, keys, deps) == [(5, 0, False), (6, 0, True), (5, 1, False)]
    assert deps == {5: frozenset({3, 4}), 6: frozenset()} and keys == {0: (0, 5, 0), 2: (0, 5, 0)}
    f.write_text("# txn-history v1 node=r shard=0\n5 0 p=3,x\n# end events=1 lines=1\n")
    with pytest.raises(histories.Unreadable, match="bad dependency list"):
        histories.read_history(f)
    # a replica's vote, before the dependencies it was decided with
    f.write_text("# txn-history v1 node=r shard=0\n5 0 k=0:5.0 v=3 p=3,4\n6 0 v=\n# end events=2 lines=2\n")
    deps, votes = {}, {}
    assert histories.read_history(f, 2, None, deps, votes) == [(5, 0, False), (6, 0, False)]
    assert deps == {5: frozenset({3, 4})} and votes == {5: frozenset({3}), 6: frozenset()}
    # the replicas whose votes the decision counted and those that accepted it, before the vote
    f.write_text("# txn-history v1 node=r shard=0\n5 0 q=0,2 a=0,1 v=7/3 p=3\n6 0 q=0,1,2 v=\n# end events=2 lines=2\n")
    quorums, accepted, votes, marks = {}, {}, {}, {}
    histories.read_history(f, 2, None, None, votes, quorums, accepted, marks)
    assert quorums == {5: frozenset({0, 2}), 6: frozenset({0, 1, 2})} and accepted == {5: frozenset({0, 1})}
    assert votes == {5: frozenset({3}), 6: frozenset()} and marks == {5: 7}
    for bad, what in (("5 0 v=3,y", "bad vote"), ("5 0 p=3 v=3", "expected"), ("5 0 a=1 v=3", "'a=' without 'q='"),
                      ("5 0 v=3 q=1", "expected"), ("5 0 v=x/3", "bad vote")):   # v= after p=, q= after v=: not the format
        f.write_text(f"# txn-history v1 node=r shard=0\n{bad}\n# end events=1 lines=1\n")
        with pytest.raises(histories.Unreadable, match=what):
            histories.read_history(f)
    # a declaration line (a streamed history's: it came after its transaction's line went out, or its transaction
    # never executed here): merged with the transaction's own line; none of a transaction without events here
    f.write_text("# txn-history v1 node=r shard=0\n5 0 v=0/3 p=3\n9 = v=4/5\n6 0\n5 = q=0,2 qe=2\n6 = p=5\n"
                 "# end events=2 lines=5\n")
    deps, votes, quorums, marks, epochs = {}, {}, {}, {}, {}
    assert histories.read_history(f, 2, None, deps, votes, quorums, None, marks, epochs) == [(5, 0, False),
                                                                                            (6, 0, False)]
    assert deps == {5: frozenset({3}), 6: frozenset({5})} and votes == {5: frozenset({3})} and marks == {5: 0}
    assert quorums == {5: frozenset({0, 2})} and epochs == {5: (frozenset({0}), 2)}
    for bad in ("5 =", "5 = k=0:1.0 p=3", "x = p=3"):
        f.write_text(f"# txn-history v1 node=r shard=0\n{bad}\n# end events=0 lines=1\n")
        with pytest.raises(histories.Unreadable):
            histories.read_history(f)


def _order_data(r0: list, r1: list) -> histories.RunData:
    """Shard 0 with replicas r0 and r1 executing these transaction ids (piece 0 each): 1 and 2 write x, 3 writes
    z, 4 and 5 read x, 6 in no client's log."""
    P = histories.Piece
    keys = {1: ((), ("x",)), 2: (("x",), ("x",)), 3: ((), ("z",)), 4: (("x",), ()), 5: (("x",), ())}
    txns = {t: histories.Txn(t, "c", True, "", {0: P(0, *k)}, frozenset()) for t, k in keys.items()}
    return histories.RunData(txns=txns, replicas={0: ["r0", "r1"]},
                             histories={"r0": [(t, 0, False) for t in r0], "r1": [(t, 0, False) for t in r1]})


def test_order_check_compares_conflicting_pieces_only():
    # independent transactions interleaved differently: fine (they commute)
    assert histories.check_order(_order_data([1, 3, 2], [3, 1, 2])) == []
    # two reads of x between the same writes, in either order: fine
    assert histories.check_order(_order_data([1, 4, 5, 2], [1, 5, 4, 2])) == []
    # a write/write pair swapped
    v = histories.check_order(_order_data([1, 2, 3], [2, 1, 3]))
    assert v == ["shard 0: r1 executed conflicting pieces in another order than r0 on key x: its access 1 is "
                 "txn 2 (?, c) piece 0 where r0 has txn 1 (?, c) piece 0"], v
    # a read moved past a write
    v = histories.check_order(_order_data([1, 4, 2], [1, 2, 4]))
    assert len(v) == 1 and "on key x: its access 2 is txn 2 (?, c) piece 0 where r0 has reads by txn 4" in v[0], v
    # a piece missing at one replica
    v = histories.check_order(_order_data([1, 2, 3], [1, 2]))
    assert v == ["shard 0: r1 and r0 executed different pieces (1 differ, e.g. txn 3 (?, c) piece 0)"], v
    # pieces no client logged keep their order among themselves
    v = histories.check_order(_order_data([6, 1, 7], [1, 7, 6]))
    assert len(v) == 1 and "in no client's log in another order" in v[0], v
    assert histories.check_order(_order_data([6, 1, 7], [1, 6, 7])) == []


def test_atomicity_sees_missing_duplicated_and_forbidden_executions():
    P = histories.Piece
    t1 = histories.Txn(1, "c0", True, "", {0: P(0, (), ("a",)), 1: P(1, (), ("b",))}, frozenset(), failed=(9,),
                       type_name="payment")
    t2 = histories.Txn(2, "c0", False, "", {0: P(0, (), ("a",))}, frozenset(), type_name="new_order")
    data = histories.RunData(txns={1: t1, 2: t2}, failed_ids={9: t1}, replicas={0: ["a0", "a1"], 1: ["b0", "b1"]},
                             histories={"a0": [(1, 0, False)], "a1": [(1, 0, False), (1, 0, False)],
                                        "b0": [(1, 1, False), (2, 0, False), (9, 0, False), (5, 0, False)],
                                        "b1": []})
    v = histories.check_atomicity(data)
    assert "txn 1 (payment, c0) at a1 (shard 0): pieces [0] executed more than once" in v
    assert "txn 1 (payment, c0) at b1 (shard 1): pieces [1] never executed" in v
    assert "txn 2 (new_order, c0) was given up but executed at b0" in v
    assert "txn 9 (a failed attempt of txn 1 (payment, c0)) did not commit but executed at b0" in v
    assert "txn 5 (in no client's log) executed at b0" in v
    assert len(v) == 5
    data.histories.update(a1=[(1, 0, False)], b0=[(1, 1, False)], b1=[(1, 1, False)])
    assert histories.check_atomicity(data) == []


def test_an_abandoned_transaction_executed_whole_or_nowhere_and_never_in_part():
    """A transaction its client abandoned in flight at the drain has an unknown outcome: executed whole at every
    replica of its shards (it committed; it then takes part in the replay and the anomaly check) or nowhere, never
    in part, and never at a shard it does not touch."""
    P = histories.Piece
    t3 = histories.Txn(3, "c0", False, "", {0: P(0, (), ("a",)), 1: P(1, (), ("b",))}, frozenset(),
                       type_name="payment", abandoned=True)
    t4 = histories.Txn(4, "c0", False, "", {0: P(0, (), ("a",))}, frozenset(), type_name="new_order",
                       abandoned=True)
    whole = {"a0": [(3, 0, False)], "a1": [(3, 0, False)], "b0": [(3, 1, False)], "b1": [(3, 1, False)]}
    data = histories.RunData(txns={3: t3, 4: t4}, replicas={0: ["a0", "a1"], 1: ["b0", "b1"]}, histories=whole)
    assert histories.check_atomicity(data) == []
    assert histories.took_effect(data) == {3}, "executed: it committed; t4 executed nowhere: it did not"
    assert [t.id for t in histories.topological_order(data, {})] == [3], "the replay runs what took effect"
    part = {**whole, "b1": []}
    data = histories.RunData(txns={3: t3, 4: t4}, replicas={0: ["a0", "a1"], 1: ["b0", "b1"]}, histories=part)
    assert histories.check_atomicity(data) == [
        "txn 3 (payment, c0) (abandoned at the drain, executed elsewhere) at b1 (shard 1): pieces [1] never executed"]
    data = histories.RunData(txns={3: t3, 4: t4}, replicas={0: ["a0", "a1"], 1: ["b0", "b1"]},
                             histories={"a0": [(4, 0, False)], "a1": [(4, 0, False)], "b0": [(4, 0, False)],
                                        "b1": []})
    assert histories.check_atomicity(data) == ["txn 4 (new_order, c0) executed at b0, but it has no piece on shard 1"]


def test_history_reader_detects_truncation_and_bad_lines(tmp_path):
    f = tmp_path / "h.txt"
    f.write_text("# txn-history v1 node=x shard=0\n5 0-2\n6 1 d\n# end events=4 lines=2\n")
    assert histories.read_history(f, 4) == [(5, 0, False), (5, 1, False), (5, 2, False), (6, 1, True)]
    f.write_text("# txn-history v1 node=x shard=0\n5 0-2\n")
    with pytest.raises(histories.Unreadable, match="truncated"):
        histories.read_history(f, 3)
    f.write_text("# txn-history v1 node=x shard=0\n5 0-2\n# end events=3 lines=1\n")
    with pytest.raises(histories.Unreadable, match="state dump 4"):
        histories.read_history(f, 4)
    f.write_text("# txn-history v1 node=x shard=0\n5 zero\n# end events=1 lines=1\n")
    with pytest.raises(histories.Unreadable, match="bad piece ids"):
        histories.read_history(f, 1)


# ---- a real run, copied and modified -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A short 2 x 2 TPC-C run of Janus (it declares strict serializability: the real-time check holds it to real
    time) with districts drawn per transaction (district conflicts at any load)."""
    return _short_run(tmp_path_factory, "janus", 25500)


@pytest.fixture(scope="module")
def dast_run(tmp_path_factory):
    """The same run of DAST, whose histories carry its timestamps as order keys."""
    return _short_run(tmp_path_factory, "dast", 25600)


def _short_run(tmp_path_factory, mode, port):
    if not all(os.access(b, os.X_OK) for b in BINARIES):
        pytest.skip("binaries not built")
    d = deploy.build_deployment(mode=mode, regions=2, shards=2, concurrency=3, duration=6, warmup=1, cooldown=1,
                                district="uniform", base_port=port)
    return LocalRunner(build_dir=BUILD, progress=False).run(d, "hist", out_root=tmp_path_factory.mktemp("runs"))


def copy_run(real_run, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(real_run.run_dir, dst)
    (dst / "check.json").unlink()
    return dst


def run_cli(run):
    env = {**os.environ, "EDGE_TXN_REPLAY": str(BUILD / "txn-replay")}
    return subprocess.run([sys.executable, "-m", "testbed.analysis.checker", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)


def history_lines(run, node):
    lines = (run / "servers" / f"{node}.history.txt").read_text().splitlines()
    return lines[0], lines[1:-1]


def write_history(run, node, header, body):
    """Rewrite a replica's history consistently (trailer and the dump's count): a replica that really did this."""
    events = sum(len(histories._ids(x.split()[1], "")) for x in body)
    (run / "servers" / f"{node}.history.txt").write_text(
        "\n".join([header, *body, f"# end events={events} lines={len(body)}"]) + "\n")
    dump_file = run / "servers" / f"{node}.state.json"
    dump = json.loads(dump_file.read_text())
    dump["execution_history"].update(events=events, lines=len(body))
    dump_file.write_text(json.dumps(dump))


def load(run):
    replicas = [d for d in checker.load_dumps(run) if d.get("kind") == "replica"]
    return histories.load_run(run, replicas)


@needs_build
@pytest.mark.slow
def test_normal_run_passes_every_check_with_district_conflicts(real_run):
    res = real_run.check
    assert res["verdict"] == "CONSISTENT", res["violations"][:5]
    assert {k: c["verdict"] for k, c in res["checks"].items()} == \
        {k: "skipped" if k == "anomalies" else "pass" for k in checker.CHECKS}
    assert res["checks"]["anomalies"]["reason"] == "the workload is tpcc, not append" and res["anomaly_classes"] == {}
    data = load(real_run.run_dir)
    adj, _ = histories.conflict_graph(data)
    keys = {k for vs in adj.values() for (_, k) in vs.values()}
    assert any(k.startswith("district:") for k in keys), "no district conflict in the run"
    assert len(data.txns) > 200 and all(t.committed for t in data.txns.values())
    assert res["elapsed_s"] < 30


def _conflicting_neighbours(data, header, body):
    """Index i such that history lines i and i+1 hold different transactions whose pieces conflict."""
    def piece_keys(line):
        f = line.split()
        t = data.txns.get(int(f[0]))
        if t is None or "d" in f[2:]:   # a deferred piece
            return None
        ps = [t.pieces[p] for p in histories._ids(f[1], "") if p not in t.commutative]
        return int(f[0]), {k for p in ps for k in p.reads}, {k for p in ps for k in p.writes}
    for i in range(len(body) - 1):
        a, b = piece_keys(body[i]), piece_keys(body[i + 1])
        if a and b and a[0] != b[0] and (a[2] & (b[1] | b[2]) or b[2] & (a[1] | a[2])):
            return i, a[0], b[0]
    raise AssertionError("no two adjacent conflicting transactions in the history")


def _swap_alike(run, nodes, body, i):
    """History lines i + 1 moved just before line i at every replica of `nodes` (the same mistake made alike);
    the checker's CLI on the run."""
    def at(b, line):   # the same transaction's same pieces: the rest of a line (a Janus replica's own vote, v=)
        return [x.split()[:2] for x in b].index(line.split()[:2])   # may differ from one replica to the next
    for node in nodes:
        h, b = history_lines(run, node)
        second = b.pop(at(b, body[i + 1]))
        b.insert(at(b, body[i]), second)
        write_history(run, node, h, b)
    return run_cli(run)


@needs_build
@pytest.mark.slow
def test_swapped_conflicting_pair_in_one_replica_is_caught(real_run, tmp_path):
    run = copy_run(real_run, tmp_path)
    node = "s0.1.2"
    header, body = history_lines(run, node)
    i, t1, t2 = _conflicting_neighbours(load(run), header, body)
    body[i], body[i + 1] = body[i + 1], body[i]
    write_history(run, node, header, body)
    p = run_cli(run)
    assert p.returncode == 1, p.stdout + p.stderr
    out = p.stdout
    assert f"[order] shard 1: {node} executed conflicting pieces in another order than s0.1.0 on key " in out, out
    cycle = next(x for x in out.splitlines() if x.startswith("[serializability]"))
    assert "shortest cycle (2 transactions)" in cycle and f"txn {t1} " in cycle and f"txn {t2} " in cycle, cycle
    assert "shard 1" in cycle
    res = json.loads((run / "check.json").read_text())
    assert res["checks"]["order"]["verdict"] == "fail" and res["checks"]["serializability"]["verdict"] == "fail"
    assert res["checks"]["replay"]["verdict"] == "skipped" and "cycle" in res["checks"]["replay"]["reason"]


@needs_build
@pytest.mark.slow
def test_a_pair_swapped_alike_at_every_replica_against_real_time_is_caught(real_run, tmp_path):
    """The same mistake at every replica of a shard (the replicas agree, so `order` passes): a transaction whose
    client was answered before the other was issued now executes after it."""
    run = copy_run(real_run, tmp_path)
    data = load(run)
    nodes = sorted(data.replicas[1])
    header, body = history_lines(run, nodes[0])
    for i in range(len(body) - 1):   # adjacent, conflicting, and the first answered before the second was issued
        try:
            j, t1, t2 = _conflicting_neighbours(data, header, body[i:i + 2])
        except AssertionError:
            continue
        if data.times[t1][1] < data.times[t2][0]:
            break
    else:
        pytest.fail("no adjacent conflicting pair ordered in real time on shard 1")
    p = _swap_alike(run, nodes, body, i)
    assert p.returncode == 1, p.stdout + p.stderr
    res = json.loads((run / "check.json").read_text())
    assert res["checks"]["order"]["verdict"] == "pass"
    assert res["checks"]["realtime"]["verdict"] == "fail", res["checks"]
    line = next(x for x in p.stdout.splitlines() if x.startswith("[realtime]"))
    # closed by real time, or by the session when one coordinator ran both (the more specific, found first)
    assert line.startswith("[realtime] G") and ("-realtime: " in line or "-process: " in line), line
    assert f"txn {t1} " in line and f"txn {t2} " in line and "[shard 1, " in line, line
    assert "-realtime (answered at " in line or "-so [" in line, line
    assert any(k.endswith(("-realtime", "-process")) for k in res["anomaly_classes"]), res["anomaly_classes"]


@needs_build
@pytest.mark.slow
def test_a_pair_swapped_alike_at_every_replica_against_the_protocols_timestamps_is_caught(dast_run, tmp_path):
    """DAST (serializable only: real time is not held against it) with two adjacent conflicting transactions run
    in the other order at every replica of a shard, their keys kept: (f) sees the timestamps out of order."""
    assert dast_run.check["verdict"] == "CONSISTENT", dast_run.check["violations"][:5]
    assert dast_run.check["checks"]["protocol_order"]["verdict"] == "pass"
    run = copy_run(dast_run, tmp_path)
    data = load(run)
    nodes = sorted(data.replicas[1])
    header, body = history_lines(run, nodes[0])
    i, t1, t2 = _conflicting_neighbours(data, header, body)
    p = _swap_alike(run, nodes, body, i)
    assert p.returncode == 1, p.stdout + p.stderr
    res = json.loads((run / "check.json").read_text())
    assert res["checks"]["order"]["verdict"] == "pass" and res["checks"]["protocol_order"]["verdict"] == "fail"
    line = next(x for x in p.stdout.splitlines() if x.startswith("[protocol_order]"))
    assert f"txn {t1} " in line and f"txn {t2} " in line and "the protocol ordered after it" in line, line


@needs_build
@pytest.mark.slow
def test_transaction_missing_at_one_shard_is_caught(real_run, tmp_path):
    run = copy_run(real_run, tmp_path)
    node = "s1.0.1"
    header, body = history_lines(run, node)
    data = load(run)
    k = next(i for i, x in enumerate(body)
             if "d" not in x.split()[2:] and data.txns.get(int(x.split()[0]))
             and len(data.txns[int(x.split()[0])].shards()) > 1)
    txn = int(body[k].split()[0])
    body = [x for x in body if int(x.split()[0]) != txn]
    write_history(run, node, header, body)
    p = run_cli(run)
    assert p.returncode == 1, p.stdout + p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("[atomicity]"))
    assert f"txn {txn} " in line and f"at {node} (shard 2)" in line and "never executed" in line, line
    res = json.loads((run / "check.json").read_text())
    assert res["checks"]["atomicity"]["verdict"] == "fail" and res["checks"]["order"]["verdict"] == "fail"


@needs_build
@pytest.mark.slow
def test_wrong_output_in_a_client_record_is_caught(real_run, tmp_path):
    run = copy_run(real_run, tmp_path)
    f = run / "clients" / "c1.1.0.records.csv"
    rows = list(csv.DictReader(f.open()))
    row = next(r for r in rows if r["status"] == "committed" and r["type_name"] == "new_order")
    row["outputs"] = "0123456789abcdef"
    with f.open("w", newline="") as out:
        w = csv.DictWriter(out, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    p = run_cli(run)
    assert p.returncode == 1, p.stdout + p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("[replay]"))
    assert f"txn {row['txn_id']} (new_order, c1.1.0)" in line and "0123456789abcdef" in line, line
    res = json.loads((run / "check.json").read_text())
    assert [k for k, c in res["checks"].items() if c["verdict"] == "fail"] == ["replay"]


@needs_build
@pytest.mark.slow
def test_run_health_and_truncation(dast_run, tmp_path):
    run = copy_run(dast_run, tmp_path)   # DAST: its region managers (m0, m1) write dumps too
    dump_file = run / "servers" / "m1.state.json"
    dump = json.loads(dump_file.read_text())
    dump["process"].update(dropped_messages=3, drain_timed_out=True)
    dump_file.write_text(json.dumps(dump))
    p = run_cli(run)
    assert p.returncode == 1
    assert "[run] m1 (process shard1.0): dropped 3 message(s) to servers that were never lost" in p.stdout
    assert "[run] m1 (process shard1.0): still busy when its 10 s drain ran out" in p.stdout
    # a history cut short: nothing can be concluded
    h = run / "servers" / "s0.0.0.history.txt"
    h.write_text("\n".join(h.read_text().splitlines()[:-3]) + "\n")
    p = run_cli(run)
    assert p.returncode == 2 and "s0.0.0.history.txt: truncated" in p.stderr and "UNREADABLE" in p.stdout


@needs_build
@pytest.mark.slow
def test_a_cut_or_corrupt_transaction_log_is_unreadable(real_run, tmp_path):
    """The binary transaction log (src/core/txn_log.h): read whole through txn-replay --dump; cut short anywhere, or
    with a damaged entry, the run is UNREADABLE, never checked on what is left."""
    run = copy_run(real_run, tmp_path)
    log = sorted((run / "clients").glob("*.txns.pb.gz"))[0]
    whole = log.read_bytes()
    entries = histories.read_txn_log(log, "c")
    assert len(entries) > 50 and all(t.pieces for t in entries)
    dump = subprocess.run([str(BUILD / "txn-replay"), "--dump", str(log)], capture_output=True, text=True)
    assert dump.returncode == 0 and json.loads(dump.stdout.splitlines()[0])["txn"]["txn_id"] == str(entries[0].id)
    log.write_bytes(whole[:len(whole) // 2])        # mid-file: a gzip stream without its end
    with pytest.raises(histories.Unreadable, match=log.name):
        histories.read_txn_log(log, "c")
    log.write_bytes(whole[:-8])                     # the gzip trailer (CRC, length) missing: unverified
    with pytest.raises(histories.Unreadable, match=log.name):
        histories.read_txn_log(log, "c")
    raw = gzip.decompress(whole)
    log.write_bytes(gzip.compress(raw[:len(raw) - 3]))   # a whole gzip stream, the last entry cut short
    with pytest.raises(histories.Unreadable, match="entry"):
        histories.read_txn_log(log, "c")
    log.write_bytes(gzip.compress(b"\x02\xff\xff" + raw))   # an entry of two bytes that are no message
    with pytest.raises(histories.Unreadable, match="entry 1"):
        histories.read_txn_log(log, "c")
    log.write_bytes(whole)
    p = run_cli(run)
    assert p.returncode == 0 and "CONSISTENT" in p.stdout
    log.write_bytes(whole[:len(whole) // 2])
    p = run_cli(run)
    assert p.returncode == 2 and log.name in p.stderr and "UNREADABLE" in p.stdout
