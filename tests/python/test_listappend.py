"""The anomaly check of the append workload (testbed/analysis/listappend.py) on synthetic histories: log entries
written as `txn-replay --dump` prints them (protobuf JSON: pieces with args.ops, committed entries with outputs),
replica dumps with the final lists. An unbroken history passes; each doctored one is caught with its class first
on the line; a 50,000-transaction history is checked in seconds."""
import json
import random
import time

import pytest

from testbed.analysis import checker, durability, histories, listappend

SHARDS = 2   # key l<g> lives on shard g % SHARDS


def entry(tid: int, pieces: list[str], committed=True, outputs=None, failed=()) -> str:
    """A transaction's log line: one piece per ops string, piece i on the shard of its first key."""
    ps = []
    for i, ops in enumerate(pieces):
        keys = [op.split(" ")[1] for op in ops.split(";")]
        p = {"shard": int(keys[0][1:]) % SHARDS, "proc": 1, "args": {"ops": {"s": ops}},
             "read_keys": sorted({op.split(" ")[1] for op in ops.split(";") if op[0] == "r"}),
             "write_keys": sorted({op.split(" ")[1] for op in ops.split(";") if op[0] == "a"})}
        if i:
            p["id"] = i   # proto3 JSON leaves out zero values
        if p["shard"] == 0:
            del p["shard"]
        ps.append(p)
    e = {"txn": {"txn_id": str(tid), "pieces": ps}}
    if committed:
        e["committed"] = True
        e["outputs"] = {k: {"s": v} for k, v in (outputs or {}).items()}
    if failed:
        e["failed_attempts"] = [str(x) for x in failed]
    return json.dumps(e)


def txn(tid, pieces, **kw) -> histories.Txn:
    """A transaction as the checker reads it (client c<tid mod 3>.0.0)."""
    t = histories._parse_entry(entry(tid, pieces, **kw), f"c{tid % 3}.0.0", f"txn {tid}")
    t.type_name = "append"
    return t


def output(values: list, tail: int = 4) -> str:
    m = min(len(values), tail)
    return str(len(values)) + (":" + ",".join(map(str, values[len(values) - m:])) if m else "")


def serial(specs, tail=4):
    """Execute [(tid, [ops per piece], committed)] one after the other: (txns, final lists). A given-up
    transaction's appends are not applied, and it returns nothing."""
    lists, txns = {}, {}
    for tid, pieces, committed in specs:
        outputs = {}
        if committed:
            for pid, ops in enumerate(pieces):
                for i, op in enumerate(ops.split(";")):
                    f = op.split(" ")
                    if f[0] == "a":
                        lists.setdefault(f[1], []).append(int(f[2]))
                    else:
                        outputs[f"r{pid}_{i}"] = output(lists.get(f[1], []), tail)
        txns[tid] = txn(tid, pieces, committed=committed, outputs=outputs)
    return txns, lists


def dumps_of(lists, keys=4):
    """Three replicas per shard, every key l0..l<keys*SHARDS-1> listed (empty ones too)."""
    out = []
    for s in range(SHARDS):
        mine = {f"l{g}": list(lists.get(f"l{g}", [])) for g in range(s, keys * SHARDS, SHARDS)}
        for r in range(3):
            out.append({"node": f"s0.{s}.{r}", "shard": s, "replica": r, "workload": "append", "digest": f"d{s}",
                        "rows": {"lists": len(mine), "elements": sum(map(len, mine.values()))},
                        "append": {"lists": json.loads(json.dumps(mine))}})
    return out


def analyze(txns, lists, **kw):
    data = histories.RunData(txns=txns, given_up=[t for t in txns.values() if not t.committed])
    return listappend.analyze(data, dumps_of(lists, **kw))


