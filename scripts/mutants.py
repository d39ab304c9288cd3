#!/usr/bin/env python3
"""`make mutants`: build deliberately broken protocol variants and show which tests catch each (tests/mutants/README.md).

For every mutant (src/protocols/<protocol>/mutant.h), in build-mutants/ (reconfigured per mutant: only that
protocol's sources recompile): the protocol's C++ simulator suites (its own, e.g. DastSim.*, and the
protocol-neutral suite on it, Registered/ProtocolSim.*/<protocol>, all with the history checker), then a short local
run checked by the end-to-end checker. Each protocol's first row, `<protocol>.none`, is the unbroken protocol
under the same runs: it must pass both.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tabulate import tabulate

from testbed.core import deploy, options, protocols
from testbed.core.paths import REPO
from testbed.core.runtypes import Interrupted, RunError
from testbed.runs.local import LocalRunner

# name, what is broken, what it costs: safety (the end-to-end checker must catch it), latency (a test must),
# durability (a committed transaction would be lost if a replica failed at the wrong moment: the end-to-end checker
# must catch it, from the copies each reply names, whether or not that failure came),
# equivalent (the broken rule guards a state no execution of our engine reaches, so no run can show it: its own
# simulator test stages that state; an end-to-end catch would prove the claim wrong, and fails the row)
MUTANTS = [
    ("dast.none", "the protocol as built", "-"),
    ("dast.no_stretch", "the stretch disabled: fresh() never clamps below a pending CRT", "latency"),
    ("dast.watermark_local", "the execution watermark ignores the other handlers' clocks", "safety"),
    ("dast.one_ack", "an IRT commits on one stored copy per shard instead of 2 of 3", "durability"),
    ("dast.crt_at_proposal", "a replica executes a CRT at its own proposal, not at the decision", "safety"),
    ("dast.no_counter_proposal", "a T_r at or below the replica's clock is accepted as it is", "safety"),
    ("dast.decide_without_leader", "the coordinator decides on any 2 of 3 proposals per shard, the leader's or not",
     "safety"),
    ("dast.follower_skips_unstored", "a follower passes over a transaction of its leader's order it has not stored yet",
     "safety"),
    ("dast.pass_undecided", "the first decided entry of the queue executes past undecided CRTs below it", "safety"),
    ("dast.reply_on_home_result", "the coordinator answers once the home shard's result is in, not every shard's",
     "safety"),
    ("janus.none", "the protocol as built", "-"),
    ("janus.majority_replies", "the coordinator decides on a majority of PreAccept replies per shard, on the fast "
     "path too (2 of 3 agreeing commit without the Accept round)", "recovery"),
    ("janus.no_component_order", "members of a component run as they become ready, not by id", "safety"),
    ("janus.no_external_wait", "a component does not wait for its members' dependencies outside it", "safety"),
    ("janus.writes_only", "PreAccept ignores read keys (only writes make dependencies)", "safety"),
    ("janus.no_dependency_wait", "a transaction runs once its component is known, whatever it waits for", "safety"),
    ("janus.component_order_descending", "members of a component run by descending id, at every replica", "safety"),
    ("janus.slow_path_on_minority", "after the PreAccept timeout a shard is decided on 1 reply, not a majority's",
     "safety"),
    ("janus.no_pending_deps", "PreAccept replies name the direct predecessors only, so a decision on a majority may "
     "miss the one link between two conflicting transactions", "safety"),
    ("janus.timeout_skips_accept", "after the PreAccept timeout a majority's replies are committed without the "
     "Accept round", "recovery"),
    ("janus.reply_on_first_result", "the coordinator answers on the first shard's result, not on every shard's",
     "safety"),
    ("janus.settle_open", "a walk decides a component that reaches a transaction not committed here yet (its "
     "component may still grow)", "safety"),
    ("janus.mixes_epochs", "the coordinator counts a PreAccept reply of an older epoch beside the newer ones (a "
     "restarted replica's forgotten vote with its new one)", "safety"),
    ("janus.keeps_epoch", "a replica answers a restarted peer's Seal without moving to the new epoch: the fast path "
     "never comes back", "recovery"),
    ("janus.forgets_components", "a replica forgets each member of a decided component once it is settled there, as "
     "if it were a component of its own: a replica that asks of it learns the wrong component", "safety"),
    ("tapir.none", "the protocol as built", "-"),
    ("tapir.no_abstain", "Prepare ignores conflicting prepared or committed-unapplied transactions", "safety"),
    ("tapir.no_stale_check", "Prepare ignores the read versions", "safety"),
    ("tapir.apply_without_deps", "a Commit is applied on arrival, not after its dependencies", "safety"),
    # Equivalent: a replica that refused a transaction the coordinator then decided OK gets Finalize before Commit
    # on the same FIFO channel, and Finalize makes it hold the keys; the Commit-time hold this mutant removes is only
    # reached by a Commit without its Finalize (tests/mutants/README.md, "Equivalent mutants").
    ("tapir.unapplied_not_held", "a committed transaction not prepared here holds nothing until applied",
     "equivalent"),
    ("tapir.no_write_write", "the OCC check ignores write-write conflicts with prepared transactions", "safety"),
    ("tapir.reads_unvalidated", "Prepare validates the versions of the keys it writes only, not of those it reads",
     "safety"),
    ("tapir.timeout_on_minority", "after the Prepare timeout a shard is decided on 1 result of 3, not a majority's",
     "safety"),
    ("tapir.finalize_on_one", "a shard decided on the slow path counts once 1 replica confirmed its Finalize, not a "
     "majority", "recovery"),
    ("tapir.mixes_epochs", "the coordinator counts a Prepare result of an older epoch beside the newer ones (a "
     "restarted replica's forgotten vote with its new one)", "safety"),
    ("tapir.keeps_epoch", "a replica answers a restarted peer's Seal without moving to the new epoch: the fast quorum "
     "never comes back", "recovery"),
    ("slog.none", "the protocol as built", "-"),
    ("slog.no_conflict_wait", "an entry runs past earlier unfinished entries that hold its keys", "latency"),
    ("slog.reversed_batches", "replica 1 of every shard appends each batch in reverse", "safety"),
    ("slog.swapped_global_order", "the global log swaps consecutive indices for region 1", "safety"),
    ("slog.multi_home_jumps_log", "a multi-home entry waits for no earlier entry of the local log (the global log "
     "ordered it already)", "safety"),
    ("slog.reply_on_first_result", "the handler answers on the first shard's result, not on every shard's", "safety"),
    # a restarted replica's catch-up (src/core/recovery.h), protocol-neutral: run k under CRASH_TOLERANT[k % 4]
    ("recovery.none", "the catch-up as built", "-"),
    ("recovery.skips_event", "a source's catch-up leaves out the first event of each Part after its snapshot: the "
     "restarted replica skips a piece of a decided transaction (a gap)", "safety"),
    ("recovery.stops_when_caught_up", "the restarted replica executes nothing after the snapshot it took over, yet "
     "counts what its source sends as held", "safety"),
    ("recovery.votes_before_sealed", "a restarted replica votes as soon as it holds a state, in its peers' epoch, "
     "with no record of what they voted: its forgotten votes can be contradicted", "safety"),
    ("recovery.snapshot_skips_written", "a source's snapshot leaves out the first line of the history it wrote to "
     "disk: the restarted replica's history starts with a gap (a catch-up from a log truncated before it held "
     "it)", "safety"),
    ("recovery.reuses_epoch", "a restarted replica seals its peers in their own epoch, not a new one: its votes "
     "count beside those of the incarnation it replaced", "safety"),
]
# Each protocol's own simulator suites, beside the protocol-neutral one.
OWN_SUITES = {"dast": "DastSim.*:Executor.Dast*", "janus": "JanusSim.*", "tapir": "TapirSim.*", "slog": "SlogSim.*",
              "recovery": "Recovery.*:Registered/RestartSim.*"}
# The stress profile's protocol options: DAST without anticipation (its CRTs decided after their T_r).
STRESS_OPTIONS = {"dast": {"anticipation_margin_ms": -300}}
# Protocols that go on with a follower crashed for good (docs/fault-tolerance.md): their stress nemesis crashes one.
CRASH_TOLERANT = ("dast", "janus", "tapir", "slog")


def protocol_of(name: str) -> str:
    return name.split(".", 1)[0]


def mode_of(name: str, attempt: int) -> str:
    """The protocol a mutant's end-to-end run `attempt` runs: its own, or for the protocol-neutral catch-up's (recovery)
    each crash-tolerant protocol in turn."""
    p = protocol_of(name)
    return CRASH_TOLERANT[attempt % len(CRASH_TOLERANT)] if p == "recovery" else p


def sim_filter(protocol: str) -> str:
    own = OWN_SUITES.get(protocol)
    if protocol == "recovery":
        return own
    return (own + ":" if own else "") + f"Registered/ProtocolSim.*/{protocol}:Registered/RestartSim.*/{protocol}"


def sh(cmd, log: Path, timeout: float) -> int:
    with open(log, "ab") as f:
        f.write(("\n$ " + " ".join(map(str, cmd)) + "\n").encode())
        f.flush()
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write(f"timed out after {timeout:g} s\n".encode())
            return -1


def snapshot_source(dest: Path) -> Path:
    """Copy the tree's files as they are now (tracked and untracked, not ignored) to `dest`, and return it: every
    mutant builds from this copy, so editing the tree during a run (an hour or more) changes nothing it builds. A
    file already there with the same bytes is left alone (its time too), so ninja rebuilds only what changed since the
    last run."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           check=True, capture_output=True).stdout.decode().split("\0")
    wanted = set()
    for rel in filter(None, files):
        src, dst = REPO / rel, dest / rel
        if not src.is_file():   # deleted but still in the index
            continue
        wanted.add(dst)
        if dst.is_file() and filecmp.cmp(src, dst, shallow=False):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    for old in [p for p in dest.rglob("*") if p.is_file() and p not in wanted]:   # a file since removed from the tree
        old.unlink()
    return dest


