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
    assert not (run / "servers" / f"{VICTIM}.state.json").exists()
    # its peers gave it up (connect timeout) and went on, dropping what they had for it, counted apart from lost
    # messages
    facts = [json.loads(f.read_text())["process"] for f in (run / "servers").glob("*.state.json")]
    assert sum(f["dropped_to_crashed"] for f in facts) > 0 and all(f["dropped_messages"] == 0 for f in facts)
    assert f"peer {VICTIM} unreachable (planned to crash)" in (run / "logs" / "s1.0.0.log").read_text()
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
    _write_events(run, [e for e in events if e.get("kind") != "crash"])
    p = run_cli(run)
    assert p.returncode == 2 and f"missing state dump(s) for {VICTIM}" in p.stderr, p.stderr
    assert any(x.startswith("faults.jsonl: ") and "(truncated or changed)" in x for x in validate.validate_run(run))
    (run / "files.json").unlink()   # and without the manifest, from deploy.yml and faults.jsonl alone
    assert any(f"replica {VICTIM}: no state dump" in x for x in validate.validate_run(run))


def test_drops_to_a_peer_planned_to_crash_need_a_crash(tmp_path):
    dumps = [{"node": "s0.0.0", "process": {"name": "s0.0.0", "dropped_to_crashed": 4}}]
    v = checker.check_run_health(tmp_path, dumps, crashed={})
    assert v == ["s0.0.0: dropped 4 message(s) to a peer planned to crash, but no crash was applied (faults.jsonl)"]
    assert checker.check_run_health(tmp_path, dumps, crashed={"s0.0.1": 3.0}) == []


# ---- a crashed follower restarted empty (crash:NODE@S+T): it catches up from replica 0 of its shard


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
    # live again: its dump and history are there, and its history is replica 0's, event by event
    data = load(run)
    want = sum(3 for t in data.txns.values() if t.committed for s in t.shards())
    assert stats["copies_checked"] == want
    assert history_lines(run, VICTIM)[1] == history_lines(run, "s1.0.0")[1]
    dump = json.loads((run / "servers" / f"{VICTIM}.state.json").read_text())
    assert dump["counters"]["restarted"] == 1 and dump["counters"]["ignored_protocol_messages"] > 0
    assert dump["append"]["lists"] == json.loads((run / "servers" / "s1.0.0.state.json").read_text())["append"]["lists"]
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