def random_specs(n, keys=4, seed=7, given_up=0.0):
    rng = random.Random(seed)
    specs, value = [], 0
    for tid in range(1, n + 1):
        pieces = []
        for s in rng.sample(range(SHARDS), rng.randint(1, SHARDS)):
            ops = []
            for _ in range(rng.randint(1, 4)):
                key = f"l{s + SHARDS * rng.randrange(keys)}"
                if rng.random() < 0.5:
                    ops.append(f"r {key}")
                else:
                    value += 1
                    ops.append(f"a {key} {value * 1000 + rng.randrange(1000)}")
            pieces.append(";".join(ops))
        specs.append((tid, pieces, rng.random() >= given_up))
    return specs


def only(res, cls):
    """The lines of one class, checking that no other class was found."""
    assert set(res.counts) == {cls}, res.lines
    return [x for x in res.lines if x.startswith(cls + ": ")]


# ---- an unbroken history ---------------------------------------------------------------------------------------

def test_a_serial_history_passes_and_has_every_kind_of_edge():
    txns, lists = serial(random_specs(600, given_up=0.05))
    res = analyze(txns, lists)
    assert res.lines == [] and res.counts == {}
    assert all(res.edges[k] > 50 for k in ("ww", "wr", "rw")), res.edges
    # with no tail at all the lengths alone place the reads
    txns, lists = serial(random_specs(300, seed=3), tail=0)
    assert analyze(txns, lists).lines == []


def test_other_workloads_are_skipped():
    data = histories.RunData()
    with pytest.raises(histories.Skip, match="the workload is tpcc, not append"):
        listappend.analyze(data, [{"node": "s0.0.0", "shard": 0, "workload": "tpcc"}])


# ---- one doctored history per class --------------------------------------------------------------------------

def test_G0_write_cycle():
    # both append to l0 (shard 0) and l1 (shard 1); l1's order is the reverse of l0's
    txns, lists = serial([(1, ["a l0 11", "a l1 12"], True), (2, ["a l0 21", "a l1 22"], True)])
    lists["l1"] = [22, 12]
    res = analyze(txns, lists)
    assert only(res, "G0") == ["G0: txn 1 (append, c1.0.0) -ww l0-> txn 2 (append, c2.0.0) -ww l1-> txn 1"]
    assert res.counts == {"G0": 1}


def test_G1a_aborted_write_visible():
    txns, lists = serial([(1, ["a l0 11"], True), (2, ["r l0"], True)])
    txns[3] = txn(3, ["a l0 31"], committed=False, failed=(4, 5))
    lists["l0"].append(31)
    assert only(analyze(txns, lists), "G1a") == ["G1a: l0[1] = 31 was appended by txn 3 (append, c0.0.0), which "
                                                 "was given up"]


def test_G1b_intermediate_read():
    # txn 2 saw l0 end in 11, which txn 1 followed with its own 12: also a G-single cycle (2 -rw-> 1 -wr-> 2)
    txns, lists = serial([(1, ["a l0 11;a l0 12"], True), (2, ["r l0"], True)])
    txns[2] = txn(2, ["r l0"], outputs={"r0_0": "1:11"})
    res = analyze(txns, lists)
    assert res.counts == {"G1b": 1, "G-single": 1}, res.lines
    assert res.lines[0] == ("G1b: txn 2 (append, c2.0.0) read l0 (r0_0) at length 1, ending in 11 appended by txn 1 "
                            "(append, c1.0.0), which appended 12 to l0 after it")


def test_G1c_circular_information_flow():
    # each saw the other's append: 1 -wr l1-> 2 and 2 -wr l0-> 1
    txns, lists = serial([(1, ["a l0 11", "r l1"], True), (2, ["r l0", "a l1 21"], True)])
    txns[1] = txn(1, ["a l0 11", "r l1"], outputs={"r1_0": "1:21"})
    assert only(analyze(txns, lists), "G1c") == [
        "G1c: txn 1 (append, c1.0.0) -wr l0-> txn 2 (append, c2.0.0) -wr l1-> txn 1"]


