#!/usr/bin/env python3
"""Benchmark (not a test): the built protocols side by side at one load on the local backend.

Runs each protocol after the other with the same knobs (default: every protocol built into txn-server, at the
lowest load of exp 1) and prints, per protocol: IRT and CRT p50/p99 beside their uncontended floors (the
protocol's own, docs/protocols/<name>.md, in RTTs of this deployment), the abort/retry rate, the transactions
given up, the engine's committed transactions per CPU second (all server, role and client processes, whole
run; beside it the floor: the same deployment's protocol and workload code on the simulator, no transport, from
txn-sim), the engine processes' wake-ups per committed transaction (beside them txn-sim's count of the wake-ups
the layout and the protocol need: each process woken only when a message or timer falls due), the host's busy
share and the checker's verdict; below the table, what this host charges per wake-up (txn-wakecost) and so what an
engine costing nothing of its own could reach here at that load (the host limit). Usage: `make bench` or
`.venv/bin/python scripts/bench.py [--protocols dast,janus]`.

`--saturate` instead raises the load, exp 1's way (coordinators per client process: 1, 2, 4, ...), per protocol
until the host passes --busy-limit % busy or a point fails, and prints the table of where the host, not the
protocol, starts to set the numbers (docs/efficiency.md).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from testbed.core import knobs, options, protocols
from testbed.core.paths import REPO
from testbed.core.deploy import build_deployment, processes as deploy_processes
from testbed.runs.local import LocalRunner as LocalBackend
from testbed.core.runtypes import RunError
from testbed.core.tables import text_table
from testbed.analysis.results import format_table

# Uncontended floors in intra-region (d) and cross-region (D) round trips: (IRT, CRT). DAST: IRT 2d, CRT 2D
# (docs/protocols/dast.md). Janus: a round of PreAccept, then Commit out and the shards' results back: IRT 2d,
# CRT 2D (docs/protocols/janus.md). TAPIR: a read round (at the coordinator itself for a one-shard IRT) and a
# Prepare round: IRT 2d with the client's hop, CRT 2D (docs/protocols/tapir.md). SLOG: the local log's hops and its
# backup copy, IRT 3d; a CRT homed in the global log's region adds the follower round and the hops to and from the
# other region, 2D + 3d (the batch tick, up to batch_interval_ms, not included; docs/protocols/slog.md). A protocol
# without an entry shows no floor.
FLOORS = {"dast": ((2, 0), (0, 2)), "janus": ((2, 0), (0, 2)), "tapir": ((2, 0), (0, 2)), "slog": ((3, 0), (3, 2))}
TARGETS_MS = {"dast": (15.0, 225.0)}  # DAST's own goals: IRT p99, CRT p99 (the paper's claim on our RTTs)


def floor_ms(mode: str, cls: int, intra: float, inter: float):
    f = FLOORS.get(mode)
    return None if f is None else f[cls][0] * intra + f[cls][1] * inter


def run_one(mode: str, a, concurrency=None, floor=True) -> dict:
    knobs = dict(name=f"bench-{mode}", mode=mode, duration=a.duration, warmup=3, cooldown=2,
                 concurrency=concurrency or a.concurrency, workload=a.workload, clients_per_shard=1,
                 processes=a.processes,
                 transport=a.transport, delivery_grid_us=a.delivery_grid_us,
                 protocol_options=a.options.get(mode, {}))
    try:
        d = build_deployment(**knobs)
    except ValueError as e:
        print(f"bench: {mode}: {e}", file=sys.stderr)
        return dict(mode=mode, failed=str(e))
    t0 = time.monotonic()
    try:
        r = LocalBackend(build_dir=a.build_dir).run(d, f"bench-{mode}", config=knobs)
    except RunError as e:
        print(f"bench: {mode}: run failed: {e}", file=sys.stderr)
        return dict(mode=mode, failed=str(e))
    s, meta = r.summary, json.loads((r.run_dir / "meta.json").read_text())
    floor = sim_floor(a.build_dir, r.run_dir / "deploy.yml") if floor else {}
    print(f"--- {mode} ({time.monotonic() - t0:.0f} s, {r.run_dir})")
    print(format_table(s))
    intra, inter = d["link"]["rtt_ms"][0][0], d["link"]["rtt_ms"][0][1]
    irt, crt = s["classes"]["IRT"], s["classes"]["CRT"]
    recs = pd.concat(pd.read_csv(p) for p in (r.run_dir / "clients").glob("*.records.csv"))
    all_commits = int((recs["status"] == "committed").sum())
    cpu = meta.get("cpu_seconds") or 0
    wakeups = meta.get("engine_wakeups")
    attempts = irt.get("aborts", 0) + crt.get("aborts", 0)
    started = irt["latency_samples"] + crt["latency_samples"] + irt["given_up"] + crt["given_up"]
    return dict(mode=mode, irt_p50=irt["p50_ms"], irt_p99=irt["p99_ms"], crt_p50=crt["p50_ms"], crt_p99=crt["p99_ms"],
                irt_floor=floor_ms(mode, 0, intra, inter), crt_floor=floor_ms(mode, 1, intra, inter),
                retries=attempts / started if started else 0.0, given_up=irt["given_up"] + crt["given_up"],
                per_cpu_s=all_commits / cpu if cpu > 0 else None, cpu_s=cpu, commits=all_commits,
                wakeups_per_txn=wakeups / all_commits if wakeups is not None and all_commits else None,
                per_s=s.get("throughput_tps"), concurrency=knobs["concurrency"],
                clients_per_region=d["shards_per_region"] * knobs["concurrency"],
                host_busy=meta.get("machine_cpu", {}).get("busy_pct"),
                floor_per_cpu_s=floor.get("txn_per_cpu_s"),
                floor_wakeups=floor["wakeups"] / floor["committed"] if floor.get("committed") and "wakeups" in floor
                else None,
                verdict=r.check["verdict"], counters=s.get("counters", {}), intra=intra, inter=inter,
                mechanism=d["link"]["mechanism"],
                shape=f"{d['regions']} regions x {d['shards_per_region']} shards x 3 replicas, {a.workload}, "
                      f"{knobs['concurrency']} coordinator(s) per client process, shaping {d['link']['mechanism']}, "
                      f"engine processes per {a.processes} ({len(deploy_processes(d['nodes']))} processes)")


def run_json(build_dir: Path, program: str, args: list, timeout: float) -> dict:
    """One of the build's programs that prints a JSON line (the build dir's own, else build/'s); {} when it is not
    built or fails."""
    exe = Path(build_dir) / program
    if not exe.is_file():
        exe = REPO / "build" / program
    try:
        p = subprocess.run([str(exe)] + args, capture_output=True, text=True, timeout=timeout)
        return json.loads(p.stdout) if p.returncode == 0 else {}
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}


def sim_floor(build_dir: Path, deploy_yml: Path) -> dict:
    """The engine's floor for the same deployment: txn-sim runs its protocol and workload code on the simulated
    network, no transport (docs/efficiency.md); {} when txn-sim is not built or fails."""
    return run_json(build_dir, "txn-sim", ["--config", str(deploy_yml), "--json"], timeout=600)


def host_wake_cost(build_dir: Path) -> dict:
    """What this host charges a process per wake-up before any work (txn-wakecost: waits ended by a timer and by
    another process's frame, 2,000 each, 1 ms apart); {} when it is not built or fails."""
    return run_json(build_dir, "txn-wakecost", [], timeout=120)


def wake_end(mechanism: str) -> str:
    """What ends a wait for a message falling due: a timer where the engine keeps the delays (shaping `app`), a
    frame where the kernel keeps them (netem) or there are none."""
    return "timer" if mechanism == "app" else "frame"


def host_limit(floor_wakeups, floor_per_cpu_s, wake: dict, mechanism: str):
    """Committed txn per CPU s that an engine costing nothing of its own would reach here: the wake-ups the layout
    and the protocol need (txn-sim's count: each a message or timer falling due) at this host's cost, plus the
    protocol's and workload's own work as txn-sim runs it (hot; its bookkeeping included); each of those wake-ups
    at the cost of what ends it (wake_end). None without the three."""
    w = wake.get(f"{wake_end(mechanism)}_wake_us")
    if not (floor_wakeups and floor_per_cpu_s and w):
        return None
    return 1e6 / (floor_wakeups * w + 1e6 / floor_per_cpu_s)


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def saturate(modes: list, a) -> int:
    """Per protocol, concurrency 1, 2, 4, ... up to --max-concurrency, until the host passes --busy-limit % busy
    or a point fails (its row says why); prints one table. 0 when every point run is CONSISTENT."""
    head = ["protocol", "coord.", "clients/region", "txn/s", "txn/CPU s", "wake-ups/txn", "host %", "IRT p99",
            "CRT p99", "retries", "gave up", "verdict"]
    table, ok = [], True
    for mode in modes:
        c = 1
        while c <= a.max_concurrency:
            print(f"bench: saturate {mode}: {c} coordinator(s) per client process", file=sys.stderr, flush=True)
            r = run_one(mode, a, concurrency=c, floor=False)   # the floor's simulation is not needed here
            if "failed" in r:
                table.append([mode, str(c)] + [""] * 9 + [f"FAILED: {r['failed']}"])
                ok = False
                break
            table.append([mode, str(c), str(r["clients_per_region"]), fmt(r["per_s"]), fmt(r["per_cpu_s"]),
                          fmt(r["wakeups_per_txn"]), fmt(r["host_busy"], ".0f"), fmt(r["irt_p99"]),
                          fmt(r["crt_p99"]), f"{r['retries']:.3f}", str(r["given_up"]), r["verdict"]])
            ok = ok and r["verdict"] == "CONSISTENT"
            if r["verdict"] != "CONSISTENT" or (r["host_busy"] or 0) > a.busy_limit:
                break
            c *= 2
    print()
    print(f"host saturation: load doubled per protocol until the host passed {a.busy_limit:g} % busy "
          f"({a.duration:g} s per point)")
    print(text_table(head, table, left=(0, 11)))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocols", default="", help="comma-separated modes (default: every built protocol)")
    ap.add_argument("--duration", type=float, default=40, help="seconds per protocol (default %(default)s)")
    options.add_knob(ap, "concurrency", 1)
    options.add_choice(ap, "workload", knobs.default("workload"))
    options.add_choice(ap, "processes", knobs.default("processes"))
    options.add_choice(ap, "transport", knobs.default("transport"))
    options.add_knob(ap, "delivery_grid_us", knobs.default("delivery_grid_us"))
    options.add_build_dir(ap, str(REPO / "build"))
    ap.add_argument("--option", action="append", default=[], metavar="MODE.NAME=VALUE",
                    help="a protocol option for that protocol's run, e.g. dast.defer_commutative=false (the "
                         "artifact's hold of a cross-region input wait); repeatable")
    ap.add_argument("--saturate", action="store_true",
                    help="raise the coordinators per client process (1, 2, 4, ...) per protocol until the host "
                         "passes --busy-limit %% busy (exp 1 extended upward); --concurrency is then ignored")
    ap.add_argument("--busy-limit", type=float, default=70.0, help="--saturate's stop, in %% host busy "
                    "(default %(default)s)")
    ap.add_argument("--max-concurrency", type=int, default=256, help="--saturate's highest load, in coordinators "
                    "per client process (default %(default)s)")
    a = ap.parse_args()
    if not 0 < a.busy_limit <= 100:
        print(f"bench: --busy-limit {a.busy_limit:g}: expected a share of the host in (0, 100]", file=sys.stderr)
        return 2
    if not 1 <= a.max_concurrency <= 256:
        print(f"bench: --max-concurrency {a.max_concurrency}: expected 1-256", file=sys.stderr)
        return 2
    a.options = {}
    for o in a.option:
        key, eq, value = o.partition("=")
        mode, dot, name = key.partition(".")
        if not (eq and dot and mode and name):
            print(f"bench: --option {o!r}: expected MODE.NAME=VALUE", file=sys.stderr)
            return 2
        a.options.setdefault(mode, {})[name] = options.option_value(value)
    server = Path(a.build_dir) / "txn-server"
    if server.exists():   # the protocols and options of the binaries compared (another commit's may differ)
        os.environ[protocols.BINARY_ENV] = str(server)
    built = protocols.load().names()
    modes = [m for m in a.protocols.split(",") if m] or built
    unknown = [m for m in modes + list(a.options) if m not in built]
    if unknown:
        try:   # a name no protocol has is a typo (with a near miss), a real one is not built
            protocols.check_name(unknown[0], f"bench: --protocols: {unknown[0]!r}")
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
        print(f"bench: --protocols: {unknown[0]!r} is not built (built: {', '.join(built)})", file=sys.stderr)
        return 2
    if a.saturate:
        return saturate(modes, a)
    wake = host_wake_cost(a.build_dir)   # before the runs, on the host as quiet as they find it
    rows = [run_one(m, a) for m in modes]
    ok = [r for r in rows if "failed" not in r]
    print()
    if ok:
        print(f"{ok[0]['shape']}; RTT {ok[0]['intra']:g} ms in a region, {ok[0]['inter']:g} ms across")
    head = ["protocol", "IRT p50", "IRT p99", "floor", "CRT p50", "CRT p99", "floor", "retries", "gave up",
            "txn/CPU s", "floor", "CPU s", "wake-ups/txn", "floor", "host %", "verdict"]
    table = []
    for r in rows:
        if "failed" in r:  # no numbers: the reason goes where the verdict would
            table.append([r["mode"]] + [""] * 14 + [f"FAILED: {r['failed']}"])
            continue
        table.append([r["mode"], fmt(r["irt_p50"]), fmt(r["irt_p99"]), fmt(r["irt_floor"]), fmt(r["crt_p50"]),
                      fmt(r["crt_p99"]), fmt(r["crt_floor"]), f"{r['retries']:.3f}", str(r["given_up"]),
                      fmt(r["per_cpu_s"]), fmt(r["floor_per_cpu_s"], ".0f"), f"{r['cpu_s']:.1f}",
                      fmt(r["wakeups_per_txn"]), fmt(r["floor_wakeups"]), fmt(r["host_busy"], ".0f"),
                      r["verdict"]])
    print(text_table(head, table, left=(0, 15)))
    if wake:
        print(f"host: a wake-up costs {wake['timer_wake_us']:.1f} us of CPU at a timer, {wake['frame_wake_us']:.1f} us "
              f"at another process's frame, before any work (txn-wakecost, {wake['waits']} waits each)")
    for r in ok:
        lim = host_limit(r["floor_wakeups"], r["floor_per_cpu_s"], wake, r["mechanism"])
        if lim:
            print(f"{r['mode']} host limit: about {lim:,.0f} committed txn per CPU s at this load for an engine that "
                  f"costs nothing of its own ({r['floor_wakeups']:.2f} wake-ups per committed txn, each at a "
                  f"{wake_end(r['mechanism'])}, and the floor's work); the engine reached "
                  f"{fmt(r['per_cpu_s'], ',.0f')}")
    for r in ok:
        t = TARGETS_MS.get(r["mode"])
        if t:
            print(f"{r['mode']} targets: IRT p99 <= {t[0]:g} ms ({'met' if (r['irt_p99'] or 1e9) <= t[0] else 'NOT met'}), "
                  f"CRT p99 <= {t[1]:g} ms ({'met' if (r['crt_p99'] or 1e9) <= t[1] else 'NOT met'})")
        if r["counters"]:
            print(f"{r['mode']} counters: " + ", ".join(f"{k} {v}" for k, v in sorted(r["counters"].items())))
    return 0 if len(ok) == len(rows) and all(r["verdict"] == "CONSISTENT" for r in ok) else 1


if __name__ == "__main__":
    sys.exit(main())
