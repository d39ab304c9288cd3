"""Every knob's default, and every numeric knob's range, unit and help, written once (the schema).

A knob has a name per place it is set: a setting of exp_config.py (a single value, or a sweep whose items are each
in the range), a knob of a single run (`testbed.core.deploy.validate`, run_local.py's --flags), or both; each name
has its own default (a single run is shorter than a sweep's point, say). `testbed.core.config.ExpConfig` and
`testbed.core.deploy.DEFAULTS` take their defaults from default(); exp_config.py is the user's file, and a setting it
leaves out gets the default here. `testbed.core.config` and `testbed.core.deploy` check values with check() and
check(); the command lines' help comes from help_of().
The engine checks the deployment file on its own (src/core/config.cc, which also reads files this testbed did
not write): tests/python/test_knobs.py runs `txn-server --check` on deployments with every single-run knob at
its bounds, so a range here that the engine would refuse fails there.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field


# The knobs that take one of a few words, and their words (checked by config.py and deploy.py alike).
WORKLOADS = ("tpcc", "tpca", "append")
DISTRICTS = ("fixed", "uniform")                  # TPCC_DISTRICT / --district
PROCESS_LAYOUTS = ("container", "split", "node")  # ENGINE_PROCESSES / --processes (docs/efficiency.md)
TRANSPORTS = ("tcp", "grpc")  # ENGINE_TRANSPORT / --transport (docs/efficiency.md)
SHAPINGS = ("auto", "netem", "app")               # SHAPING
CONTAINER_LAYOUTS = ("shard", "replica")          # CONTAINERS: what one container holds (testbed/cluster/placement.py)
DISTRIBUTIONS = ("normal", "pareto", "paretonormal")  # JITTER_DISTRIBUTION
MECHANISMS = ("app", "netem", "none")             # a single run's link delays: the transport's, tc's, none
FAULT_KIND_WORDS = ("none", "partition", "pause", "crash", "clock", "spike")   # FAULT_KINDS: exp 6's points
RATE_PER = ("total", "region")                    # OPEN_LOOP_RATE_PER / --rate-per: what an open-loop rate counts


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
    default: dict = field(default_factory=dict, compare=False)   # name -> default (a sweep's: a tuple)

    def range_text(self) -> str:
        return f"{'(' if self.lo_open else '['}{_fmt(self.lo)}, {_fmt(self.hi)}{')' if self.hi_open else ']'}"

    def contains(self, v) -> bool:
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
        ok = ok and (self.lo < v if self.lo_open else self.lo <= v) and (v < self.hi if self.hi_open else v <= self.hi)
        return ok and (not self.integer or float(v).is_integer())


@dataclass(frozen=True)
class Choice:
    """A knob that takes one of a few words."""
    names: tuple[str, ...]
    words: tuple[str, ...]
    help: str = ""
    default: dict = field(default_factory=dict, compare=False)

    def check(self, v, label: str | None = None) -> str:
        if v not in self.words:
            raise ValueError(f"{label or self.names[0]}={v!r}: must be one of {', '.join(self.words)}")
        return v


@dataclass(frozen=True)
class Setting:
    """Any other knob (a name, an address, a mapping): the code that reads it checks it."""
    names: tuple[str, ...]
    help: str = ""
    default: dict = field(default_factory=dict, compare=False)


KNOBS = (
    # deployment
    # REGIONS: the regions every experiment but exp 4 uses; SCALABILITY_N_REGIONS: exp 4's (the first k);
    # MAX_REGIONS: the regions deployed (containers), None = the most any experiment uses
    Knob(("regions", "REGIONS", "SCALABILITY_N_REGIONS", "MAX_REGIONS"), 1, 64, True, "", "R, regions",
         default=dict(regions=3, REGIONS=3, SCALABILITY_N_REGIONS=(3, 5, 7, 10), MAX_REGIONS=None)),
    # a shard's container has the address <prefix>.<region>.<shard> (testbed/cluster/placement.py)
    Knob(("shards", "SHARDS_PER_REGION"), 1, 239, True, "", "N, shards per region",
         default=dict(shards=2, SHARDS_PER_REGION=2)),
    Knob(("REPLICAS",), 3, 3, True, "", "replicas per shard (every protocol here runs 3)", default=dict(REPLICAS=3)),
    Knob(("scale", "SCALE"), 0.0001, 10, False, "", "table sizes x scale", default=dict(scale=0.01, SCALE=0.01)),
    # load
    Knob(("clients_per_shard", "CLIENT_PROCESS_PER_SHARD", "FIXED_CLIENT_PROCESS_PER_SHARD"), 1, 16, True, "",
         "client processes per shard",
         default=dict(clients_per_shard=1, CLIENT_PROCESS_PER_SHARD=(1,), FIXED_CLIENT_PROCESS_PER_SHARD=1)),
    Knob(("concurrency", "CONCURRENCY_LEVELS", "FIXED_CONCURRENCY", "SCALABILITY_CONCURRENCY"), 1, 256, True, "",
         "closed-loop coordinators per client process",
         default=dict(concurrency=2, CONCURRENCY_LEVELS=(1, 2, 4), FIXED_CONCURRENCY=4, SCALABILITY_CONCURRENCY=2)),
    # open loop (docs/workloads.md): OPEN_LOOP_RATE / --rate set turns it on (None: closed loop); the range also
    # bounds --rate (the run knob `rate`, a Setting below as its default None is no number)
    # EXP1_OFFERED_RATES: exp 1's x when set, total rates (empty: exp 1 sweeps CONCURRENCY_LEVELS)
    Knob(("OPEN_LOOP_RATE", "EXP1_OFFERED_RATES"), 0, 1_000_000, False, "txn/s",
         "open loop: transactions offered per second, in total or per region (OPEN_LOOP_RATE_PER); None: closed loop",
         lo_open=True, default=dict(OPEN_LOOP_RATE=None, EXP1_OFFERED_RATES=())),
    Knob(("max_outstanding", "OPEN_LOOP_MAX_OUTSTANDING"), 1, 10_000_000, True, "",
         "open loop: transactions running or waiting per client process; an arrival beyond it is shed (counted)",
         default=dict(max_outstanding=1000, OPEN_LOOP_MAX_OUTSTANDING=1000)),
    Knob(("duration", "DURATION_S"), 1, 3600, False, "s", "client run time", default=dict(duration=10.0, DURATION_S=20)),
    Knob(("warmup", "WARMUP_S"), 0, 3600, False, "s", "trimmed from the window start",
         default=dict(warmup=2.0, WARMUP_S=5)),
    Knob(("cooldown", "COOLDOWN_S"), 0, 3600, False, "s", "trimmed from the window end",
         default=dict(cooldown=1.0, COOLDOWN_S=2)),
    Knob(("drain_timeout",), 0, 600, False, "s", "how long servers may take to finish their work after the clients",
         lo_open=True, default=dict(drain_timeout=10.0)),
    Knob(("retry_limit",), 1, 1_000_000, True, "", "attempts of a transaction before its client gives it up",
         default=dict(retry_limit=20)),
    # how an aborted attempt is retried (docs/workloads.md, "Retries"): 0, at once (the DAST artifact's way); > 0, after
    # a randomized exponential backoff from this, doubling per abort up to the max (TAPIR's authors' benchmark clients)
    Knob(("retry_backoff", "RETRY_BACKOFF_MS"), 0, 60000, False, "ms",
         "an aborted attempt's retry waits uniform [0, min(max, this x 2^(k-1))] after the k-th abort; 0: at once",
         default=dict(retry_backoff=0.0, RETRY_BACKOFF_MS=0)),
    Knob(("retry_backoff_max", "RETRY_BACKOFF_MAX_MS"), 0, 600000, False, "ms", "the retry backoff's cap",
         default=dict(retry_backoff_max=5000.0, RETRY_BACKOFF_MAX_MS=5000)),
    # the `backoff` variant's (a SYSTEMS item '<protocol>+backoff', testbed/core/variants.py): its first backoff, beside
    # the protocol retrying as RETRY_BACKOFF_MS says; its cap is RETRY_BACKOFF_MAX_MS
    Knob(("VARIANT_RETRY_BACKOFF_MS",), 0, 60000, False, "ms",
         "a '<protocol>+backoff' system's retry backoff: uniform [0, min(RETRY_BACKOFF_MAX_MS, this x 2^(k-1))] after "
         "the k-th abort", lo_open=True, default=dict(VARIANT_RETRY_BACKOFF_MS=100)),
    # workload
    Knob(("zipf", "ZIPFS"), 0, 1, False, "", "TPC-A zipf coefficient", default=dict(zipf=0.5, ZIPFS=(0.5, 0.7, 0.9))),
    Knob(("payment_crt_rate",), -1, 100, True, "%", "Payments forced cross-region (-1: natural)",
         default=dict(payment_crt_rate=-1)),
    Knob(("CRT_RATIOS",), 0, 100, False, "%", "exp 2: share of cross-region transactions",
         default=dict(CRT_RATIOS=(10, 50, 90))),
    # append (Elle-style list-append, docs/workloads.md): written into every deployment, whatever the workload
    Knob(("append_keys",), 1, 100000, True, "", "append: lists (keys) per shard", default=dict(append_keys=8)),
    Knob(("append_crt_ratio",), 0, 1, False, "", "append: share of transactions forced cross-region",
         default=dict(append_crt_ratio=0.1)),
    Knob(("append_read_tail",), 0, 64, True, "", "append: last elements of its list a read returns",
         default=dict(append_read_tail=4)),
    # network
    Knob(("intra_rtt", "INTRA_RTT_MS"), 0, 10000, False, "ms", "RTT between two nodes of a region",
         default=dict(intra_rtt=5.0, INTRA_RTT_MS=5)),
    # RTT_OVERRIDES: {(a, b): rtt}, each rtt in this range; () is its checked form with none
    Knob(("inter_rtt", "INTER_RTT_MS", "RTT_OVERRIDES"), 0, 10000, False, "ms", "RTT between two regions",
         default=dict(inter_rtt=100.0, INTER_RTT_MS=100, RTT_OVERRIDES=())),
    Knob(("jitter",), 0, 1000, False, "ms", "one-way delay jitter std-dev", default=dict(jitter=0.0)),
    Knob(("JITTER_MS", "ROBUST_RTT_VAR"), 0, 10000, False, "ms",
         "cross-region RTT std-dev (each direction gets it / sqrt(2))",
         default=dict(JITTER_MS=0, ROBUST_RTT_VAR=(0, 10, 20, 30))),
    Knob(("NETEM_LIMIT",), 1, 10_000_000, True, "packets", "netem queue limit", default=dict(NETEM_LIMIT=100000)),
    Knob(("CONTROL_PORTS",), 1, 65535, True, "", "ports tc never delays", default=dict(CONTROL_PORTS=(22, 19000))),
    Knob(("OVERLAY_MTU",), 576, 9000, True, "bytes", "the swarm overlay's MTU (None: Docker's)",
         default=dict(OVERLAY_MTU=1450)),
    # hosts and runs
    Knob(("base_port",), 1024, 65000, True, "", "first port tried", default=dict(base_port=20000)),
    Knob(("seed", "SEED"), 0, 2**31 - 1, True, "", "workload seed (a sweep's repeat r uses SEED + r - 1)",
         default=dict(seed=1, SEED=1)),
    Knob(("CONTAINER_CPUS",), 0.1, 1024, False, "CPUs", "CPU limit per container (None: none, 'auto')",
         default=dict(CONTAINER_CPUS=None)),
    Knob(("SSH_CONNECT_TIMEOUT_S",), 1, 300, False, "s", "SSH connect timeout to a host",
         default=dict(SSH_CONNECT_TIMEOUT_S=15)),
    Knob(("N_REPEAT",), 1, 100, True, "", "repeats per point", default=dict(N_REPEAT=3)),
    Knob(("FAULTS_SEED",), 0, 2**31 - 1, True, "", "seed of FAULTS' random targets (None: each run's seed)",
         default=dict(FAULTS_SEED=None)),
    Knob(("TAIL_PERCENTILE",), 50, 100, False, "", "the figures' tail percentile", lo_open=True, hi_open=True,
         default=dict(TAIL_PERCENTILE=99)),
    # exp 6 (faults)
    Knob(("FAULT_AT_S",), 1, 3600, False, "s", "exp 6: when the fault starts, from the load's start (> WARMUP_S)",
         default=dict(FAULT_AT_S=10)),
    Knob(("FAULT_FOR_S",), 0.5, 600, False, "s", "exp 6: how long the fault lasts", default=dict(FAULT_FOR_S=5)),
    Knob(("FAULT_AFTER_S",), 1, 3600, False, "s", "exp 6: how long a run goes on after the heal",
         default=dict(FAULT_AFTER_S=15)),
    Knob(("FAULT_REGION",), 1, 64, True, "", "exp 6: the region a fault targets, from 1 (None: the last one used)",
         default=dict(FAULT_REGION=None)),
    Knob(("FAULT_CLOCK_SKEW_MS",), -10000, 10000, False, "ms",
         "exp 6 'clock': the offset of the target region's protocol clock during the fault", default=dict(
             FAULT_CLOCK_SKEW_MS=50)),
    Knob(("FAULT_SPIKE_MS",), 1, 10000, False, "ms",
         "exp 6 'spike': one-way delay added to the target region's cross-region links during the fault",
         default=dict(FAULT_SPIKE_MS=100)),
    Knob(("delivery_grid_us", "ENGINE_DELIVERY_GRID_US"), 0, 10_000, True, "us",
         "emulated delays end on a grid of this cell (0: exactly when due): what falls due around one cell end wakes "
         "an engine process once, each message within half a cell of its time (docs/efficiency.md)",
         default=dict(delivery_grid_us=250, ENGINE_DELIVERY_GRID_US=250)),
)

# The knobs that take one of a few words.
CHOICES = (
    Choice(("workload",), WORKLOADS, "the workload", default=dict(workload="tpcc")),
    Choice(("district", "TPCC_DISTRICT"), DISTRICTS,
           "tpcc: the district of a transaction, fixed per coordinator (the artifact's way) or uniform per "
           "transaction (TPC-C 2.4.1.2: concurrent New-Orders conflict at any load)",
           default=dict(district="fixed", TPCC_DISTRICT="fixed")),
    Choice(("processes", "ENGINE_PROCESSES"), PROCESS_LAYOUTS,
           "engine processes: one per shard container, its servers and its clients apart (split), or one per node "
           "(docs/efficiency.md)", default=dict(processes="container", ENGINE_PROCESSES="container")),
    Choice(("transport", "ENGINE_TRANSPORT"), TRANSPORTS,
           "what carries messages between engine processes: length-prefixed batches on plain TCP (tcp), or gRPC "
           "streams (grpc) (docs/efficiency.md)", default=dict(transport="tcp", ENGINE_TRANSPORT="tcp")),
    Choice(("CONTAINERS",), CONTAINER_LAYOUTS,
           "what a container holds: a shard (its 3 replicas and its clients), or a replica (replica 0 and the "
           "shard's clients in the shard's container, each follower in one of its own)",
           default=dict(CONTAINERS="shard")),
    Choice(("SHAPING",), SHAPINGS, "who delays messages: tc netem, the transport (app), or netem when the kernel "
           "has it (auto)", default=dict(SHAPING="auto")),
    Choice(("JITTER_DISTRIBUTION",), DISTRIBUTIONS, "netem's delay distribution", default=dict(
        JITTER_DISTRIBUTION="normal")),
    Choice(("mechanism",), MECHANISMS, "how a single run's links are delayed", default=dict(mechanism="app")),
    Choice(("rate_per", "OPEN_LOOP_RATE_PER"), RATE_PER,
           "open loop: the rate is the whole deployment's (total) or each region's (region); either way it is split "
           "evenly over the client processes", default=dict(rate_per="total", OPEN_LOOP_RATE_PER="total")),
)

# Every other setting: checked where it is read (testbed/core/config.py, testbed/core/deploy.py); its default here.
SETTINGS = (
    Setting(("name",), "results/<name>/...", default=dict(name="local")),
    Setting(("mode",), "the protocol (None: the registry's first)", default=dict(mode=None)),
    Setting(("host",), "the address a local run's processes listen on", default=dict(host="127.0.0.1")),
    Setting(("rtt_ms",), "a full R x R RTT matrix in ms (None: intra_rtt/inter_rtt)", default=dict(rtt_ms=None)),
    Setting(("protocol_options", "PROTOCOL_OPTIONS"), "the protocol's options over its registry defaults",
            default=dict(protocol_options=None, PROTOCOL_OPTIONS=())),
    # the nemesis (docs/nemesis.md): a fault schedule in its grammar, e.g. "partition:r1@5+3; pause:follower@4+2";
    # None: no faults. Its random targets are drawn with faults_seed (None: the run's seed)
    Setting(("faults", "FAULTS"), "fault schedule (docs/nemesis.md), e.g. 'partition:r1@5+3; pause:follower@4+2'",
            default=dict(faults=None, FAULTS=None)),
    Setting(("faults_seed",), "seed of the schedule's random targets (None: the run's seed)",
            default=dict(faults_seed=None)),
    # open loop: transactions offered per second (rate_per: in total or per region), checked against
    # OPEN_LOOP_RATE's range; None: closed loop (the default, as the artifact's experiments are)
    Setting(("rate",), "open loop: transactions offered per second (None: closed loop)", default=dict(rate=None)),
    Setting(("SYSTEMS",), "the protocols compared (empty: every built one), each a protocol or '<protocol>+<variant>' "
            "(testbed/core/variants.py)", default=dict(SYSTEMS=())),
    Setting(("FAULT_KINDS",), "exp 6's faults, each a point: " + ", ".join(FAULT_KIND_WORDS),
            default=dict(FAULT_KINDS=FAULT_KIND_WORDS)),
    Setting(("DEPLOYMENT",), "names the deployment's containers, label and lock", default=dict(DEPLOYMENT="edge")),
    Setting(("IMAGE_NAME",), "the image every container runs", default=dict(IMAGE_NAME="edge-txn:latest")),
    Setting(("NETWORK_NAME",), "the attachable overlay network", default=dict(NETWORK_NAME="edge_txn")),
    Setting(("SUBNET",), "the overlay's subnet, a.b.0.0/16", default=dict(SUBNET="10.55.0.0/16")),
    Setting(("DRIVER_IP",), "the driver container's address, in a.b.0.0/24", default=dict(DRIVER_IP="10.55.0.240")),
)

SCHEMA = KNOBS + CHOICES + SETTINGS
_DEFAULTS = {n: v for k in SCHEMA for n, v in k.default.items()}
assert len(_DEFAULTS) == sum(len(k.default) for k in SCHEMA), "a default is given twice"
assert all(set(k.default) == set(k.names) for k in SCHEMA), "a name without a default, or a default without a name"
_BY_NAME = {n: k for k in SCHEMA for n in k.names}
assert len(_BY_NAME) == sum(len(k.names) for k in SCHEMA), "a knob name is listed twice"


def knob(name: str) -> Knob:
    return _BY_NAME[name]


def check(name: str, v, label: str | None = None, hi: float | None = None):
    """v if it is in the range of knob `name` (hi: a tighter upper bound known only at run time), as an int for an
    integer knob; else ValueError '<label>=<v>: must be an integer in [lo, hi]' (label defaults to name). For a
    word knob: v if it is one of its words, else ValueError '<label>=<v>: must be one of ...'."""
    k = _BY_NAME[name]
    if isinstance(k, Choice):
        return k.check(v, label or name)
    if hi is not None:
        k = dataclasses.replace(k, hi=min(hi, k.hi))
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
    """The numeric knobs of a single run (testbed.core.deploy), by name."""
    return {n: k for k in KNOBS for n in k.names if n.islower()}


def default(name: str):
    """The default of a knob's name: what a single run, or exp_config.py, gets when it does not set it."""
    return _DEFAULTS[name]


def run_defaults() -> dict:
    """Every knob of a single run with its default (testbed.core.deploy.DEFAULTS)."""
    return {n: v for n, v in _DEFAULTS.items() if n.islower()}


def help_of(name: str) -> str:
    """'<help>, <unit>, in [lo, hi]' for a command line's --help (a Choice's: its help)."""
    k = _BY_NAME[name]
    if not isinstance(k, Knob):
        return k.help.replace("%", "%%")
    return f"{k.help}{', ' + k.unit if k.unit else ''}, in {k.range_text()}".replace("%", "%%")