def test_G_single_read_skew():
    # 2 appends to l0 and l1; 1 read l1 with 2's append but l0 without it
    txns, lists = serial([(2, ["a l0 21", "a l1 22"], True), (1, ["r l0", "r l1"], True)])
    txns[1] = txn(1, ["r l0", "r l1"], outputs={"r0_0": "0", "r1_0": "1:22"})
    assert only(analyze(txns, lists), "G-single") == [
        "G-single: txn 1 (append, c1.0.0) -rw l0-> txn 2 (append, c2.0.0) -wr l1-> txn 1"]


def test_G2_write_skew():
    # each read the list the other appends to, and saw it empty
    txns, lists = serial([(1, ["r l0", "a l1 11"], True), (2, ["a l0 21", "r l1"], True)])
    txns[2] = txn(2, ["a l0 21", "r l1"], outputs={"r1_0": "0"})
    assert only(analyze(txns, lists), "G2") == [
        "G2: txn 1 (append, c1.0.0) -rw l0-> txn 2 (append, c2.0.0) -rw l1-> txn 1"]


def test_duplicate_element():
    txns, lists = serial([(1, ["a l0 11"], True), (2, ["a l0 21"], True)])
    lists["l0"].append(21)
    assert only(analyze(txns, lists), "duplicate") == [
        "duplicate: l0 holds 21 2 times (at 1, 2), appended once by txn 2 (append, c2.0.0)"]


def test_garbage_element():
    txns, lists = serial([(1, ["a l0 11"], True)])
    lists["l2"] = [99]
    assert only(analyze(txns, lists), "garbage") == ["garbage: l2[0] = 99, which no logged transaction appended"]


def test_lost_append():
    txns, lists = serial([(1, ["a l0 11"], True), (2, ["a l0 21;a l0 22"], True)])
    lists["l0"].remove(22)
    assert only(analyze(txns, lists), "lost-append") == [
        "lost-append: txn 2 (append, c2.0.0) committed its append of 22 to l0, which its final list (2 elements) "
        "does not hold"]


def test_incompatible_order():
    txns, lists = serial([(1, ["a l0 11;a l0 12"], True), (2, ["r l0"], True), (3, ["r l0"], True)])
    txns[2] = txn(2, ["r l0"], outputs={"r0_0": "2:12,11"})
    txns[3] = txn(3, ["r l0"], outputs={"r0_0": "3:11,12,13"})
    assert only(analyze(txns, lists), "incompatible-order") == [
        "incompatible-order: txn 2 (append, c2.0.0) read l0 (r0_0) at length 2 ending [12,11], where its final list "
        "has [11,12]",
        "incompatible-order: txn 3 (append, c0.0.0) read l0 (r0_0) at length 3, longer than its final list "
        "(2 elements)"]


def test_internal_inconsistency():
    # 1's read after its own append in the piece did not see it; 2's appends landed in reverse order
    txns, lists = serial([(1, ["a l0 11;r l0"], True), (2, ["a l2 21;a l2 22"], True)])
    txns[1] = txn(1, ["a l0 11;r l0"], outputs={"r0_1": "0"})
    lists["l2"] = [22, 21]
    assert only(analyze(txns, lists), "internal") == [
        "internal: txn 2 (append, c2.0.0) appended 21 before 22 to l2, but l2[0] = 22 comes before l2[1] = 21",
        "internal: txn 1 (append, c1.0.0) read l0 (r0_1) at length 0, without its own append of 11 earlier in "
        "piece 0 (l0[0])"]


def test_missing_output_and_value_collision():
    txns, lists = serial([(1, ["a l0 11", "r l1"], True), (2, ["a l0 11"], True)])
    txns[1] = txn(1, ["a l0 11", "r l1"], outputs={})
    res = analyze(txns, lists)
    assert res.counts == {"missing-output": 1, "collision": 1}, res.lines
    assert res.lines == [
        "missing-output: txn 1 (append, c1.0.0) committed without the output of its read r1_0 of l1",
        "collision: 11 was appended to l0 by txn 1 (append, c1.0.0) and by txn 2 (append, c2.0.0): its elements "
        "are attributed to no transaction"]