def build(name: str, source: Path, build_dir: Path, log: Path) -> None:
    mutant = "" if name.endswith(".none") else name
    cache = build_dir / "CMakeCache.txt"
    if cache.is_file() and f"CMAKE_HOME_DIRECTORY:INTERNAL={source}\n" not in cache.read_text():
        cache.unlink()   # configured from another source tree (the repository itself, before the copy was made)
        shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)
    if sh(["cmake", "-S", str(source), "-B", str(build_dir), "-G", "Ninja", f"-DMUTANT={mutant}", "-DDAST_MUTANT="],
          log, 300) != 0:
        raise RuntimeError(f"cmake failed for {name} (see {log})")
    if sh(["ninja", "-C", str(build_dir), "-j2", "txn-server", "txn-client", "txn-replay", "unit_tests"],
          log, 3600) != 0:
        raise RuntimeError(f"build failed for {name} (see {log})")


def sim_tests(protocol: str, build_dir: Path, log: Path) -> str:
    out = build_dir / "mutant-sim.txt"
    with open(out, "wb") as f:
        try:
            rc = subprocess.run([str(build_dir / "unit_tests"), f"--gtest_filter={sim_filter(protocol)}"], stdout=f,
                                stderr=subprocess.STDOUT, timeout=900).returncode
        except subprocess.TimeoutExpired:
            return "CAUGHT (hung)"
    text = out.read_text(errors="replace")
    with open(log, "a") as f:
        f.write(text)
    failed = sorted(set(re.findall(r"^\[  FAILED  \] (\S+?)(?: \(|,|$)", text, re.M)))
    if rc == 0 and not failed:
        return "passed"
    short = [x.removeprefix("Registered/") for x in failed[:2]]
    names = ", ".join(short) + (", ..." if len(failed) > 2 else "")
    return f"CAUGHT {len(failed)}: {names}" if failed else f"CAUGHT (exit {rc})"


