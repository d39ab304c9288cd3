"""A crashed follower (`crash:NODE@S`, docs/nemesis.md) and the durability check (testbed/analysis/durability.py):
one real TAPIR run whose follower of region 1 is killed at t = 3 s, then copies of its folder changed the ways a
protocol that loses a committed transaction, or a runner that lies about a crash, would leave it."""
import gzip
import json
import os

import pytest

from testbed.analysis import checker, validate
from testbed.core import deploy
from testbed.runs.local import LocalRunner

from conftest import procs_mentioning
from test_checker_history import BINARIES, BUILD, copy_run as _copy, history_lines, load, run_cli, write_history

needs_build = pytest.mark.skipif(not all(os.access(b, os.X_OK) for b in BINARIES), reason="binaries not built")
VICTIM = "s1.0.1"   # shard 1's follower 1


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory):
    if not all(os.access(b, os.X_OK) for b in BINARIES):
        pytest.skip("binaries not built")
    d = deploy.build_deployment(mode="tapir", workload="append", regions=3, shards=1, clients_per_shard=1,
                                concurrency=2, duration=8, warmup=1, cooldown=1, base_port=27800,
                                processes="node", faults=f"crash:{VICTIM}@3")
    d["runtime"]["connect_timeout_s"] = 2   # its peers give it up at t = 5 s, mid-run: that must not end them
    return LocalRunner(build_dir=BUILD, progress=False).run(d, "crash", out_root=tmp_path_factory.mktemp("runs"))


def _drop_a_committed_transaction(run, node) -> int:
    """Remove the first committed transaction of node's history from it; its id."""
    header, body = history_lines(run, node)
    data = load(run)
    txn = next(int(x.split()[0]) for x in body if data.txns.get(int(x.split()[0]))
               and data.txns[int(x.split()[0])].committed)
    write_history(run, node, header, [x for x in body if int(x.split()[0]) != txn])
    return txn


def _events(run) -> list[dict]:
    return [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines()]


def _write_events(run, events) -> None:
    (run / "faults.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


@needs_build
@pytest.mark.slow
def test_a_crashed_follower_loses_nothing_and_the_run_says_so(crash_run):
    assert crash_run.ok and crash_run.check["verdict"] == "CONSISTENT", (crash_run.reason,
                                                                         crash_run.check["violations"][:3])
    run = crash_run.run_dir
    assert crash_run.check["checks"]["durability"]["verdict"] == "pass"
    stats = crash_run.check["stats"]["durability"]
    assert stats["lost"] == 0 and stats["committed"] > 50 and list(stats["crashed"]) == [VICTIM]
    assert 2.9 < stats["crashed"][VICTIM] < 3.5
    # every committed transaction was looked for at every live replica of its shards (3, or 2 on shard 1)
    data = load(run)
    want = sum(2 if s == 1 else 3 for t in data.txns.values() if t.committed for s in t.shards())
    assert stats["copies_checked"] == want and VICTIM not in data.histories
    crash = [e for e in _events(run) if e.get("kind") == "crash"]
    assert [(e["event"], e["signal"], e["ok"], e["process"]) for e in crash] == [("apply", "SIGKILL", True, VICTIM)]
    lost = [e for e in _events(run) if e.get("event") == "lost"]   # and the runner saw it die
    assert [(e["process"], e["planned"], e["source"]) for e in lost] == [(VICTIM, True, "observed")], lost
    assert lost[0]["how"].startswith("killed by SIGKILL") and 2.9 < lost[0]["t_s"] < 3.5
    assert not (run / "servers" / f"{VICTIM}.state.json").exists()
    # its peers, told nothing, gave it up (connect timeout) and went on, dropping what they had for it: drops to a
    # process that was lost, which the checker tells from lost messages
    facts = [json.loads(f.read_text())["process"] for f in (run / "servers").glob("*.state.json")]
    assert sum(f["dropped_to"].get(VICTIM, 0) for f in facts) > 0
    assert all(set(f["dropped_to"]) <= {VICTIM} and f["unreachable_peers"] in ([], [VICTIM]) for f in facts), facts
    log = (run / "logs" / "s1.0.0.log").read_text()
    assert f"peer {VICTIM} at " in log and "unreachable for 2 s" in log and "planned" not in log
    # after the crash, commits go on: the coordinator's Prepare timeout decides on the two replicas left
    assert sum(json.loads(f.read_text()).get("counters", {}).get("prepare_timeouts", 0)
               for f in (run / "servers").glob("s1.0.0.state.json")) > 0
    assert validate.validate_run(run) == []
    assert procs_mentioning(str(run)) == []


@needs_build
@pytest.mark.slow
def test_a_committed_transaction_missing_from_a_live_replica_is_lost(crash_run, tmp_path):
    run = _copy(crash_run, tmp_path)
    node = "s1.0.2"   # the crashed replica's live peer
    txn = _drop_a_committed_transaction(run, node)
    p = run_cli(run)
    assert p.returncode == 1, p.stdout + p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("[durability]"))
    assert f"txn {txn} " in line and f"missing from the history of {node}" in line and "lost" in line, line
    res = json.loads((run / "check.json").read_text())
    assert res["stats"]["durability"]["lost"] == 1