def test_replicas_that_disagree_are_said_once_and_the_first_one_is_used():
    txns, lists = serial([(1, ["a l0 11"], True), (2, ["a l0 21"], True)])
    ds = dumps_of(lists)
    ds[1]["append"]["lists"]["l0"] = [21, 11]   # s0.0.1
    ds[2]["append"]["lists"]["l0"] = [21]        # s0.0.2
    res = listappend.analyze(histories.RunData(txns=txns), ds)
    assert res.lines == ["the replicas of shard 0 (s0.0.0's) disagree on their lists (the replicas check says how): "
                         "the anomalies are inferred from the first replica's"]


def test_many_anomalies_are_listed_up_to_the_limit_and_counted():
    txns, lists = serial([(t, [f"a l0 {t}"], True) for t in range(1, 40)])
    lists["l0"] += [1000 + i for i in range(30)]
    res = analyze(txns, lists)
    assert res.counts == {"garbage": 30}
    assert len(res.lines) == histories.MAX_LISTED + 1 and res.lines[-1] == "garbage: ... and 10 more"


def test_malformed_ops_or_outputs_are_unreadable():
    txns, lists = serial([(1, ["a l0 11"], True), (2, ["r l0"], True)])
    assert analyze(txns, lists).lines == []
    txns[2] = txn(2, ["r l0"], outputs={"r0_0": "1:"})
    assert analyze(txns, lists).lines == []       # "<L>:" with no elements is a tail of 0
    txns[3] = txn(3, ["a l0 x"], committed=False)
    with pytest.raises(histories.Unreadable, match="malformed op 'a l0 x'"):
        analyze(txns, lists)
    del txns[3]
    txns[2] = txn(2, ["r l0"], outputs={"r0_0": "one"})
    with pytest.raises(histories.Unreadable, match="malformed read output"):
        analyze(txns, lists)


# ---- the checker's hook --------------------------------------------------------------------------------------

def test_the_checker_runs_it_after_realtime_and_names_the_classes(tmp_path, monkeypatch):
    assert checker.CHECKS.index("anomalies") == checker.CHECKS.index("realtime") + 2 == \
        checker.CHECKS.index("protocol_order") + 1 == checker.CHECKS.index("replay") - 1
    txns, lists = serial([(1, ["a l0 11", "r l1"], True), (2, ["r l0", "a l1 21"], True)])
    txns[1] = txn(1, ["a l0 11", "r l1"], outputs={"r1_0": "1:21"})   # G1c, as above
    data = histories.RunData(txns=txns)
    (tmp_path / "servers").mkdir()
    for d in dumps_of(lists):
        (tmp_path / "servers" / f"{d['node']}.state.json").write_text(json.dumps(d))
    monkeypatch.setattr(histories, "load_run", lambda run_dir, replicas, binary=None: data)
    for name in ("check_order", "check_atomicity", "check_realtime"):
        monkeypatch.setattr(histories, name, lambda *a: [])
    monkeypatch.setattr(durability, "check", lambda *a: [])   # the stub RunData names no replica histories

    def no_replay(*a):
        raise histories.Skip("no replay binary here")
    monkeypatch.setattr(histories, "check_replay", no_replay)
    res = checker.check_run(tmp_path, write=False)
    assert res["checks"]["workload"]["verdict"] == "pass"
    assert res["checks"]["anomalies"]["verdict"] == "fail" and res["anomaly_classes"] == {"G1c": 1}
    assert res["violations"] == ["[anomalies] G1c: txn 1 (append, c1.0.0) -wr l0-> txn 2 (append, c2.0.0) -wr l1-> "
                                 "txn 1"]
    assert res["stats"]["dependency_edges"] == {"ww": 0, "wr": 2, "rw": 0}
    assert list(res["checks"]) == list(checker.CHECKS)


