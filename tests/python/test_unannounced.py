"""Faults nobody announced (docs/nemesis.md, "Losses"): an engine process killed from outside mid-run, as a user does it
(`kill -9` of a follower's process in a local run), with no fault schedule at all. The engine reads no plan, so its
peers learn of the death only as a deployed system would (the peer goes silent); the runner sees the process gone and
records the loss; the run goes on and is checked as every run is. A shard that loses its majority this way cannot go
on by any protocol's rules: the run fails saying so, and still keeps and checks what every live process recorded.
(`docker kill` of a follower's container in a swarm run: tests/python/test_unannounced_docker.py.)"""
import json
import os
import signal
import threading
import time

import pytest

from testbed.core import deploy
from testbed.runs import memory
from testbed.runs.local import LocalRunner

from conftest import built_modes, procs_mentioning
from test_checker_history import BINARIES, BUILD

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not all(os.access(b, os.X_OK) for b in BINARIES), reason="binaries not built")]


MODES = built_modes()


def _pid_of(run_root, node: str) -> int | None:
    """The pid of the txn-server running `node` of the run under run_root (found by its command line)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"txn-server") and str(run_root).encode() in b" ".join(argv) \
                and b"--name" in argv and argv[argv.index(b"--name") + 1] == node.encode():
            return int(pid)
    return None


def _clients_started(run_root) -> bool:
    """Whether a txn-client of the run under run_root runs (the load has started)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"txn-client") and str(run_root).encode() in b" ".join(argv):
            return True
    return False


def _kill_at(run_root, nodes: list[str], at_s: float, killed: list) -> threading.Thread:
    """A thread that, `at_s` seconds after the run's clients start, kills each of `nodes` with SIGKILL (as `kill -9`
    from a shell), recording (node, pid, wall time). From the clients' start, not from when the servers appear: on a
    busy host the servers start well before the load does."""
    def go():
        deadline = time.time() + 60
        while time.time() < deadline and not _clients_started(run_root):
            time.sleep(0.05)
        time.sleep(at_s)
        for n in nodes:
            pid = _pid_of(run_root, n)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed.append((n, pid, time.time()))
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("mode", MODES)
def test_a_follower_killed_from_outside_is_ridden_out_and_recorded(tmp_path, mode):
    """No schedule: the deployment file says nothing of a crash. s1.0.1's process is killed 2 s after the clients
    start; the run ends ok and CONSISTENT, nothing committed is lost at the live replicas, and faults.jsonl records
    the loss (which process, when, how it was seen)."""
    d = deploy.build_deployment(mode=mode, workload="append", regions=3, shards=1, clients_per_shard=1,
                                concurrency=2, duration=7, warmup=1, cooldown=1, processes="node",
                                base_port=28000 + 60 * MODES.index(mode))
    assert "faults" not in d
    killed = []
    t = _kill_at(tmp_path, ["s1.0.1"], 2.0, killed)
    res = LocalRunner(build_dir=BUILD, progress=False).run(d, "unannounced", out_root=tmp_path)
    t.join(timeout=5)
    assert [k[0] for k in killed] == ["s1.0.1"], killed
    assert res.ok and res.check["verdict"] == "CONSISTENT", (res.reason, res.check.get("violations", [])[:3])
    stats = res.check["stats"]["durability"]
    assert stats["lost"] == 0 and list(stats["crashed"]) == ["s1.0.1"] and stats["committed"] > 20, stats
    events = [json.loads(x) for x in (res.run_dir / "faults.jsonl").read_text().splitlines()]
    lost = [e for e in events if e.get("event") == "lost"]
    assert len(lost) == 1 and lost[0]["process"] == "s1.0.1" and lost[0]["nodes"] == ["s1.0.1"], lost
    assert lost[0]["source"] == "observed" and not lost[0]["planned"] and lost[0]["how"].startswith("killed by SIGKILL")
    assert 1.0 < lost[0]["t_s"] < 7, lost   # seen while the clients ran
    assert not (res.run_dir / "servers" / "s1.0.1.state.json").exists()
    assert procs_mentioning(str(res.run_dir)) == []