def e2e_deployment(protocol: str, profile: str, duration: float, base_port: int, attempt: int = 0,
                   workload: str = "alternate") -> dict:
    """3 x 2. Attempt k runs with seed k + 1. The first and third (every even attempt) run the anomaly workload
    (`append`: 4 hot lists per shard, 30 % cross-region; the checker infers every key's version order and names
    the anomaly class of a cycle, docs/checker.md); the second (every odd one) TPC-C with districts drawn per
    transaction (conflicts at any load) and 60 % of Payments cross-region (a CRT, a SLOG multi-home entry, in about
    a third of the transactions instead of a tenth: two in a row is what slog.swapped_global_order needs).
    (`workload` "append" or "tpcc": every run that one.)
    `stress` adds 4 coordinators per client, cross-region jitter, the nemesis (stress_faults) with every node in a
    process of its own (a paused follower is one replica, not its shard's container, and a shard's replicas stop
    sharing one event loop), and for DAST no anticipation (a margin far below zero): CRTs are decided later than
    their T_r and replicas counter-propose, so what depends on the decision shows. `plain` is the default load."""
    knobs = dict(regions=3, shards=2, duration=duration, warmup=1, cooldown=1, base_port=base_port, name="mutants",
                 seed=attempt + 1)
    if workload == "tpcc" or (workload == "alternate" and attempt % 2):
        knobs.update(workload="tpcc", district="uniform", payment_crt_rate=60)
    else:
        knobs.update(workload="append", append_keys=4, append_crt_ratio=0.3)
    if profile == "stress":
        knobs.update(concurrency=4, jitter=10, protocol_options=STRESS_OPTIONS.get(protocol, {}),
                     faults=stress_faults(duration, crash=protocol in CRASH_TOLERANT, seed=attempt + 1),
                     faults_seed=attempt + 1,
                     processes="node")
    return deploy.build_deployment(mode=protocol, **knobs)