def test_the_workload_check_of_append_dumps():
    ds = dumps_of({"l0": [1, 2], "l3": [5]})
    assert checker.check_workload(ds) == []
    ds[0]["append"]["lists"]["l5"] = []           # l5 belongs to shard 1
    ds[4]["rows"]["elements"] = 7
    assert checker.check_workload(ds) == [
        "s0.0.0: 1 list(s) not of shard 0 (of 2): l5",
        "s0.0.0: rows say 4 lists of 2 elements, its lists are 5 of 2",
        "s0.1.1: rows say 4 lists of 7 elements, its lists are 4 of 1",
        "shards hold different numbers of lists: s0.0.0 5, s0.0.1 4, s0.0.2 4, s0.1.0 4, s0.1.1 4, s0.1.2 4"]
    del ds[0]["append"]
    with pytest.raises(histories.Unreadable, match="malformed dump section"):
        checker.check_workload(ds)


# ---- cost ------------------------------------------------------------------------------------------------------

def test_fifty_thousand_transactions_are_checked_in_seconds():
    # CPU seconds of this process, not the wall clock: a busy host (a sweep beside `nice make test`) stretches the
    # wall clock and would fail a check that is about the analysis growing too fast (quadratic), not about the host
    txns, lists = serial(random_specs(50_000, keys=8, seed=11, given_up=0.01))
    t0 = time.process_time()
    res = analyze(txns, lists, keys=8)
    took = time.process_time() - t0
    assert res.lines == [] and sum(res.edges.values()) > 100_000
    assert took < 10, took
    # the same history with its busiest list reversed: one huge cycle component, bounded searches
    hot = max(lists, key=lambda k: len(lists[k]))
    lists[hot].reverse()
    t0 = time.process_time()
    res = analyze(txns, lists, keys=8)
    took = time.process_time() - t0
    assert "incompatible-order" in res.counts and any(c in res.counts for c in ("G0", "G1c", "G-single", "G2"))
    assert took < 10, took


def test_real_time_and_session_order_close_cycles_the_data_alone_does_not():
    """2 read l0 empty, though 1 had appended to it and been answered before 2 was issued: serializable (2, 1),
    not strictly: G-single-realtime. With wall clocks and a margin wider than the gap, only the session closes it
    (the same coordinator ran both): G-single-process; in different sessions nothing does."""
    txns = {1: txn(1, ["a l0 11"]), 2: txn(2, ["r l0"], outputs={"r0_0": "0"})}
    lists = {"l0": [11]}
    data = histories.RunData(txns=txns, times={1: (0, 1_000), 2: (2_000, 3_000)}, clock="monotonic",
                             sessions={1: ("c", 0), 2: ("c", 1)})
    res = listappend.analyze(data, dumps_of(lists))
    assert res.counts == {"G-single-realtime": 1}, res.lines
    assert res.lines == ["G-single-realtime: txn 1 (append, c1.0.0) -realtime (answered at 1.000 ms, 1.000 ms before "
                         "the next was issued)-> txn 2 (append, c2.0.0) -rw l0-> txn 1"]
    assert listappend.analyze(data, dumps_of(lists), strict=False).lines == []
    data.clock = "wall"   # margin 10 ms > the 1 ms gap
    assert listappend.analyze(data, dumps_of(lists)).lines == []
    data.sessions[2] = ("c", 0)
    res = listappend.analyze(data, dumps_of(lists))
    assert res.counts == {"G-single-process": 1}, res.lines
    assert "-so c session 0->" in res.lines[0]
    assert listappend.analyze(data, dumps_of(lists), strict=False).counts == {"G-single-process": 1}


def test_a_data_cycle_is_reported_once_not_again_with_real_time():
    txns, lists = serial([(1, ["a l0 11", "r l1"], True), (2, ["r l0", "a l1 21"], True)])
    txns[1] = txn(1, ["a l0 11", "r l1"], outputs={"r1_0": "1:21"})   # G1c
    data = histories.RunData(txns=txns, times={1: (0, 1_000), 2: (2_000, 3_000)}, clock="monotonic")
    res = listappend.analyze(data, dumps_of(lists))
    assert res.counts == {"G1c": 1}, res.lines
