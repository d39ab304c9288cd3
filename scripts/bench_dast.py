#!/usr/bin/env python3
"""Benchmark (not a test): DAST at low load on the local backend.

Prints IRT and CRT p50/p99 beside their floors (IRT: 2 intra-region RTTs, CRT: 2 cross-region
RTTs) and the targets, and the engine's committed transactions per CPU second (all server,
manager and client processes). Usage: `make bench` or `.venv/bin/python scripts/bench_dast.py`.
"""
import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testbed.deploy import build_deployment  # noqa: E402
from testbed.local import LocalRunner as LocalBackend  # noqa: E402
from testbed.runtypes import RunError  # noqa: E402
from testbed.results import format_table  # noqa: E402

IRT_P99_TARGET_MS, CRT_P99_TARGET_MS = 15.0, 225.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=40, help="seconds (default %(default)s: ~550 CRTs in the window)")
    ap.add_argument("--concurrency", type=int, default=1, help="closed-loop coordinators per client process")
    ap.add_argument("--workload", default="tpcc", choices=["tpcc", "tpca"])
    ap.add_argument("--hold-input-waits", action="store_true",
                    help="protocols.dast.defer_commutative: false (the artifact's way: a region holds a CRT's timestamp "
                         "pending until its cross-region input arrives, and later CRTs there wait)")
    a = ap.parse_args()
    knobs = dict(name="bench-dast", duration=a.duration, warmup=3, cooldown=2, concurrency=a.concurrency,
                 workload=a.workload, clients_per_shard=1,
                 protocol_options={"defer_commutative": not a.hold_input_waits})
    d = build_deployment(**knobs)
    try:
        r = LocalBackend().run(d, "bench-dast", config=knobs)
    except RunError as e:
        print(f"bench: run failed: {e}", file=sys.stderr)
        return 1
    s, meta = r.summary, json.loads((r.run_dir / "meta.json").read_text())
    intra, inter = d["link"]["rtt_ms"][0][0], d["link"]["rtt_ms"][0][1]
    irt, crt = s["classes"]["IRT"], s["classes"]["CRT"]
    committed = sum(s["classes"][c]["committed"] for c in ("IRT", "CRT"))
    print(format_table(s))
    print()
    print(f"DAST, {d['regions']} regions x {d['shards_per_region']} shards x 3 replicas, "
          f"{a.workload}, {a.concurrency} coordinator(s) per client process, shaping {d['link']['mechanism']}, "
          f"cross-region input waits {'held' if a.hold_input_waits else 'deferred where commutative'}")
    rows = [("IRT p50", irt["p50_ms"], 2 * intra, None), ("IRT p99", irt["p99_ms"], 2 * intra, IRT_P99_TARGET_MS),
            ("CRT p50", crt["p50_ms"], 2 * inter, None), ("CRT p99", crt["p99_ms"], 2 * inter, CRT_P99_TARGET_MS)]
    print(f"{'metric':8} {'measured ms':>12} {'floor ms':>9} {'target ms':>10}  verdict")
    for name, v, floor, target in rows:
        verdict = "" if target is None or v is None else ("meets target" if v <= target else "ABOVE target")
        vs = "-" if v is None else f"{v:.1f}"
        print(f"{name:8} {vs:>12} {floor:>9.1f} {('-' if target is None else f'{target:.0f}'):>10}  {verdict}")
    cpu = meta.get("cpu_seconds") or 0
    recs = pd.concat(pd.read_csv(p) for p in (r.run_dir / "clients").glob("*.records.csv"))
    all_commits = int((recs["status"] == "committed").sum())
    print(f"committed in the window: {committed}; over the whole run: {all_commits}")
    if cpu > 0:
        print(f"engine: {all_commits / cpu:.1f} committed txns per CPU second "
              f"({cpu:.1f} CPU s over all {len(meta.get('processes', {}))} processes, whole run)")
    print(f"consistency: {r.check['verdict']}")
    print(f"run folder: {r.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