@needs_build
@pytest.mark.slow
def test_a_committed_append_missing_from_a_live_replicas_final_state_is_lost(crash_run, tmp_path):
    run = _copy(crash_run, tmp_path)
    f = run / "servers" / "s0.0.2.state.json"
    dump = json.loads(f.read_text())
    key, values = next((k, v) for k, v in sorted(dump["append"]["lists"].items()) if v)
    dump["append"]["lists"][key] = values[:-1]   # its history still says the transaction ran
    f.write_text(json.dumps(dump))
    p = run_cli(run)
    assert p.returncode == 1
    line = next(x for x in p.stdout.splitlines() if x.startswith("[durability]"))
    assert f"appended [{values[-1]}] to {key}, missing from s0.0.2's final list" in line, line


@needs_build
@pytest.mark.slow
def test_a_shard_left_without_a_majority_is_flagged(crash_run, tmp_path):
    run = _copy(crash_run, tmp_path)
    events = _events(run)
    second = dict(next(e for e in events if e.get("kind") == "crash"), node="s1.0.2", nodes=["s1.0.2"],
                  process="s1.0.2", t_s=4.0)
    _write_events(run, events + [second])
    for suffix in (".state.json", ".history.txt"):
        (run / "servers" / f"s1.0.2{suffix}").unlink()
    p = run_cli(run)
    assert p.returncode == 1
    assert any(x.startswith("[durability] shard 1 kept 1 of its 3 replicas live") and "s1.0.2 crashed at t=4s" in x
               for x in p.stdout.splitlines()), p.stdout


@needs_build
@pytest.mark.slow
def test_a_crash_record_does_not_excuse_a_live_replica_or_go_missing(crash_run, tmp_path):
    run = _copy(crash_run, tmp_path)
    events = _events(run)
    crash = next(e for e in events if e.get("kind") == "crash")
    # a replica that wrote its dump is said to have crashed: the record is false
    _write_events(run, events + [dict(crash, node="s0.0.1", nodes=["s0.0.1"], process="s0.0.1")])
    p = run_cli(run)
    assert p.returncode == 1 and "[durability] s0.0.1 is recorded crashed" in p.stdout, p.stdout
    # without the record, the crashed replica's missing dump is what it is: the folder cannot be checked
    _write_events(run, [e for e in events if e.get("kind") not in ("crash", "loss")])
    p = run_cli(run)
    assert p.returncode == 2 and f"missing state dump(s) for {VICTIM}" in p.stderr, p.stderr
    assert any(x.startswith("faults.jsonl: ") and "(truncated or changed)" in x for x in validate.validate_run(run))
    (run / "files.json").unlink()   # and without the manifest, from deploy.yml and faults.jsonl alone
    assert any(f"replica {VICTIM}: no state dump" in x for x in validate.validate_run(run))


