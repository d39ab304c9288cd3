"""Command line of run_local.py (and `python -m testbed.cli`): one run, summary table, checker verdict.

--backend swarm runs it on the containers of start_containers.py: inside the driver container directly, or, when
called on the host, through the driver (testbed/sweeps/mainjob.py, so Ctrl-C here stops it there). Exit codes: 0 ok,
1 the run failed (its folder says why), 2 bad input or the deployment is busy, 128 + signal when interrupted.
"""
from __future__ import annotations

import argparse
import sys

import yaml

from testbed.core import deploy as deploylib, lock
from testbed.core.knobs import help_of
from testbed.runs.backend import LocalBackend
from testbed.runs.jobs import job
from testbed.analysis.results import format_table
from testbed.core.runtypes import RunError
from testbed.runs.swarm_backend import SwarmBackend, inside_driver


def parse_args(argv=None) -> argparse.Namespace:
    d = deploylib.DEFAULTS
    ap = argparse.ArgumentParser(description="Run one deployment as local processes on 127.0.0.1 "
                                             "(results/<name>/<run-id>/).")
    ap.add_argument("--regions", type=int, default=d["regions"], help=help_of("regions") + " (default %(default)s)")
    ap.add_argument("--shards", type=int, default=d["shards"], help=help_of("shards") + " (default %(default)s)")
    ap.add_argument("--clients-per-shard", type=int, default=d["clients_per_shard"], help=help_of("clients_per_shard") + " (default %(default)s)")
    ap.add_argument("--concurrency", type=int, default=d["concurrency"], help=help_of("concurrency") + " (default %(default)s)")
    ap.add_argument("--duration", type=float, default=d["duration"], help=help_of("duration") + " (default %(default)s)")
    ap.add_argument("--warmup", type=float, default=d["warmup"], help=help_of("warmup") + " (default %(default)s)")
    ap.add_argument("--cooldown", type=float, default=d["cooldown"], help=help_of("cooldown") + " (default %(default)s)")
    ap.add_argument("--mode", default=d["mode"], help="protocol: one of `txn-server --list-modes` (default: the "
                    "first)")
    ap.add_argument("--workload", default=d["workload"], help="tpcc|tpca")
    ap.add_argument("--scale", type=float, default=d["scale"], help=help_of("scale") + " (default %(default)s)")
    ap.add_argument("--zipf", type=float, default=d["zipf"], help=help_of("zipf") + " (default %(default)s)")
    ap.add_argument("--district", default=d["district"], choices=deploylib.DISTRICTS,
                    help="tpcc: the district of a transaction, fixed per coordinator (the artifact's way) or uniform "
                         "per transaction (TPC-C 2.4.1.2: concurrent New-Orders conflict at any load)")
    ap.add_argument("--payment-crt-rate", type=int, default=d["payment_crt_rate"], help=help_of("payment_crt_rate") + " (default %(default)s)")
    ap.add_argument("--jitter", type=float, default=d["jitter"], help=help_of("jitter") + " (default %(default)s)")
    ap.add_argument("--intra-rtt", type=float, default=d["intra_rtt"], help=help_of("intra_rtt") + " (default %(default)s)")
    ap.add_argument("--inter-rtt", type=float, default=d["inter_rtt"], help=help_of("inter_rtt") + " (default %(default)s)")
    ap.add_argument("--protocol-option", dest="protocol_options", action="append", default=[], metavar="NAME=VALUE",
                    help="an option of the protocol (repeatable), e.g. defer_commutative=false; "
                         "`txn-server --list-modes --json` lists them with types, defaults and ranges")
    ap.add_argument("--processes", default=d["processes"], choices=deploylib.PROCESS_LAYOUTS,
                    help="engine processes: one per shard container (default), its servers and its clients apart "
                         "(split), or one per node (docs/efficiency.md)")
    ap.add_argument("--base-port", type=int, default=d["base_port"], help=help_of("base_port") + " (default %(default)s)")
    ap.add_argument("--name", default=d["name"], help="results/<name>/...")
    ap.add_argument("--out", default="results", help="results root")
    ap.add_argument("--build-dir", default=None, help="where txn-server/txn-client are (default build/)")
    ap.add_argument("--backend", default="local", choices=("local", "swarm"),
                    help="local: processes on 127.0.0.1; swarm: the containers of start_containers.py "
                         "(on the host it is run through the driver container)")
    ap.add_argument("--wait", action="store_true", help="swarm: wait for a job that holds the deployment instead "
                    "of refusing at once")
    ap.add_argument("--config", default=None, help="swarm, on the host: experiment config whose DEPLOYMENT names the "
                    "deployment to run on (default exp_config.py)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    knobs = {k: getattr(a, k) for k in deploylib.DEFAULTS if hasattr(a, k)}
    try:
        knobs["protocol_options"] = option_values(a.protocol_options)
    except ValueError as e:
        print(f"run_local: error: {e}", file=sys.stderr)
        return 2
    if a.backend == "swarm" and not inside_driver():
        from testbed.sweeps import mainjob
        return mainjob.run_job_in_driver(["python", "-m", "testbed.cli", *argv], config=a.config, wait=a.wait)
    try:
        if a.backend == "swarm":
            backend = SwarmBackend()
            knobs.pop("base_port", None)
        else:
            backend = LocalBackend(**({"build_dir": a.build_dir} if a.build_dir else {}))
        deploy = backend.deployment(**knobs)
    except (ValueError, RuntimeError) as e:   # protocols.RegistryError is a RuntimeError
        print(f"run_local: error: {e}", file=sys.stderr)
        return 2
    try:
        # local single runs share nothing (own ports, own folder): only a swarm run takes the deployment's lock
        with job(a.backend, a.out, a.wait) if a.backend == "swarm" else _no_lock():
            res = backend.run(deploy, a.name, out_root=a.out, config={"knobs": knobs, "deploy": deploy})
    except lock.Busy as e:
        print(f"run_local: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        what = "interrupted" if e.interrupted else "run failed"
        print(f"run_local: {what}: {e}", file=sys.stderr)
        if e.run_dir:
            print(f"run folder: {e.run_dir}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
    finally:
        backend.close()
    print(format_table(res.summary))
    print(f"checker: {res.check['verdict']}" + (f" ({res.check.get('error')})" if res.check.get("error") else ""))
    for v in res.check["violations"][:10]:
        print(f"  {v}")
    for n in res.check.get("notes", []):
        print(f"  note: {n}")
    print(f"run folder: {res.run_dir}")
    if not res.ok:
        print(f"run_local: {res.reason}", file=sys.stderr)
    return 0 if res.ok else 1


def option_values(items: list[str]) -> dict:
    """NAME=VALUE strings -> {name: value}, values read as YAML scalars (true, 3, 0.5, text); the protocol's schema
    checks them (testbed/core/deploy.py)."""
    out = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--protocol-option {item!r}: must be NAME=VALUE")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        out[name.strip()] = value if isinstance(value, (bool, int, float, str)) else text
    return out


class _no_lock:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