def test_a_shard_that_loses_its_majority_fails_the_run_saying_so_and_keeps_what_was_recorded(tmp_path):
    """Both followers of shard 1.0 killed: no protocol can commit its transactions. The run fails at once with a
    reason that names the shard and the losses; every live process still wrote what it recorded, and the folder is
    summarized and checked (check.json says what it could of it)."""
    d = deploy.build_deployment(mode="janus", workload="append", regions=3, shards=1, clients_per_shard=1,
                                concurrency=2, duration=8, warmup=1, cooldown=1, processes="node", base_port=28400)
    killed = []
    t = _kill_at(tmp_path, ["s1.0.1", "s1.0.2"], 1.5, killed)
    t0 = time.monotonic()
    with pytest.raises(Exception) as e:
        LocalRunner(build_dir=BUILD, progress=False).run(d, "majority", out_root=tmp_path)
    took = time.monotonic() - t0
    t.join(timeout=5)
    assert len(killed) == 2, killed
    why = str(e.value)
    assert why.startswith("shard 1 lost its majority (1 of 3 replicas live: s1.0.1 lost at t="), why
    assert "s1.0.2 lost at t=" in why and "killed by SIGKILL" in why, why
    assert took < 8 + 15, f"{took:.1f} s: the run should stop at the loss, not wait out its clients"
    run = e.value.run_dir
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["reason"].startswith("shard 1 lost its majority"), meta["reason"]
    assert "what the live processes recorded checks" in meta["reason"], meta["reason"]
    # what every live process recorded is there: every live replica's dump and history, every client's records
    for n in ("s0.0.0", "s0.0.1", "s0.0.2", "s1.0.0", "s2.0.0", "s2.0.1", "s2.0.2"):
        assert (run / "servers" / f"{n}.state.json").is_file() and (run / "servers" / f"{n}.history.txt").is_file(), n
    for c in ("c0.0.0", "c1.0.0", "c2.0.0"):
        recs = run / "clients" / f"{c}.records.csv"
        assert recs.is_file() and recs.stat().st_size > 0, c
    check = json.loads((run / "check.json").read_text())
    assert check["verdict"] != "CONSISTENT" or check["stats"]["durability"]["crashed"], check["verdict"]
    assert any("shard 1 kept 1 of its 3 replicas live" in v for v in check["violations"]), check["violations"][:5]
    assert (run / "summary.json").is_file()
    assert procs_mentioning(str(run)) == []


def test_a_shard_without_a_live_running_majority_for_a_while_is_a_note(tmp_path):
    """One follower of shard 1.0 crashed (and restarted 3 s later) while the other is paused for 1.5 s: for that
    while no protocol can commit the shard's transactions; the run may still end CONSISTENT, and check.json, the run
    table and the caption say it (it used to be `ok`, CONSISTENT, `notes: []`)."""
    from testbed.analysis import runs_table
    d = deploy.build_deployment(mode="janus", workload="append", regions=3, shards=1, clients_per_shard=1,
                                concurrency=2, duration=8, warmup=1, cooldown=1, processes="node", base_port=28500,
                                faults="crash:s1.0.1@2+3; pause:s1.0.2@3+1.5")
    res = LocalRunner(build_dir=BUILD, progress=False).run(d, "gap", out_root=tmp_path)
    assert res.ok and res.check["verdict"] == "CONSISTENT", (res.reason, res.check.get("violations", [])[:3])
    notes = [n for n in res.check["notes"] if n.startswith("shard 1 had no majority of its replicas live and running")]
    assert len(notes) == 1 and "s1.0.1 down, s1.0.2 paused" in notes[0], res.check["notes"]
    assert 1.3 < res.check["stats"]["no_majority_s"] < 1.7, res.check["stats"]
    row = runs_table.runs(tmp_path).iloc[0]
    assert 1.3 < row.no_majority_s < 1.7 and "s1.0.2 paused" in row.check_notes


def _one_shard_run(tmp_path, mode: str, faults: str, base_port: int, name: str):
    """A 9 s run of one shard in each of 3 regions (3 coordinators, the anomaly workload) under `faults`, memory
    sampled every 0.5 s; it must be CONSISTENT with nothing lost."""
    d = deploy.build_deployment(mode=mode, workload="append", regions=3, shards=1, clients_per_shard=1,
                                concurrency=3, duration=9, warmup=1, cooldown=1, processes="node", faults=faults,
                                base_port=base_port + 60 * MODES.index(mode))
    res = LocalRunner(build_dir=BUILD, progress=False, memory_interval_s=0.5).run(d, name, out_root=tmp_path)
    assert res.ok and res.check["verdict"] == "CONSISTENT", (res.reason, res.check.get("violations", [])[:3])
    assert res.check["stats"]["durability"]["lost"] == 0
    return res


KEEP = 32   # events a replica keeps in memory in test_histories_stream_to_disk_through_a_restart