def test_drops_to_a_server_that_was_never_lost_are_lost_messages(tmp_path):
    """A process says to whom it dropped messages and which peers it gave up: what it dropped for a process that was
    lost (faults.jsonl) is the cost of a peer going silent; for any other it is a lost message, and giving up a peer
    that never died is a transport that lost a live one."""
    dumps = [{"node": "s0.0.0", "process": {"name": "s0.0.0", "dropped_messages": 6,
                                            "dropped_to": {"s0.0.1": 4, "s0.0.2": 2}, "unreachable_peers": ["s0.0.1"]}}]
    assert checker.check_run_health(tmp_path, dumps, lost=set()) == [
        "s0.0.0: dropped 6 message(s) to servers that were never lost (4 to s0.0.1, 2 to s0.0.2)",
        "s0.0.0: gave up s0.0.1 as unreachable, but no such process was lost (faults.jsonl)"]
    assert checker.check_run_health(tmp_path, dumps, lost={"s0.0.1"}) == [
        "s0.0.0: dropped 2 message(s) to servers that were never lost (2 to s0.0.2)"]
    assert checker.check_run_health(tmp_path, dumps, lost={"s0.0.1", "s0.0.2"}) == []
    old = [{"node": "s0.0.0", "process": {"name": "s0.0.0", "dropped_messages": 3}}]   # an engine that named none
    assert checker.check_run_health(tmp_path, old, lost={"s0.0.1"}) == [
        "s0.0.0: dropped 3 message(s) to servers that were never lost (3 to a process it did not name)"]


# ---- a crashed follower restarted empty (crash:NODE@S+T): it takes over a live replica's state and follows it


@pytest.fixture(scope="module")
def restart_run(tmp_path_factory):
    if not all(os.access(b, os.X_OK) for b in BINARIES):
        pytest.skip("binaries not built")
    d = deploy.build_deployment(mode="dast", workload="append", regions=3, shards=1, clients_per_shard=1,
                                concurrency=2, duration=8, warmup=1, cooldown=1, base_port=27850,
                                processes="node", faults=f"crash:{VICTIM}@2+1.5")
    return LocalRunner(build_dir=BUILD, progress=False).run(d, "restart", out_root=tmp_path_factory.mktemp("runs"))


@needs_build
@pytest.mark.slow
def test_a_restarted_follower_catches_up_and_ends_as_its_peers(restart_run):
    assert restart_run.ok and restart_run.check["verdict"] == "CONSISTENT", (restart_run.reason,
                                                                             restart_run.check["violations"][:3])
    run = restart_run.run_dir
    stats = restart_run.check["stats"]["durability"]
    assert stats["lost"] == 0 and stats["crashed"] == {}
    back = stats["restarted"][VICTIM]
    assert 1.9 < back["crashed_t_s"] < 2.5 and 3.4 < back["restarted_t_s"] < 4.0 and back["events"] > 0
    assert 0 <= back["caught_up_after_s"] < 5
    # live again: its dump and history are there, and its history is that of the live replica it took over, event by
    # event
    data = load(run)
    want = sum(3 for t in data.txns.values() if t.committed for s in t.shards())
    assert stats["copies_checked"] == want
    source = back["source"]
    assert source in ("s1.0.0", "s1.0.2"), back
    assert history_lines(run, VICTIM)[1] == history_lines(run, source)[1]
    dump = json.loads((run / "servers" / f"{VICTIM}.state.json").read_text())
    # and it stores and acknowledges again (DAST's Voter), once its peers sealed: nothing of its protocol's ignored
    k = dump["counters"]
    assert k["restarted"] == 1 and k["rejoin_seals"] == 1 and k["voter_messages"] > 0 and k["rejoined_acks"] > 0, k
    assert "VOTING" in (run / "logs" / f"{VICTIM}+restart.log").read_text()
    assert dump["append"]["lists"] == json.loads((run / "servers" / f"{source}.state.json").read_text())["append"]["lists"]
    events = [e for e in _events(run) if e.get("kind") == "crash"]
    assert [(e["event"], e.get("action"), e["process"]) for e in events] == [
        ("apply", None, VICTIM), ("heal", "restart", f"{VICTIM}+restart"), ("caught_up", None, f"{VICTIM}+restart")]
    assert "CAUGHT_UP" in (run / "logs" / f"{VICTIM}+restart.log").read_text()
    assert validate.validate_run(run) == []
    assert procs_mentioning(str(run)) == []


