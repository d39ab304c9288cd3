"""The region-pair RTT matrix as configured, and measuring it and comparing the two (the RTT self-test's
arithmetic).

- app shaping (the transport delays messages): probe runs (`txn-client --probe N`) write clients/*.probe.json,
  read by probe_matrix();
- netem shaping (tc in the containers): ping between containers, ping_matrix().
Measured = the smallest of the samples (as ping's min: the configured delay plus the least overhead; the median is
kept beside it, since on a CPU-starved machine it carries scheduling delays that are not the network's). A pair
fails when |measured - configured| > max(abs_tol_ms, rel_tol x configured) or when more than a tenth of its probes
were lost; a median far above the minimum is a warning about the machine, not a failure.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

from tabulate import tabulate

ABS_TOL_MS = 3.0
REL_TOL = 0.10


def matrix(regions: int, intra: float, inter: float, overrides=()) -> list[list[float]]:
    """R x R round-trip times in ms (row = source, column = destination, indices from 0 = region 1): intra on the
    diagonal, inter elsewhere, then each ((a, b), rtt) of overrides (regions from 1, symmetric; pairs beyond R
    ignored, so a sub-matrix of the first R regions keeps its overrides)."""
    m = [[intra if a == b else inter for b in range(regions)] for a in range(regions)]
    for (a, b), v in overrides:
        if a <= regions and b <= regions:
            m[a - 1][b - 1] = m[b - 1][a - 1] = v
    return m


def one_way_jitter(rtt_jitter_ms: float) -> float:
    """exp_config's jitter is an RTT's std-dev (JITTER_MS, ROBUST_RTT_VAR); each direction of a link gets
    rtt_jitter / sqrt(2), so that the sum of two independent directions has it. The deployment file and tc take
    the one-way value."""
    return rtt_jitter_ms / math.sqrt(2)


def rtt_jitter(one_way_jitter_ms: float) -> float:
    """The RTT std-dev of a one-way jitter (the inverse of one_way_jitter)."""
    return one_way_jitter_ms * math.sqrt(2)


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
    names = [f"r{i + 1}" for i in range(R)]
    return head + "\n" + tabulate(cells, names, showindex=names, tablefmt="plain", disable_numparse=True,
                                   colalign=["left"] + ["right"] * R)


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
