"""RTT self-test: measure the region-pair RTT matrix the way runs will see it and compare it with the configured one
(the arithmetic is testbed/core/rtt.py).

    python -m testbed.runs.selftest [--backend auto|local|swarm] [--count 20]     (exit 1 when out of tolerance)
"""
from __future__ import annotations

import argparse
import sys

from testbed.cluster.cluster import Cluster
from testbed.core import interrupts, lock, options
from testbed.core.config import load_exp_config
from testbed.core.rtt import compare, contention_warnings, format_matrix
from testbed.core.runtypes import RunError
from testbed.runs.backends import open_backend
from testbed.runs.driverexec import LogWriter, exec_in_driver
from testbed.runs.swarm_backend import inside_driver

SWARM_TIMEOUT_S = 300  # the whole self-test inside the driver (servers up, probes, teardown) takes ~20 s


def run_self_test(backend, cfg, count: int = 20, out_root="results", log=print) -> bool:
    """Measure with the backend's mechanism, print measured vs configured; True when within tolerance."""
    knobs = backend.selftest_knobs(cfg)
    configured = knobs["rtt_ms"]
    if backend.mechanism == "netem":
        measured = backend.ping_matrix(count)
    else:
        deploy = backend.deployment(**knobs)
        measured = backend.run(deploy, "selftest", out_root=out_root, probe=count).probe
    log(format_matrix(measured, configured))
    problems = compare(measured, configured)
    slow = contention_warnings(measured, configured)
    if slow:
        log(f"self-test: warning: {len(slow)} pair(s) have medians far above their minimum, e.g. {slow[0]}: "
            "this machine is short of CPU (busy or stolen by the hypervisor); latencies of runs will carry it too")
    for p in problems:
        log(f"self-test: FAIL {p}")
    log(f"self-test ({backend.mechanism} shaping): " + ("PASS, every pair within tolerance" if not problems
                                                       else f"FAIL, {len(problems)} problem(s)"))
    return not problems


def swarm_self_test(cfg, state: dict, log=print, count: int = 20, env: dict | None = None) -> bool:
    """From the host: run the self-test inside the deployment's driver container (env: e.g. the job lock's
    token, testbed/core/lock.py). A stop request (Ctrl-C) here stops it there."""
    driver = Cluster(state).driver.name
    rc = exec_in_driver(driver, ["python", "-m", "testbed.runs.selftest", "--backend", "swarm", "--count", str(count)],
                        env, out=LogWriter(log), timeout_s=SWARM_TIMEOUT_S)
    if rc == 124:
        log(f"self-test: FAIL, no answer from the driver container {driver} within {SWARM_TIMEOUT_S} s")
    return rc == 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Measure the region-pair RTT matrix and compare it with exp_config.py.")
    options.add_backend(ap)
    ap.add_argument("--count", type=int, default=20, help="probes per region pair")
    options.add_config(ap)
    options.add_wait(ap)
    a = ap.parse_args(argv)
    try:
        cfg = load_exp_config(a.config)
        with interrupts.stop_on_signals():
            if interrupts.stdin_is_attached_pipe() and inside_driver():
                interrupts.watch_stdin(interrupts.current())
            backend = open_backend(a.backend, cfg, progress=False)
            name = (lock.swarm_lock_name(backend.deployment_name) if backend.name == "swarm"
                    else lock.local_lock_name("results"))
            with lock.JobLock(name).acquire(a.wait):
                ok = run_self_test(backend, cfg, a.count)
    except RunError as e:
        print(f"self-test: {'interrupted' if e.interrupted else 'error'}: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)
    except (ValueError, RuntimeError) as e:
        print(f"self-test: error: {e}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