@needs_build
@pytest.mark.slow
def test_a_restarted_replica_missing_a_committed_transaction_is_flagged(restart_run, tmp_path):
    run = _copy(restart_run, tmp_path)
    txn = _drop_a_committed_transaction(run, VICTIM)
    p = run_cli(run)
    assert p.returncode == 1, p.stdout + p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("[durability]"))
    assert f"txn {txn} " in line and f"missing from the history of {VICTIM}" in line, line


@needs_build
@pytest.mark.slow
def test_a_restarted_replicas_final_state_missing_an_append_is_flagged(restart_run, tmp_path):
    run = _copy(restart_run, tmp_path)
    f = run / "servers" / f"{VICTIM}.state.json"
    dump = json.loads(f.read_text())
    key, values = next((k, v) for k, v in sorted(dump["append"]["lists"].items()) if v)
    dump["append"]["lists"][key] = values[:-1]
    f.write_text(json.dumps(dump))
    p = run_cli(run)
    assert p.returncode == 1
    assert any(x.startswith("[durability]") and f"missing from {VICTIM}'s final list" in x
               for x in p.stdout.splitlines()), p.stdout


@needs_build
@pytest.mark.slow
def test_a_restart_that_never_caught_up_or_wrote_anothers_dump_is_flagged(restart_run, tmp_path):
    run = _copy(restart_run, tmp_path)
    events = _events(run)
    _write_events(run, [e for e in events if e.get("event") != "caught_up"])
    p = run_cli(run)
    assert p.returncode == 1 and f"[durability] {VICTIM}, restarted at t=" in p.stdout \
        and "never caught up" in p.stdout, p.stdout
    _write_events(run, events)
    f = run / "servers" / f"{VICTIM}.state.json"
    dump = json.loads(f.read_text())
    del dump["counters"]["restarted"]   # as if the first process had written it: its kill failed
    f.write_text(json.dumps(dump))
    p = run_cli(run)
    assert p.returncode == 1 and "its dump is not a restarted process's" in p.stdout, p.stdout


# ---- what a commit rests on when its client is answered (ClientReply.stored, the registry's reports_copies)

def _varint(b: bytes, i: int) -> tuple[int, int]:
    x = shift = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return x, i


def _enc(x: int) -> bytes:
    out = bytearray()
    while True:
        c, x = x & 0x7F, x >> 7
        out.append(c | 0x80 if x else c)
        if not x:
            return bytes(out)


def _fields(b: bytes):
    """(field number, wire type, the field's bytes whole, its value: a varint, or a length-delimited payload)."""
    i = 0
    while i < len(b):
        key, j = _varint(b, i)
        if key & 7 == 0:
            val, k = _varint(b, j)
        elif key & 7 == 2:
            n, j = _varint(b, j)
            k = j + n
            val = b[j:k]
        else:
            raise AssertionError(f"wire type {key & 7} in a TxnLogEntry")
        yield key >> 3, key & 7, b[i:k], val
        i = k


def _restore_copies(run, mask: int | None) -> int:
    """Rewrite the first committed entry of a client's binary transaction log (src/core/txn_log.h: gzip'ed,
    varint-delimited TxnLogEntry) whose reply named its copies: each shard of its `stored` (field 6) names the
    replicas of `mask`, or none is named at all (None). Returns the transaction's id."""
    log = sorted((run / "clients").glob("*.txns.pb.gz"))[0]
    raw, out, i, done = gzip.decompress(log.read_bytes()), bytearray(), 0, None
    while i < len(raw):
        n, j = _varint(raw, i)
        entry = raw[j:j + n]
        i = j + n
        fields = list(_fields(entry))
        if done is None and any(f == 6 for f, *_ in fields) and any(f == 2 and v for f, _, _, v in fields):
            txn = next(v for f, _, _, v in fields if f == 1)
            done = next(v for f, _, _, v in _fields(txn) if f == 1)
            shards = [dict((f, v) for f, _, _, v in _fields(val)).get(1, 0) for f, _, _, val in fields if f == 6]
            entry = b"".join(whole for f, _, whole, _ in fields if f != 6)
            for shard in shards if mask is not None else ():
                m = b"\x08" + _enc(shard) + b"\x10" + _enc(mask)
                entry += b"\x32" + _enc(len(m)) + m
        out += _enc(len(entry)) + entry
    assert done is not None, "no committed entry names its copies"
    log.write_bytes(gzip.compress(bytes(out)))
    return done