def stress_faults(duration: float, crash: bool = False, seed: int = 1, shards: int = 2) -> str:
    """The stress runs' nemesis (docs/nemesis.md), scaled to the run: two replicas of a shard with their protocol
    clocks a few ms apart and a region's clock ahead for a while, jitter inside every region for most of the run
    (channels stay FIFO, but a replica's messages from different senders interleave differently at each replica:
    the replicas stop making the same race alike, and a coordinator's first replies come from different replicas),
    followers' processes paused one after another (each a different follower of the seed's choice; at its SIGCONT a
    replica reads what queued up on its connections in the order its event loop serves them, not the order it was
    sent in: what the other replicas of its shard got in one order it may get in another), a region partitioned and
    healed, and in every region one follower (the seed's choice) that hears the other regions 150 ms late for most
    of the run (a congested path into one replica: its shard's other replicas decide and apply a cross-region
    transaction, a transaction of the region that depends on it is decided, and its Commit, sent inside the region,
    reaches that follower before the cross-region one's own messages do). With `crash`, a follower (the seed's
    choice) of region 1 is killed between the first two pauses, unannounced (the engine reads no plan): what a replica
    decided on the others' votes must hold without it, and nothing its peers saw committed may be lost (the
    durability check); it is restarted empty before the second pause, a quarter of the way into the run, and must
    take over a live replica's state, vote again where its protocol says how, and end as its peers with most of the
    run's load still to come; a follower of region 2 the same way just past halfway (docs/nemesis.md). Over the first
    rejoin the restarted follower's sibling (the other follower of its shard), which is its region's follower that
    hears the other regions 150 ms late, also hears its own region 800 ms late (a congested path inside the region,
    from just before the restart for a second): the rejoin's Seal reaches it 800 ms after replica 0, so for about
    800 ms replica 0 answers the other regions' rounds in the new epoch and the sibling in the old one, its answer
    reaching the coordinator 150 ms after replica 0's (a vote from before the seal arriving after one from after it,
    in every such round: what a coordinator that counts votes of two epochs as one quorum needs to show; measured in
    tests/mutants/README.md, "The rejoin's window")."""
    def t(x):
        return round(duration * x, 2)
    pauses = [f"pause:follower@{t(x)}+{min(1.0, t(0.05))}" for x in (0.2, 0.3, 0.4, 0.5, 0.7, 0.8)]
    # down between the first pause's end and the second's start, and another region's follower between the fourth
    # pause's end and the partition: no pause of either falls while it is down, and each restart is a rejoin (a seal
    # of its shard's other replicas) with load before and after it
    pl = min(1.0, t(0.05))
    crashes = [(1, round(t(0.2) + pl + 0.1, 2), round(t(0.3) - 0.05, 2)),
               (2, round(t(0.5) + pl + 0.1, 2), round(t(0.6) - 0.05, 2))]
    rng = random.Random(seed)
    down = {r: (rng.randrange(shards), rng.choice((1, 2))) for r, _, _ in crashes} if crash else {}
    # the follower of each region that hears the other regions late; with `crash`, region 1's is the restarted
    # follower's sibling, which over the rejoin also hears its own region late (its Seal among what comes late), and
    # the pause of the rejoin's time is of a follower of region 0 (the sibling answers on through the rejoin)
    slow = {r: f"follower-r{r}" for r in range(3)}
    late = []
    if crash:
        sibling = f"s1.{down[1][0]}.{3 - down[1][1]}"
        slow[1] = sibling
        late = [f"spike:r1>{sibling}+800ms@{round(crashes[0][2] - 0.05, 2)}+{pl}"]
        pauses[1] = f"pause:follower-r0@{t(0.3)}+{pl}"
    return "; ".join([f"clock:s0.0.1+3ms@{t(0.05)}", f"clock:s0.1.2-3ms@{t(0.05)}",
                      f"clock:r1+20ms@{t(0.15)}+{t(0.3)}", *(f"jitter:r{r}+12ms@{t(0.05)}+{t(0.9)}" for r in range(3)),
                      *pauses, f"partition:r2@{t(0.6)}+{min(2.0, t(0.1))}",
                      *(f"spike:*>{slow[r]}+150ms@{t(0.05)}+{t(0.9)}" for r in range(3)), *late,
                      *(f"crash:s{r}.{down[r][0]}.{down[r][1]}@{a}+{round(b - a, 2)}" for r, a, b in crashes
                        if r in down)])


