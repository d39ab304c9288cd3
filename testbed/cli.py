"""Command line of run_local.py: one local run, summary table, checker verdict."""
from __future__ import annotations

import argparse
import sys

from . import deploy as deploylib
from .backend import LocalBackend
from .local import RunError
from .results import format_table


def parse_args(argv=None) -> argparse.Namespace:
    d = deploylib.DEFAULTS
    ap = argparse.ArgumentParser(description="Run one deployment as local processes on 127.0.0.1 "
                                             "(results/<name>/<run-id>/).")
    ap.add_argument("--regions", type=int, default=d["regions"], help="R, regions (default %(default)s)")
    ap.add_argument("--shards", type=int, default=d["shards"], help="N, shards per region (default %(default)s)")
    ap.add_argument("--clients-per-shard", type=int, default=d["clients_per_shard"], help="client processes per shard")
    ap.add_argument("--concurrency", type=int, default=d["concurrency"], help="closed-loop coordinators per client")
    ap.add_argument("--duration", type=float, default=d["duration"], help="client run time, s")
    ap.add_argument("--warmup", type=float, default=d["warmup"], help="trimmed from the window start, s")
    ap.add_argument("--cooldown", type=float, default=d["cooldown"], help="trimmed from the window end, s")
    ap.add_argument("--mode", default=d["mode"], help=f"protocol: {'|'.join(deploylib.MODES)}")
    ap.add_argument("--workload", default=d["workload"], help="tpcc|tpca")
    ap.add_argument("--scale", type=float, default=d["scale"], help="table sizes x scale")
    ap.add_argument("--zipf", type=float, default=d["zipf"], help="tpca zipf coefficient in [0,1]")
    ap.add_argument("--payment-crt-rate", type=int, default=d["payment_crt_rate"],
                    help="-1 natural, 0..100 %% of Payments forced cross-region")
    ap.add_argument("--jitter", type=float, default=d["jitter"], help="one-way delay jitter std-dev, ms")
    ap.add_argument("--intra-rtt", type=float, default=d["intra_rtt"], help="intra-region RTT, ms")
    ap.add_argument("--inter-rtt", type=float, default=d["inter_rtt"], help="cross-region RTT, ms")
    ap.add_argument("--hold-input-waits", dest="defer_commutative", action="store_false",
                    help="DAST: hold a CRT's timestamp in its region until its cross-region input arrives "
                         "(the artifact's way) instead of deferring commutative pieces")
    ap.add_argument("--base-port", type=int, default=d["base_port"], help="first port tried")
    ap.add_argument("--name", default=d["name"], help="results/<name>/...")
    ap.add_argument("--out", default="results", help="results root")
    ap.add_argument("--build-dir", default=None, help="where txn-server/txn-client are (default build/)")
    ap.add_argument("--backend", default="local", choices=("local", "swarm"),
                    help="local: processes on 127.0.0.1; swarm: the containers of start_containers.py "
                         "(run this inside the driver: docker exec edge_driver python -m testbed.cli --backend swarm)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    knobs = {k: getattr(a, k) for k in deploylib.DEFAULTS if hasattr(a, k)}
    try:
        if a.backend == "swarm":
            from .swarm_backend import SwarmBackend
            backend = SwarmBackend()
            knobs.pop("base_port", None)
        else:
            backend = LocalBackend(**({"build_dir": a.build_dir} if a.build_dir else {}))
        deploy = backend.deployment(**knobs)
    except (ValueError, RuntimeError) as e:
        print(f"run_local: error: {e}", file=sys.stderr)
        return 2
    try:
        res = backend.run(deploy, a.name, out_root=a.out, config={"knobs": knobs, "deploy": deploy})
    except RunError as e:
        print(f"run_local: run failed: {e}", file=sys.stderr)
        if e.run_dir:
            print(f"run folder: {e.run_dir}", file=sys.stderr)
        return 1
    print(format_table(res.summary))
    print(f"checker: {res.check['verdict']}" + (f" ({res.check.get('error')})" if res.check.get("error") else ""))
    for v in res.check["violations"][:10]:
        print(f"  {v}")
    print(f"run folder: {res.run_dir}")
    committed = res.summary["classes"]["all"]["committed"]
    if committed == 0:
        print("run_local: no transaction committed in the window", file=sys.stderr)
    return 0 if res.consistent and committed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
