"""RTT self-test: measure the region-pair RTT matrix the way runs will see it and compare it with the configured one
(the arithmetic is testbed/core/rtt.py).

    python -m testbed.runs.selftest [--backend auto|local|swarm] [--count 20]     (exit 1 when out of tolerance)

On the swarm the host runs it in the driver (swarm_self_test) and keeps a record of the last pass of each deployment,
results/selftest/pass-<deployment>.json. The main job (testbed/sweeps/mainjob.py) reuses a pass younger than
SELFTEST_REUSE_S of the same deployment as it is now (the same containers by id, shaping mechanism, RTT matrix,
jitter and probe count), saying so, instead of spending ~20 s and a run folder on measuring the same network again:
what the self-test measures is set when the containers are made, and a replaced container has a new id. A failed
self-test deletes the record; `run_experiments.py --fresh` and `start_containers.py --self-test` (make up) always
measure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from testbed.analysis.rundirs import read_json, write_json
from testbed.cluster.cluster import Cluster
from testbed.core import interrupts, lock, options
from testbed.core.config import load_exp_config
from testbed.core.paths import REPO
from testbed.core.rtt import compare, contention_warnings, format_matrix
from testbed.core.runtypes import RunError
from testbed.runs.backends import open_backend
from testbed.runs.driverexec import ENV_JOB, LogWriter, exec_in_driver, job_runs, new_job_id

SWARM_TIMEOUT_S = 300  # the whole self-test inside the driver (servers up, probes, teardown) takes ~20 s
SELFTEST_REUSE_S = 3600  # how old a pass of the same deployment the main job reuses (see above)


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


def swarm_self_test(cfg, state: dict, log=print, count: int = 20, env: dict | None = None,
                    reuse: bool = False, repo=REPO) -> bool:
    """From the host: run the self-test inside the deployment's driver container (env: e.g. the job lock's
    token, testbed/core/lock.py). A stop request (Ctrl-C) here stops it there. reuse: a recent pass of the same
    deployment counts instead (see the module's doc)."""
    record, key = pass_record(state, repo), reuse_key(state, count)
    prior = read_json(record) if reuse else None
    age = time.time() - prior["unix"] if prior and isinstance(prior.get("unix"), (int, float)) else -1
    if prior and prior.get("key") == key and 0 <= age < SELFTEST_REUSE_S:
        log(f"RTT self-test: reusing the pass of {prior.get('time')} ({prior.get('folder') or 'no run folder'}); "
            "--fresh measures again")
        return True
    driver, job, t0 = Cluster(state).driver.name, new_job_id(), time.time()
    rc = exec_in_driver(driver, ["python", "-m", "testbed.runs.selftest", "--backend", "swarm", "--count", str(count)],
                        {**(env or {}), ENV_JOB: job}, out=LogWriter(log), timeout_s=SWARM_TIMEOUT_S)
    if rc == 124:
        log(f"self-test: FAIL, no answer from the driver container {driver} within {SWARM_TIMEOUT_S} s")
    if rc == 0:
        folders = [d for d, _ in job_runs(record.parent.parent, job, t0 - 1)]
        record.parent.mkdir(parents=True, exist_ok=True)
        write_json(record, {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "unix": time.time(), "key": key,
                            "folder": str(folders[-1].relative_to(repo)) if folders else None})
    else:
        record.unlink(missing_ok=True)
    return rc == 0


def pass_record(state: dict, repo=REPO):
    """Where the last pass of the deployment is recorded."""
    return repo / "results" / "selftest" / f"pass-{state['deployment']}.json"


def reuse_key(state: dict, count: int) -> dict:
    """What a pass says something about: the deployment's containers as they are (ids), its shaping, the matrix."""
    key = {"deployment": state["deployment"], "mechanism": state.get("mechanism"), "rtt_ms": state.get("rtt_ms"),
           "jitter_ms": state.get("jitter_ms"), "count": count,
           "containers": [[c["name"], c.get("id")] for c in state["containers"]]}
    return json.loads(json.dumps(key))


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
            interrupts.watch_stdin_if_asked(interrupts.current())
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