@needs_build
@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["crash_run", "restart_run"])
def test_every_commit_was_answered_on_a_majority_of_each_shard(fixture, request):
    """TAPIR with a follower dead from t = 3 s (its coordinators decide on 2 of 3 after the timeout), DAST with one
    restarted: each committed (transaction, shard) was answered on 2 or 3 copies, as its rule says."""
    res = request.getfixturevalue(fixture)
    stats = res.check["stats"]["durability"]
    data = load(res.run_dir)
    pairs = sum(len(t.shards()) for t in data.txns.values() if t.committed)
    assert set(stats["reply_copies"]) <= {"2", "3"} and sum(stats["reply_copies"].values()) == pairs, stats
    if fixture == "crash_run":   # the dead follower's shard decided on the two left
        assert stats["reply_copies"].get("2", 0) > 0 and stats["reply_copies"]["3"] > 0


@needs_build
@pytest.mark.slow
def test_a_commit_answered_on_one_copy_or_naming_none_is_flagged(restart_run, tmp_path):
    run = _copy(restart_run, tmp_path)
    whole = next((run / "clients").glob("*.txns.pb.gz")).read_bytes()
    txn = _restore_copies(run, 1)   # replica 0 alone: the handler's own copy
    p = run_cli(run)
    assert p.returncode == 1, p.stdout + p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("[durability]"))
    assert f"txn {txn} " in line and "answered committed on the copies of replicas [0] of shard" in line \
        and "not a majority of its 3" in line, line
    next((run / "clients").glob("*.txns.pb.gz")).write_bytes(whole)
    assert _restore_copies(run, None) == txn
    p = run_cli(run)
    assert p.returncode == 1 and f"[durability] txn {txn} " in p.stdout and "without naming the replicas of shard" \
        in p.stdout, p.stdout


def test_a_shard_without_a_live_running_majority_for_a_while_is_found_from_the_record(tmp_path):
    """A follower down (crashed at 2 s, restarted at 6 s) while its peer is paused (3-4.5 s), another shard's
    follower lost for good at 5 s: shard 1 had no majority of live, running replicas from 3 to 4.5 s, shard 0 never
    (one of three gone)."""
    evs = [{"event": "load_start", "t_s": 0.0},
           {"kind": "crash", "event": "apply", "ok": True, "nodes": ["s1.0.1"], "t_s": 2.0},
           {"kind": "loss", "event": "lost", "ok": True, "nodes": ["s1.0.1"], "t_s": 2.05},
           {"kind": "pause", "event": "apply", "ok": True, "nodes": ["s1.0.2"], "t_s": 3.0},
           {"kind": "pause", "event": "heal", "ok": True, "nodes": ["s1.0.2"], "t_s": 4.5},
           {"kind": "loss", "event": "lost", "ok": True, "nodes": ["s0.0.2"], "t_s": 5.0},
           {"kind": "crash", "event": "heal", "action": "restart", "ok": True, "nodes": ["s1.0.1"], "t_s": 6.0}]
    (tmp_path / "faults.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))
    deployed = {0: ["s0.0.0", "s0.0.1", "s0.0.2"], 1: ["s1.0.0", "s1.0.1", "s1.0.2"]}
    from testbed.analysis import durability
    gaps = durability.majority_gaps(tmp_path, deployed, 10.0)
    assert gaps == [{"shard": 1, "from_s": 3.0, "to_s": 4.5, "seconds": 1.5,
                     "out": {"s1.0.1": "down", "s1.0.2": "paused"}}], gaps
    assert durability.gap_note(gaps[0]).startswith("shard 1 had no majority of its replicas live and running for "
                                                   "1.50 s (t=3.00-4.50 s: s1.0.1 down, s1.0.2 paused)")
    # a pause the run ended in, beside a loss for good: to the run's end
    evs2 = evs[:4] + [evs[5]]
    (tmp_path / "faults.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs2))
    assert [(g["shard"], g["from_s"], g["to_s"]) for g in durability.majority_gaps(tmp_path, deployed, 10.0)] == \
        [(1, 3.0, 10.0)]
