"""Every numeric knob's range, unit and help, written once.

A knob has a name per place it is set: a setting of exp_config.py (a single value, or a sweep whose items are each
in the range), a knob of a single run (`testbed.core.deploy.validate`, run_local.py's --flags), or both.
`testbed.core.config` and `testbed.core.deploy` check values with check(); run_local.py's help comes from help_of().
The engine checks the deployment file on its own (src/core/config.cc, which also reads files this testbed did
not write): tests/python/test_knobs.py runs `txn-server --check` on deployments with every single-run knob at
its bounds, so a range here that the engine would refuse fails there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


# The knobs that take one of a few words, and their words (checked by config.py and deploy.py alike).
WORKLOADS = ("tpcc", "tpca")
DISTRICTS = ("fixed", "uniform")                  # TPCC_DISTRICT / --district
PROCESS_LAYOUTS = ("container", "split", "node")  # ENGINE_PROCESSES / --processes (docs/efficiency.md)
SHAPINGS = ("auto", "netem", "app")               # SHAPING
DISTRIBUTIONS = ("normal", "pareto", "paretonormal")  # JITTER_DISTRIBUTION


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class Knob:
    names: tuple[str, ...]   # lower-case: a single run's knob; UPPER_CASE: exp_config.py settings
    lo: float
    hi: float
    integer: bool = False
    unit: str = ""
    help: str = ""
    lo_open: bool = False    # the bound itself is outside the range
    hi_open: bool = False

    def range_text(self) -> str:
        return f"{'(' if self.lo_open else '['}{_fmt(self.lo)}, {_fmt(self.hi)}{')' if self.hi_open else ']'}"

    def contains(self, v) -> bool:
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
        ok = ok and (self.lo < v if self.lo_open else self.lo <= v) and (v < self.hi if self.hi_open else v <= self.hi)
        return ok and (not self.integer or float(v).is_integer())


KNOBS = (
    # deployment
    Knob(("regions", "REGIONS", "SCALABILITY_N_REGIONS"), 1, 64, True, "", "R, regions"),
    # a shard's container has the address <prefix>.<region>.<shard> (testbed/cluster/placement.py)
    Knob(("shards", "SHARDS_PER_REGION"), 1, 239, True, "", "N, shards per region"),
    Knob(("REPLICAS",), 3, 3, True, "", "replicas per shard (every protocol here runs 3)"),
    Knob(("scale", "SCALE"), 0.0001, 10, False, "", "table sizes x scale"),
    # load
    Knob(("clients_per_shard", "CLIENT_PROCESS_PER_SHARD", "FIXED_CLIENT_PROCESS_PER_SHARD"), 1, 16, True, "",
         "client processes per shard"),
    Knob(("concurrency", "CONCURRENCY_LEVELS", "FIXED_CONCURRENCY"), 1, 256, True, "",
         "closed-loop coordinators per client process"),
    Knob(("duration", "DURATION_S"), 1, 3600, False, "s", "client run time"),
    Knob(("warmup", "WARMUP_S"), 0, 3600, False, "s", "trimmed from the window start"),
    Knob(("cooldown", "COOLDOWN_S"), 0, 3600, False, "s", "trimmed from the window end"),
    Knob(("drain_timeout",), 0, 600, False, "s", "how long servers may take to finish their work after the clients",
         lo_open=True),
    Knob(("retry_limit",), 1, 1_000_000, True, "", "attempts of a transaction before its client gives it up"),
    # workload
    Knob(("zipf", "ZIPFS"), 0, 1, False, "", "TPC-A zipf coefficient"),
    Knob(("payment_crt_rate",), -1, 100, True, "%", "Payments forced cross-region (-1: natural)"),
    Knob(("CRT_RATIOS",), 0, 100, False, "%", "exp 2: share of cross-region transactions"),
    # network
    Knob(("intra_rtt", "INTRA_RTT_MS"), 0, 10000, False, "ms", "RTT between two nodes of a region"),
    Knob(("inter_rtt", "INTER_RTT_MS", "RTT_OVERRIDES"), 0, 10000, False, "ms", "RTT between two regions"),
    Knob(("jitter",), 0, 1000, False, "ms", "one-way delay jitter std-dev"),
    Knob(("JITTER_MS", "ROBUST_RTT_VAR"), 0, 10000, False, "ms",
         "cross-region RTT std-dev (each direction gets it / sqrt(2))"),
    Knob(("NETEM_LIMIT",), 1, 10_000_000, True, "packets", "netem queue limit"),
    Knob(("CONTROL_PORTS",), 1, 65535, True, "", "ports tc never delays"),
    Knob(("OVERLAY_MTU",), 576, 9000, True, "bytes", "the swarm overlay's MTU"),
    # hosts and runs
    Knob(("base_port",), 1024, 65000, True, "", "first port tried"),
    Knob(("seed",), 0, 2**31 - 1, True, "", "workload seed"),
    Knob(("CONTAINER_CPUS",), 0.1, 1024, False, "CPUs", "CPU limit per container"),
    Knob(("SSH_CONNECT_TIMEOUT_S",), 1, 300, False, "s", "SSH connect timeout to a host"),
    Knob(("N_REPEAT",), 1, 100, True, "", "repeats per point"),
    Knob(("TAIL_PERCENTILE",), 50, 100, False, "", "the figures' tail percentile", lo_open=True, hi_open=True),
)

_BY_NAME = {n: k for k in KNOBS for n in k.names}
assert len(_BY_NAME) == sum(len(k.names) for k in KNOBS), "a knob name is listed twice"


def knob(name: str) -> Knob:
    return _BY_NAME[name]


def check(name: str, v, label: str | None = None, hi: float | None = None):
    """v if it is in the range of knob `name` (hi: a tighter upper bound known only at run time), as an int for an
    integer knob; else ValueError '<label>=<v>: must be an integer in [lo, hi]' (label defaults to name)."""
    k = _BY_NAME[name]
    if hi is not None:
        k = Knob(k.names, k.lo, min(hi, k.hi), k.integer, k.unit, k.help, k.lo_open, k.hi_open)
    if not k.contains(v):
        raise ValueError(f"{label or name}={v!r}: must be {'an integer' if k.integer else 'a number'} in "
                         f"{k.range_text()}")
    return int(v) if k.integer else v


def check_sweep(name: str, values, hi: float | None = None) -> tuple:
    """A non-empty list of values of knob `name`, each checked."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or not list(values):
        k = _BY_NAME[name]
        raise ValueError(f"{name}={values!r}: must be a non-empty list of values in "
                         f"[{_fmt(k.lo)}, {_fmt(min(k.hi, hi) if hi is not None else k.hi)}]")
    return tuple(check(name, v, f"{name} item", hi) for v in values)


def run_knobs() -> dict[str, Knob]:
    """The knobs of a single run (testbed.core.deploy), by name."""
    return {n: k for k in KNOBS for n in k.names if n.islower()}


def help_of(name: str) -> str:
    """'<help>, <unit>, in [lo, hi]' for a command line's --help."""
    k = _BY_NAME[name]
    return f"{k.help}{', ' + k.unit if k.unit else ''}, in {k.range_text()}".replace("%", "%%")