@pytest.mark.parametrize("mode", MODES)
def test_histories_stream_to_disk_through_a_restart(tmp_path, monkeypatch, mode):
    """A replica writes its history as it goes and keeps only its last events in memory (TXN_HISTORY_KEEP, here 32:
    a short run writes most of it early; docs/checker.md, "Execution history"). Followers of one shard restarted one
    after the other take over their source's written lines as their own history's first ones (the snapshot reads
    them back from the file, the source's own votes left out) and the next rejoin seals the first: the run is
    CONSISTENT with nothing lost, and every replica's history is complete (its events as its dump counts them, no
    .part left behind by a process that ended)."""
    monkeypatch.setenv("TXN_HISTORY_KEEP", str(KEEP))
    res = _one_shard_run(tmp_path, mode, "crash:s0.0.1@2+1; crash:s0.0.2@5+1", 29000, "streamed")
    servers = res.run_dir / "servers"
    assert not [p.name for p in servers.glob("*.part") if not p.name.startswith(("s0.0.1", "s0.0.2"))]
    for n in ("s0.0.0", "s0.0.1", "s0.0.2"):
        dump = json.loads((servers / f"{n}.state.json").read_text())
        lines = (servers / f"{n}.history.txt").read_text().splitlines()
        assert lines[-1].startswith(f"# end events={dump['execution_history']['events']} ")
        assert dump["execution_history"]["events"] > 3 * KEEP, (n, dump["execution_history"])
    # every server process's resident memory over the run, sampled from outside: the killed ones' until they died,
    # the restarted ones' from their start (docs/fault-tolerance.md, "Memory over a long run")
    mem = {r["process"]: r for r in memory.profile(res.run_dir)}
    assert {"s0.0.0", "s0.0.1", "s0.0.1+restart", "s0.0.2+restart"} <= set(mem), sorted(mem)
    assert mem["s0.0.1"]["end_t_s"] < 2.6 < mem["s0.0.1+restart"]["start_t_s"] and mem["s0.0.2"]["end_t_s"] < 5.6
    assert all(r["start_t_s"] <= r["end_t_s"] for r in mem.values()), mem
    assert all(2 < r["end_mb"] < 500 for r in mem.values()), {n: r["end_mb"] for n, r in mem.items()}
    restarted = json.loads((servers / "s0.0.2.state.json").read_text())["counters"]
    # more events than its source kept in memory: some were read back from the source's file (a run on a loaded
    # machine executes ~100 by the second restart, so the bound is the in-memory tail, not a multiple of it)
    assert restarted["restarted"] == 1 and restarted["snapshot_events"] > KEEP, restarted
    if "rejoin_seals" in restarted:   # a protocol whose restarted replicas vote: the second one votes too
        assert restarted["rejoin_seals"] == 1 and restarted["voter_messages"] > 0, restarted


@pytest.mark.parametrize("mode", MODES)
def test_a_follower_restarted_is_crashed_and_restarted_again(tmp_path, mode):
    """A restarted replica is a process like any other: killed again, it is started again (named
    <node>+restart2), takes over a live replica's state again and, where its protocol votes, seals a newer epoch and
    votes again; the run is CONSISTENT with nothing lost, both restarts caught up, and memory.csv follows each of the
    three processes in turn."""
    res = _one_shard_run(tmp_path, mode, "crash:s0.0.1@1.5+1; crash:s0.0.1@4+1", 29400, "twice")
    evs = [json.loads(x) for x in (res.run_dir / "faults.jsonl").read_text().splitlines()]
    crash = [(e["event"], e["process"]) for e in evs if e.get("kind") == "crash"]
    assert crash == [("apply", "s0.0.1"), ("heal", "s0.0.1+restart"), ("caught_up", "s0.0.1+restart"),
                     ("apply", "s0.0.1+restart"), ("heal", "s0.0.1+restart2"), ("caught_up", "s0.0.1+restart2")], crash
    assert [e["id"] for e in evs if e.get("event") == "caught_up"] == ["f1", "f2"]
    mem = {r["process"] for r in memory.profile(res.run_dir)}
    assert {"s0.0.1", "s0.0.1+restart", "s0.0.1+restart2"} <= mem, sorted(mem)
    counters = json.loads((res.run_dir / "servers" / "s0.0.1.state.json").read_text())["counters"]
    assert counters["restarted"] == 1, counters   # the dump is the last process's
    if "rejoin_epoch" in counters:   # a protocol whose restarted replicas vote: a newer epoch than the first rejoin's
        assert counters["rejoin_epoch"] >= 2 and counters["voter_messages"] > 0, counters
