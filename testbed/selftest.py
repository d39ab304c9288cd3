"""RTT self-test: measure the region-pair RTT matrix the way runs will see it and compare it with the configured one.

- app shaping (the transport delays messages): the deployment's servers run and one prober per region
  (`txn-client --probe N`) measures the round trip to one replica of every region through the transport itself;
- netem shaping (tc in the containers): ping from one container per region to one container of every region.
Measured = the smallest of the samples (as ping's min: the configured delay plus the least overhead; the median
is printed beside it, since on a CPU-starved machine it carries scheduling delays that are not the network's).
A pair fails when |measured - configured| > max(abs_tol_ms, rel_tol x configured) or when more than a tenth of its
probes were lost; a median far above the minimum is reported as a warning about the machine, not a failure.

    python -m testbed.selftest [--backend auto|local|swarm] [--count 20]     (exit 1 when out of tolerance)
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ABS_TOL_MS = 3.0
REL_TOL = 0.10
SWARM_TIMEOUT_S = 300  # the whole self-test inside the driver (servers up, probes, teardown) takes ~20 s


def _empty(regions: int, fill=None):
    return [[fill] * regions for _ in range(regions)]


def _record(m: dict, a: int, b: int, xs, lost: int) -> None:
    if xs:
        m["rtt_ms"][a][b] = round(min(xs), 3)
        m["median_ms"][a][b] = round(statistics.median(xs), 3)
    m["samples"][a][b], m["lost"][a][b] = len(xs), lost


def new_matrix(regions: int) -> dict:
    """{"rtt_ms": R x R minima (None: no sample), "median_ms", "samples": counts, "lost": counts}."""
    return {"rtt_ms": _empty(regions), "median_ms": _empty(regions), "samples": _empty(regions, 0),
            "lost": _empty(regions, 0)}


def probe_matrix(run_dir, regions: int) -> dict:
    """The measured matrix (new_matrix shape) from a probe run's clients/*.probe.json."""
    m = new_matrix(regions)
    for f in sorted(Path(run_dir, "clients").glob("*.probe.json")):
        data = json.loads(f.read_text())
        a = int(data["region"])
        for b_str, xs in data["rtt_ms"].items():
            _record(m, a, int(b_str), xs, int(data["lost"].get(b_str, 0)))
    return m


def compare(measured: dict, configured, abs_tol_ms: float = ABS_TOL_MS, rel_tol: float = REL_TOL) -> list[str]:
    """Problems (one line each) where the measured matrix is off; [] when every pair is within tolerance."""
    bad = []
    R = len(configured)
    for a in range(R):
        for b in range(R):
            want, got = configured[a][b], measured["rtt_ms"][a][b]
            sent = measured["samples"][a][b] + measured["lost"][a][b]
            where = f"region {a + 1} -> {b + 1}"
            if got is None:
                bad.append(f"{where}: no reply (configured {want:g} ms)")
                continue
            tol = max(abs_tol_ms, rel_tol * want)
            if abs(got - want) > tol:
                bad.append(f"{where}: measured {got:.1f} ms, configured {want:g} ms (tolerance +-{tol:.1f} ms)")
            if sent and measured["lost"][a][b] > sent / 10:
                bad.append(f"{where}: {measured['lost'][a][b]} of {sent} probes lost")
    return bad


def format_matrix(measured: dict, configured) -> str:
    R = len(configured)
    head = "RTT ms, measured (minimum of the probes)/configured (row: from region, column: to region)"
    cells = [[f"{'-' if measured['rtt_ms'][a][b] is None else format(measured['rtt_ms'][a][b], '.1f')}/"
              f"{configured[a][b]:g}" for b in range(R)] for a in range(R)]
    w = max(len(c) for row in cells for c in row)
    lines = [head, "      " + " ".join(f"r{b + 1}".rjust(w) for b in range(R))]
    lines += [f"  r{a + 1}".ljust(6) + " ".join(c.rjust(w) for c in cells[a]) for a in range(R)]
    return "\n".join(lines)


_PING = re.compile(r"time=([\d.]+) ms")


def ping_samples(output: str) -> list[float]:
    """RTTs in ms from `ping` output lines ('... time=50.3 ms')."""
    return [float(x) for x in _PING.findall(output)]


def ping_matrix(run_in, ips: dict, regions: int, count: int = 10) -> dict:
    """netem: run_in(region, argv) -> (rc, output) runs a command in a container of that region (from 1);
    ips[region] = [addresses of that region's containers]; the target in the own region is another container
    when there is one. Same result shape as probe_matrix."""
    m = new_matrix(regions)
    for a in range(regions):
        for b in range(regions):
            targets = ips[b + 1]
            dst = targets[1] if a == b and len(targets) > 1 else targets[0]
            rc, out = run_in(a + 1, ["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "2", dst])
            xs = ping_samples(out)
            _record(m, a, b, xs, count - len(xs))
    return m


def contention_warnings(measured: dict, configured, factor: float = 1.5, abs_ms: float = 5.0) -> list[str]:
    """Pairs whose median exceeds the minimum by > max(abs_ms, (factor-1) x configured): CPU starvation."""
    out = []
    R = len(configured)
    for a in range(R):
        for b in range(R):
            lo, med = measured["rtt_ms"][a][b], measured.get("median_ms", _empty(R))[a][b]
            if lo is not None and med is not None and med - lo > max(abs_ms, (factor - 1) * configured[a][b]):
                out.append(f"region {a + 1} -> {b + 1}: median {med:.1f} ms vs minimum {lo:.1f} ms")
    return out


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


def swarm_self_test(cfg, state: dict, log=print, count: int = 20) -> bool:
    """From the host: run the self-test inside the deployment's driver container."""
    driver = next(c["name"] for c in state["containers"] if c["role"] == "driver")
    try:
        p = subprocess.run(["docker", "exec", driver, "python", "-m", "testbed.selftest", "--backend", "swarm",
                            "--count", str(count)], capture_output=True, text=True, timeout=SWARM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"self-test: FAIL, no answer from the driver container {driver} within {SWARM_TIMEOUT_S} s")
        return False
    for line in (p.stdout + p.stderr).splitlines():
        log(line)
    return p.returncode == 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Measure the region-pair RTT matrix and compare it with exp_config.py.")
    ap.add_argument("--backend", default="auto", help="auto|local|swarm")
    ap.add_argument("--count", type=int, default=20, help="probes per region pair")
    ap.add_argument("--config", default=None, help="experiment config (default exp_config.py)")
    a = ap.parse_args(argv)
    from .backend import open_backend
    from .config import load_exp_config
    from .local import RunError
    try:
        cfg = load_exp_config(a.config)
        backend = open_backend(a.backend, cfg, progress=False)
        ok = run_self_test(backend, cfg, a.count)
    except (ValueError, RunError, RuntimeError) as e:
        print(f"self-test: error: {e}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