def e2e(name: str, build_dir: Path, out_root: Path, profile: str, duration: float, base_port: int,
        log: Path, attempt: int = 0, workload: str = "alternate") -> str:
    os.environ["EDGE_TXN_REPLAY"] = str(build_dir / "txn-replay")
    os.environ[protocols.BINARY_ENV] = str(build_dir / "txn-server")   # the registry of the build under test
    # replicas write their histories as they go, keeping 256 events in memory (not 1,024): a 20 s run writes most
    # of them before a follower restarts, so a catch-up takes its source's written lines (docs/checker.md)
    os.environ["TXN_HISTORY_KEEP"] = "256"
    try:
        dep = e2e_deployment(mode_of(name, attempt), profile, duration, base_port, attempt, workload)
        res = LocalRunner(build_dir=build_dir, progress=False).run(dep, f"mutant-{name}-{profile}-{attempt + 1}",
                                                                   out_root=out_root)
    except Interrupted:
        raise   # a stop of the harness itself (Ctrl-C, SIGTERM), not a verdict on the mutant
    except RunError as e:
        with open(log, "a") as f:
            f.write(f"run failed: {e}\n")
        return f"CAUGHT (run failed: {str(e).splitlines()[0][:60]})"
    with open(log, "a") as f:
        f.write(f"run folder {res.run_dir}\n" + "\n".join(res.check.get("violations", [])[:40]) + "\n")
    if res.check.get("exit_code") == 0:
        return "passed"
    if res.check.get("exit_code") == 2:
        return f"CAUGHT (unreadable: {res.check.get('error', '')[:60]})"
    failed = [k for k, c in res.check["checks"].items() if c["verdict"] == "fail"]
    return "CAUGHT: " + ", ".join(failed)


