"""Command line of run_local.py (and `python -m testbed.cli`): one run, summary table, checker verdict.

--backend swarm runs it on the containers of start_containers.py: inside the driver container directly, or, when
called on the host, through the driver (testbed/sweeps/mainjob.py, so Ctrl-C here stops it there). Exit codes: 0 ok,
1 the run failed (its folder says why), 2 bad input or the deployment is busy, 128 + signal when interrupted.
"""
from __future__ import annotations

import argparse
import sys

from testbed.analysis.results import format_table
from testbed.core import deploy as deploylib, lock, options, protocols
from testbed.core.runtypes import RunError
from testbed.runs.backend import LocalBackend
from testbed.runs.jobs import job
from testbed.runs.swarm_backend import SwarmBackend, inside_driver
from testbed.sweeps import mainjob


def parse_args(argv=None) -> argparse.Namespace:
    d = deploylib.DEFAULTS
    ap = argparse.ArgumentParser(description="Run one deployment as local processes on 127.0.0.1 "
                                             "(results/<name>/<run-id>/).")
    options.add_knob(ap, "regions", d["regions"])
    options.add_knob(ap, "shards", d["shards"])
    options.add_knob(ap, "duration", d["duration"])
    options.add_knob(ap, "warmup", d["warmup"])
    options.add_knob(ap, "cooldown", d["cooldown"])
    options.add_mode(ap)
    options.add_load(ap, d)
    options.add_open_loop(ap, d)
    options.add_retry(ap, d)
    options.add_knob(ap, "scale", d["scale"])
    options.add_knob(ap, "zipf", d["zipf"])
    options.add_choice(ap, "district", d["district"])
    options.add_knob(ap, "payment_crt_rate", d["payment_crt_rate"])
    options.add_knob(ap, "append_keys", d["append_keys"])
    options.add_knob(ap, "append_crt_ratio", d["append_crt_ratio"])
    options.add_knob(ap, "append_read_tail", d["append_read_tail"])
    options.add_knob(ap, "jitter", d["jitter"])
    options.add_knob(ap, "intra_rtt", d["intra_rtt"])
    options.add_knob(ap, "inter_rtt", d["inter_rtt"])
    ap.add_argument("--protocol-option", dest="protocol_options", action="append", default=[], metavar="NAME=VALUE",
                    help="an option of the protocol (repeatable), e.g. defer_commutative=false; "
                         "`txn-server --list-modes --json` lists them with types, defaults and ranges")
    ap.add_argument("--faults", default=d["faults"], metavar="SCHEDULE",
                    help="fault schedule (docs/nemesis.md), items separated by ';', times in s from the load's start: "
                         "partition:r1@5+3  pause:follower@4+2  clock:r2+50ms  spike:r0-r1+100ms@5+3  "
                         "jitter:r0+5ms@2+4")
    ap.add_argument("--faults-seed", dest="faults_seed", type=int, default=d["faults_seed"], metavar="N",
                    help="seed of the schedule's random targets (random-region, follower, ...; default: --seed)")
    options.add_choice(ap, "processes", d["processes"])
    options.add_choice(ap, "transport", d["transport"])
    options.add_knob(ap, "delivery_grid_us", d["delivery_grid_us"])
    options.add_knob(ap, "seed", d["seed"])
    options.add_knob(ap, "base_port", d["base_port"])
    ap.add_argument("--name", default=d["name"], help="results/<name>/...")
    options.add_results_root(ap)
    options.add_build_dir(ap)
    options.add_backend(ap, default="local", choices=("local", "swarm"))
    options.add_wait(ap)
    options.add_config(ap, help="swarm, on the host: experiment config whose DEPLOYMENT names the deployment to run "
                                "on (default exp_config.py)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    knobs = {k: getattr(a, k) for k in deploylib.DEFAULTS if hasattr(a, k)}
    try:
        given = [f for f in ("--max-outstanding", "--rate-per") if any(x == f or x.startswith(f + "=") for x in argv)]
        if a.rate is None and given:
            raise ValueError(f"{given[0]} shapes an open load: give --rate too (without it the load is a closed loop, "
                             "which has no arrivals to bound)")
        if not a.retry_backoff and any(x == "--retry-backoff-max" or x.startswith("--retry-backoff-max=") for x in argv):
            raise ValueError("--retry-backoff-max caps a retry backoff: give --retry-backoff too (without it an aborted "
                             "attempt is retried at once)")
        knobs["protocol_options"] = options.option_values(a.protocol_options)
        if a.mode is not None:  # a typo is refused here, before a swarm job is handed to the driver
            protocols.check_name(a.mode, f"mode={a.mode!r}")
    except ValueError as e:
        print(f"run_local: error: {e}", file=sys.stderr)
        return 2
    if a.backend == "swarm" and not inside_driver():
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


class _no_lock:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
