#!/usr/bin/env python3
"""Benchmark (not a test): bring-up and teardown time of the swarm testbed on this machine's Docker.

    .venv/bin/python scripts/bench_swarm.py [--sizes 3x2,6x4] [--image edge-txn:latest]

For each R x N: start_containers (one-node swarm, overlay, R*N shard containers + the driver, sshd up, shaping
chosen), a second bring-up (idempotent: nothing to do), then teardown; prints the wall times. Uses its own
deployment label and network so it does not touch a running deployment; needs the image (docker/build_image.sh).
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

from testbed.cluster import swarm
from testbed.core import knobs
from testbed.core.config import load_exp_config
from testbed.cluster.hosts import load_hosts
from testbed.core.tables import text_table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3x2,6x4", help="comma-separated RxN (default %(default)s)")
    ap.add_argument("--image", default=knobs.default("IMAGE_NAME"))
    a = ap.parse_args()
    hosts = load_hosts()
    rows = []
    for size in a.sizes.split(","):
        R, N = (int(x) for x in size.lower().split("x"))
        cfg = load_exp_config({"REGIONS": R, "SHARDS_PER_REGION": N, "IMAGE_NAME": a.image,
                               "NETWORK_NAME": "edge_txn_bench", "SCALABILITY_N_REGIONS": [R]})
        with tempfile.TemporaryDirectory() as tmp:
            paths = dict(state_dir=Path(tmp) / "state", containers_yml=Path(tmp) / "containers.yml")
            t0 = time.monotonic()
            try:
                state = swarm.up(cfg, hosts, deployment="edge-txn-bench", log=lambda m: None, **paths)
            except (swarm.SwarmError, ValueError) as e:
                print(f"bench_swarm: {R}x{N}: bring-up failed: {e}", file=sys.stderr)
                return 1
            t_up = time.monotonic() - t0
            t0 = time.monotonic()
            swarm.up(cfg, hosts, deployment="edge-txn-bench", log=lambda m: None, **paths)
            t_again = time.monotonic() - t0
            t0 = time.monotonic()
            swarm.down(cfg, hosts, deployment="edge-txn-bench", log=lambda m: None, **paths)
            t_down = time.monotonic() - t0
        rows.append((f"{R}x{N}", len(state["containers"]), state["mechanism"], t_up, t_again, t_down))
        print(f"{R}x{N}: {len(state['containers'])} containers up in {t_up:.1f}s, again (idempotent) "
              f"{t_again:.1f}s, down in {t_down:.1f}s", flush=True)
    print()
    print(text_table(["size", "containers", "shaping", "bring-up_s", "again_s", "teardown_s"],
                     [(size, str(n), mech, f"{up:.1f}", f"{again:.1f}", f"{down:.1f}")
                      for size, n, mech, up, again, down in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