def verdict(kind: str, sim: str, e2e_: str) -> str:
    caught_sim, caught_e2e = sim.startswith("CAUGHT"), e2e_.startswith("CAUGHT")
    if kind == "-":
        return "ok" if not caught_sim and not caught_e2e else "BROKEN BASELINE"
    if kind in ("safety", "durability"):
        return "ok" if caught_e2e else "MISSED by the end-to-end checker"
    if kind == "equivalent":
        if caught_e2e:
            return "NOT EQUIVALENT: caught end to end (a run reached the state it was said to never reach)"
        return "ok" if caught_sim else "MISSED by its simulator test"
    return "ok" if caught_sim or caught_e2e else "MISSED"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated mutant names, e.g. dast.no_stretch (default: all)")
    ap.add_argument("--protocols", help="comma-separated protocols whose mutants run (default: all)")
    options.add_build_dir(ap, str(REPO / "build-mutants"))
    options.add_results_root(ap, default=str(REPO / "results"))
    ap.add_argument("--duration", type=float, default=20, help="end-to-end run length, s (default %(default)s)")
    ap.add_argument("--runs", type=int, default=5,
                    help="end-to-end runs (seeds differ; the odd ones run the anomaly workload, the even ones TPC-C): "
                         "a safety or "
                         "durability mutant is run until one catches it, the unbroken protocol must pass them all; "
                         "latency and recovery mutants run once; an equivalent one runs them all and must pass them (default %(default)s)")
    ap.add_argument("--profile", choices=("stress", "plain"), default="stress",
                    help="end-to-end run: stress (default: 4 coordinators per client, jitter, no anticipation) "
                         "or plain (the default load); both alternate the anomaly workload and TPC-C")
    ap.add_argument("--workload", choices=("alternate", "append", "tpcc"), default="alternate",
                    help="end-to-end runs' workload: alternate (default: the anomaly workload, then TPC-C, ...), or "
                         "every run the one named (e.g. `--only dast.none --runs 20 --workload append`: 20 unbroken "
                         "runs under the nemesis with the anomaly workload, none may fail)")
    ap.add_argument("--base-port", type=int, default=27000)
    ap.add_argument("--no-e2e", action="store_true", help="sim tests only")
    a = ap.parse_args(argv)
    if not 1 <= a.runs <= 20:
        print(f"mutants: error: --runs {a.runs}: must be in [1, 20]", file=sys.stderr)
        return 2
    names = [m[0] for m in MUTANTS]
    chosen = a.only.split(",") if a.only else names
    unknown = set(chosen) - set(names)
    if unknown:
        print(f"mutants: error: unknown mutant(s) {', '.join(sorted(unknown))} (known: {', '.join(names)})",
              file=sys.stderr)
        return 2
    if a.protocols:
        protocols = a.protocols.split(",")
        bad = set(protocols) - {protocol_of(n) for n in names}
        if bad:
            print(f"mutants: error: no mutants for protocol(s) {', '.join(sorted(bad))} "
                  f"(known: {', '.join(dict.fromkeys(protocol_of(n) for n in names))})", file=sys.stderr)
            return 2
        chosen = [n for n in chosen if protocol_of(n) in protocols]
    build_dir, out_root = Path(a.build_dir), Path(a.out) / "mutants"
    build_dir.mkdir(parents=True, exist_ok=True)
    source = snapshot_source(build_dir / "source")
    print(f"mutants: building from a copy of the tree as it is now ({source})", file=sys.stderr, flush=True)
    rows = []
    for name, what, kind in MUTANTS:
        if name not in chosen:
            continue
        log = build_dir / f"mutant-{name}.log"
        log.write_text("")
        t0 = time.monotonic()
        print(f"[{name}] building", file=sys.stderr, flush=True)
        build(name, source, build_dir, log)
        print(f"[{name}] sim tests", file=sys.stderr, flush=True)
        sim = sim_tests(protocol_of(name), build_dir, log)
        e = "-"
        if not a.no_e2e:
            runs = a.runs if kind in ("-", "safety", "durability", "equivalent") else 1
            for k in range(runs):
                print(f"[{name}] end-to-end run {k + 1} of at most {runs} ({a.profile}, {a.duration:g} s)",
                      file=sys.stderr, flush=True)
                e = e2e(name, build_dir, out_root, a.profile, a.duration, a.base_port, log, k, a.workload)
                if e.startswith("CAUGHT"):
                    e = f"{e} (run {k + 1})" if runs > 1 else e
                    break
            else:
                e = f"{e} ({runs} runs)" if runs > 1 else e
        rows.append((name, kind, sim, e, verdict(kind, sim, e) if not a.no_e2e else "-"))
        print(f"[{name}] sim: {sim}; end-to-end: {e} ({time.monotonic() - t0:.0f} s; log {log})", file=sys.stderr,
              flush=True)
    head = ("mutant", "breaks", "sim tests (C++)", f"end-to-end checker ({a.profile} runs)", "verdict")
    # a markdown table; cells as given (no number parsing)
    print(tabulate(rows, head, tablefmt="github", disable_numparse=True))
    for name, what, _ in MUTANTS:
        if name in chosen:
            print(f"  {name}: {what}")
    return 0 if all(r[4] in ("ok", "-") for r in rows) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Interrupted as e:
        print(f"mutants: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
