"""Load and validate exp_config.py (the experiment knobs) into a frozen ExpConfig.

Every bad value raises ValueError naming the knob and its allowed range, before anything starts; a protocol name
(SYSTEMS, PROTOCOL_OPTIONS' keys) that no protocol has, built or not, is one (testbed/core/protocols.py check_name),
and so is a SYSTEMS item '<protocol>+<variant>' whose variant testbed/core/variants.py does not declare.

Jitter rule (per direction sigma = JITTER_MS / sqrt(2), applied to cross-region links only; the smallest
cross-region one-way delay is d = min off-diagonal RTT / 2): netem and the app transport clip negative
samples to 0, which biases the mean upward.
  sigma > d      -> error   (mean biased by more than 8 %, > 16 % of samples clipped)
  sigma > d / 2  -> warning (more than 2 % of samples clipped, mean biased by < 0.5 % .. 8 %)
The same rule covers every value of ROBUST_RTT_VAR (exp 5 uses it as JITTER_MS).
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import ipaddress
import math
import re
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from testbed.core import faults, knobs as knoblib, protocols, rtt, variants
from testbed.core.paths import REPO

MAX_DELAY_CLASSES = 13  # prio qdisc has at most 16 bands; 3 stay for unshaped traffic
# CONTAINERS='replica': the followers' containers of a region take the upper half of its /24 (.128 + 2 x (shard - 1)
# + follower - 1, up to .253), so a region holds at most 63 shards then (its shard containers .1 .. .63)
FOLLOWERS_FROM = 128
MAX_SHARDS_WITH_FOLLOWER_CONTAINERS = 63
DEFAULT_FILE = REPO / "exp_config.py"


_default = knoblib.default


@dataclass(frozen=True)
class ExpConfig:
    """exp_config.py, checked; a setting the file leaves out has the default of testbed/core/knobs.py."""
    regions: int = _default("REGIONS")            # used by every experiment but exp 4
    max_regions: int | None = _default("MAX_REGIONS")   # deployed; validate() sets it (None: the most used)
    shards_per_region: int = _default("SHARDS_PER_REGION")
    replicas: int = _default("REPLICAS")
    scale: float = _default("SCALE")
    tpcc_district: str = _default("TPCC_DISTRICT")
    engine_processes: str = _default("ENGINE_PROCESSES")
    engine_transport: str = _default("ENGINE_TRANSPORT")
    engine_delivery_grid_us: int = _default("ENGINE_DELIVERY_GRID_US")
    intra_rtt_ms: float = _default("INTRA_RTT_MS")
    inter_rtt_ms: float = _default("INTER_RTT_MS")
    rtt_overrides: tuple = _default("RTT_OVERRIDES")   # ((a, b), rtt_ms) with 1 <= a <= b <= regions, sorted
    jitter_ms: float = _default("JITTER_MS")
    jitter_distribution: str = _default("JITTER_DISTRIBUTION")
    containers: str = _default("CONTAINERS")     # 'shard' | 'replica' (testbed/cluster/placement.py)
    shaping: str = _default("SHAPING")
    netem_limit: int = _default("NETEM_LIMIT")
    control_ports: tuple = _default("CONTROL_PORTS")
    deployment: str = _default("DEPLOYMENT")
    image_name: str = _default("IMAGE_NAME")
    network_name: str = _default("NETWORK_NAME")
    subnet: str = _default("SUBNET")
    overlay_mtu: int | None = _default("OVERLAY_MTU")
    driver_ip: str = _default("DRIVER_IP")
    container_cpus: object = _default("CONTAINER_CPUS")
    ssh_connect_timeout_s: float = _default("SSH_CONNECT_TIMEOUT_S")
    systems: tuple = _default("SYSTEMS")   # () = every protocol the engine has built (its registry); an item is a
    # protocol or '<protocol>+<variant>' (testbed/core/variants.py)
    n_repeat: int = _default("N_REPEAT")
    seed: int = _default("SEED")
    duration_s: float = _default("DURATION_S")
    warmup_s: float = _default("WARMUP_S")
    cooldown_s: float = _default("COOLDOWN_S")
    tail_percentile: float = _default("TAIL_PERCENTILE")
    open_loop_rate: float | None = _default("OPEN_LOOP_RATE")   # None: closed loop (docs/workloads.md)
    open_loop_rate_per: str = _default("OPEN_LOOP_RATE_PER")
    open_loop_max_outstanding: int = _default("OPEN_LOOP_MAX_OUTSTANDING")
    retry_backoff_ms: float = _default("RETRY_BACKOFF_MS")       # 0: an aborted attempt is retried at once
    retry_backoff_max_ms: float = _default("RETRY_BACKOFF_MAX_MS")
    variant_retry_backoff_ms: float = _default("VARIANT_RETRY_BACKOFF_MS")   # a '<protocol>+backoff' system's
    concurrency_levels: tuple = _default("CONCURRENCY_LEVELS")
    exp1_offered_rates: tuple = _default("EXP1_OFFERED_RATES")   # () = exp 1 sweeps concurrency (closed loop)
    client_process_per_shard: tuple = _default("CLIENT_PROCESS_PER_SHARD")
    crt_ratios: tuple = _default("CRT_RATIOS")
    zipfs: tuple = _default("ZIPFS")
    scalability_n_regions: tuple = _default("SCALABILITY_N_REGIONS")
    robust_rtt_var: tuple = _default("ROBUST_RTT_VAR")
    fixed_client_process_per_shard: int = _default("FIXED_CLIENT_PROCESS_PER_SHARD")
    fixed_concurrency: int = _default("FIXED_CONCURRENCY")
    scalability_concurrency: int = _default("SCALABILITY_CONCURRENCY")
    fault_kinds: tuple = _default("FAULT_KINDS")
    fault_at_s: float = _default("FAULT_AT_S")
    fault_for_s: float = _default("FAULT_FOR_S")
    fault_after_s: float = _default("FAULT_AFTER_S")
    fault_region: int | None = _default("FAULT_REGION")
    fault_clock_skew_ms: float = _default("FAULT_CLOCK_SKEW_MS")
    fault_spike_ms: float = _default("FAULT_SPIKE_MS")
    faults: str | None = _default("FAULTS")            # every run's fault schedule (docs/nemesis.md); None: none
    faults_seed: int | None = _default("FAULTS_SEED")  # its random targets' seed (None: the run's seed)
    protocol_options: tuple = _default("PROTOCOL_OPTIONS")   # ((protocol, ((option, value), ...)), ...), checked
    # against the registry

    def options_of(self, protocol: str) -> dict:
        """PROTOCOL_OPTIONS of one protocol ({} when none are set)."""
        return dict(dict(self.protocol_options).get(protocol, ()))

    @property
    def driver_name(self) -> str:
        return f"{self.deployment}_driver"

    def container_name(self, region: int, shard: int, follower: int = 0) -> str:
        """Shard container of region and shard counted from 1: <DEPLOYMENT>_r<region>_s<shard>; with follower k
        (CONTAINERS='replica'), the container of the shard's replica k: <DEPLOYMENT>_r<region>_s<shard>_f<k>."""
        return f"{self.deployment}_r{region}_s{shard}" + (f"_f{follower}" if follower else "")

    def container_ip(self, region: int, shard: int, follower: int = 0) -> str:
        """<prefix>.<region>.<shard>, or for follower k (CONTAINERS='replica') <prefix>.<region>.<FOLLOWERS_FROM +
        2 x (shard - 1) + k - 1>: inside the region's /24, which the tc plans match by destination."""
        last = FOLLOWERS_FROM + 2 * (shard - 1) + follower - 1 if follower else shard
        return f"{self.subnet_prefix}.{region}.{last}"

    @property
    def subnet_prefix(self) -> str:
        """'10.55' for SUBNET 10.55.0.0/16: containers are <prefix>.<region>.<shard>."""
        return ".".join(self.subnet.split("/")[0].split(".")[:2])

    def as_dict(self) -> dict:
        """Plain, YAML/JSON-friendly form (recorded with every run)."""
        d = dataclasses.asdict(self)
        d["rtt_overrides"] = [[a, b, v] for (a, b), v in self.rtt_overrides]
        d["protocol_options"] = {name: dict(opts) for name, opts in self.protocol_options}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


KNOBS = {f.name.upper(): f.name for f in dataclasses.fields(ExpConfig)}


def _shown(path: str | Path) -> str:
    """path relative to the working directory when it lies below it (as a user would type it), else as is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except (ValueError, OSError):
        return str(path)


def _exec_config_file(path: Path) -> ModuleType:
    """Run the config file as a module. Whatever its body raises (a syntax error, a NameError, ...) becomes one
    ValueError 'file:line: what', the line being the innermost one of the config file itself."""
    spec = importlib.util.spec_from_file_location(f"_exp_config_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:  # also IndentationError, TabError; the file may be one the config imports
        text = (e.text or "").strip()
        where = f"{_shown(e.filename or path)}:{e.lineno or '?'}"
        raise ValueError(f"{where}: {e.msg}" + (f" ({text})" if text else "")) from None
    except Exception as e:  # noqa: BLE001 -- anything the module body raises is a mistake in the file
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
        what = str(e).strip().splitlines()
        raise ValueError(f"{_shown(path)}:{lines[-1] if lines else '?'}: {type(e).__name__}"
                         + (f": {what[0]}" if what else "")) from None
    return module


def _knobs_of(source) -> dict:
    if source is None:
        source = DEFAULT_FILE
    if isinstance(source, dict):
        return dict(source)
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"experiment config {path}: no such file")
        source = _exec_config_file(path.resolve())
    if isinstance(source, ModuleType):
        return {k: v for k, v in vars(source).items() if re.fullmatch(r"[A-Z][A-Z0-9_]*", k)}
    raise TypeError(f"load_exp_config: expected a module, a path or a dict, got {type(source).__name__}")


def load_exp_config(source=None) -> ExpConfig:
    """source: a module, a path to a .py file, a dict of KNOB -> value, or None (the top-level exp_config.py).
    Knobs that are not set keep ExpConfig's defaults; unknown UPPER_CASE names are rejected (typos)."""
    knobs = _knobs_of(source)
    for name in knobs:
        if name not in KNOBS:
            hint = difflib.get_close_matches(name, KNOBS, n=1)
            raise ValueError(f"{name}: unknown knob" + (f" (did you mean {hint[0]}?)" if hint else ""))
    return validate(ExpConfig(**{KNOBS[k]: v for k, v in knobs.items()}))


# ---------------------------------------------------------------- checks

def _overrides(raw, regions) -> tuple:
    if isinstance(raw, (list, tuple)):  # as_dict() form: [[a, b, rtt], ...]
        try:
            raw = {(a, b): v for a, b, v in raw}
        except (TypeError, ValueError):
            raise ValueError(f"RTT_OVERRIDES={raw!r}: must be a dict {{(region_a, region_b): rtt_ms}}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"RTT_OVERRIDES={raw!r}: must be a dict {{(region_a, region_b): rtt_ms}}")
    out = {}
    for key, v in raw.items():
        if not (isinstance(key, tuple) and len(key) == 2
                and all(isinstance(r, int) and not isinstance(r, bool) and 1 <= r <= regions for r in key)):
            raise ValueError(f"RTT_OVERRIDES key {key!r}: must be a pair (a, b) of regions in [1, {regions}]")
        v = knoblib.check("RTT_OVERRIDES", v, f"RTT_OVERRIDES[{key}]")
        pair = tuple(sorted(key))
        if pair in out and out[pair] != v:
            raise ValueError(f"RTT_OVERRIDES {key}: conflicts with {pair[::-1]} ({out[pair]} vs {v}); RTT is symmetric")
        out[pair] = v
    return tuple(sorted(out.items()))


def _check_jitter(name, j, cfg):
    M = cfg.max_regions
    if M < 2 or j == 0:
        return
    m = rtt_matrix(cfg)
    one_way = min(m[a][b] for a in range(M) for b in range(M) if a != b) / 2
    sigma = j / math.sqrt(2)
    if sigma > one_way:
        raise ValueError(f"{name}={j}: must be in [0, {one_way * math.sqrt(2):.1f}] (per-direction std-dev "
                         f"{sigma:.1f} ms exceeds the smallest cross-region one-way delay {one_way:g} ms)")
    if sigma > one_way / 2:
        warnings.warn(f"{name}={j}: per-direction std-dev {sigma:.1f} ms > half the one-way delay {one_way:g} ms; "
                      "more than 2 % of delay samples are clipped at 0", stacklevel=3)


def validate(cfg: ExpConfig) -> ExpConfig:
    """Check every knob; return a normalised copy (tuples, ints, sorted overrides). Raises ValueError."""
    c = {}
    c["regions"] = R = knoblib.check("REGIONS", cfg.regions)
    # exp 4 uses the first k of the regions deployed; a protocol needing more regions than a point has is skipped
    # there by the runner (its registry entry says)
    scal = knoblib.check_sweep("SCALABILITY_N_REGIONS", cfg.scalability_n_regions)
    if cfg.max_regions is None:
        M = max(R, *scal)
    else:
        M = knoblib.check("MAX_REGIONS", cfg.max_regions)
        for name, v in [("REGIONS", R)] + [("SCALABILITY_N_REGIONS item", k) for k in scal]:
            if v > M:
                raise ValueError(f"{name}={v}: must be <= MAX_REGIONS={M}, the regions deployed (raise MAX_REGIONS, "
                                 "or set it to None: the most any experiment uses)")
    c["max_regions"], c["scalability_n_regions"] = M, scal
    c["shards_per_region"] = knoblib.check("SHARDS_PER_REGION", cfg.shards_per_region)
    c["replicas"] = knoblib.check("REPLICAS", cfg.replicas)
    c["scale"] = knoblib.check("SCALE", cfg.scale)
    c["tpcc_district"] = knoblib.check("TPCC_DISTRICT", cfg.tpcc_district)
    c["engine_processes"] = knoblib.check("ENGINE_PROCESSES", cfg.engine_processes)
    c["engine_transport"] = knoblib.check("ENGINE_TRANSPORT", cfg.engine_transport)
    c["engine_delivery_grid_us"] = knoblib.check("ENGINE_DELIVERY_GRID_US", cfg.engine_delivery_grid_us)
    c["intra_rtt_ms"] = knoblib.check("INTRA_RTT_MS", cfg.intra_rtt_ms)
    c["inter_rtt_ms"] = knoblib.check("INTER_RTT_MS", cfg.inter_rtt_ms)
    c["rtt_overrides"] = _overrides(cfg.rtt_overrides, M)
    c["jitter_ms"] = knoblib.check("JITTER_MS", cfg.jitter_ms)
    c["jitter_distribution"] = knoblib.check("JITTER_DISTRIBUTION", cfg.jitter_distribution)
    c["containers"] = check_containers(cfg.containers, c["shards_per_region"])
    c["shaping"] = knoblib.check("SHAPING", cfg.shaping)
    if c["shaping"] == "app" and c["jitter_distribution"] != "normal":
        raise ValueError(f"JITTER_DISTRIBUTION={cfg.jitter_distribution!r}: must be normal with SHAPING='app'")
    c["netem_limit"] = knoblib.check("NETEM_LIMIT", cfg.netem_limit)
    ports = cfg.control_ports
    if isinstance(ports, (str, bytes)) or not hasattr(ports, "__iter__"):
        raise ValueError(f"CONTROL_PORTS={ports!r}: must be a list of ports in [1, 65535]")
    c["control_ports"] = tuple(dict.fromkeys(knoblib.check("CONTROL_PORTS", p, "CONTROL_PORTS item") for p in ports))
    if not isinstance(cfg.deployment, str) or not re.fullmatch(r"[a-z][a-z0-9-]{0,23}", cfg.deployment):
        raise ValueError(f"DEPLOYMENT={cfg.deployment!r}: must be 1-24 lower-case letters, digits or '-', "
                         "starting with a letter")
    for name in ("IMAGE_NAME", "NETWORK_NAME"):
        v = getattr(cfg, name.lower())
        if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]*", v):
            raise ValueError(f"{name}={v!r}: must be a non-empty name of letters, digits and _.:/@-")
    cpus = cfg.container_cpus
    if cpus is not None and cpus != "auto":
        c["container_cpus"] = knoblib.check("CONTAINER_CPUS", cpus)
    c["ssh_connect_timeout_s"] = knoblib.check("SSH_CONNECT_TIMEOUT_S", cfg.ssh_connect_timeout_s)
    c["overlay_mtu"] = None if cfg.overlay_mtu is None else knoblib.check("OVERLAY_MTU", cfg.overlay_mtu)

    try:
        net = ipaddress.IPv4Network(cfg.subnet)
    except (ValueError, TypeError):
        raise ValueError(f"SUBNET={cfg.subnet!r}: must be an IPv4 network a.b.0.0/16 (prefix 16..23)") from None
    if not 16 <= net.prefixlen <= 23 or str(net.network_address).split(".")[2:] != ["0", "0"]:
        raise ValueError(f"SUBNET={cfg.subnet!r}: must be an IPv4 network a.b.0.0/p with p in [16, 23]")
    max_regions = 2 ** (24 - net.prefixlen) - 1
    if M > max_regions:
        raise ValueError(f"SUBNET={cfg.subnet!r}: holds regions 1..{max_regions} (a.b.<region>.0/24), "
                         f"{M} regions deployed (MAX_REGIONS) need a larger subnet (e.g. /16)")
    try:
        driver = ipaddress.IPv4Address(cfg.driver_ip)
    except (ValueError, TypeError):
        raise ValueError(f"DRIVER_IP={cfg.driver_ip!r}: must be an IPv4 address") from None
    control_block = ipaddress.IPv4Network(f"{net.network_address}/24")
    last = int(str(driver).split(".")[3])
    if driver not in control_block or not 1 <= last <= 254:
        raise ValueError(f"DRIVER_IP={cfg.driver_ip!r}: must be in {control_block} (.1 .. .254), "
                         "the block of SUBNET no region uses")
    c["subnet"], c["driver_ip"] = str(net), str(driver)

    if isinstance(cfg.systems, str) or not hasattr(cfg.systems, "__iter__"):
        raise ValueError(f"SYSTEMS={cfg.systems!r}: must be a list of protocol names (`txn-server --list-modes`)")
    for s in cfg.systems:
        if not isinstance(s, str) or not re.fullmatch(r"[a-z][a-z0-9_]*(\+[a-z][a-z0-9_]*)?", s):
            raise ValueError(f"SYSTEMS item {s!r}: must be a protocol name (`txn-server --list-modes`) or "
                             "<protocol>+<variant> (testbed/core/variants.py)")
    c["systems"] = tuple(dict.fromkeys(cfg.systems))
    c["protocol_options"] = _protocol_options(cfg.protocol_options)
    for s in c["systems"]:   # a typo is refused here; a real protocol that is not built is skipped by the runner
        protocols.check_name(variants.protocol_of(s), f"SYSTEMS item {s!r}")
        variants.check(s, f"SYSTEMS item {s!r}")
    for s, _ in c["protocol_options"]:
        protocols.check_name(s, f"PROTOCOL_OPTIONS key {s!r}")
    c["n_repeat"] = knoblib.check("N_REPEAT", cfg.n_repeat)
    c["seed"] = knoblib.check("SEED", cfg.seed)
    top = int(knoblib.knob("SEED").hi)
    if c["seed"] + c["n_repeat"] - 1 > top:
        raise ValueError(f"SEED={c['seed']}: must be <= {top - c['n_repeat'] + 1} with N_REPEAT={c['n_repeat']} "
                         f"(repeat r uses SEED + r - 1, at most {top})")
    c["faults"] = faults.check_syntax(cfg.faults)   # its targets and windows: against each run's deployment
    if cfg.faults is not None and not isinstance(cfg.faults, str):
        raise ValueError(f"FAULTS={cfg.faults!r}: must be a schedule string (docs/nemesis.md) or None")
    c["faults_seed"] = None if cfg.faults_seed is None else knoblib.check("FAULTS_SEED", cfg.faults_seed)
    c["duration_s"] = knoblib.check("DURATION_S", cfg.duration_s)
    c["warmup_s"] = knoblib.check("WARMUP_S", cfg.warmup_s)
    c["cooldown_s"] = knoblib.check("COOLDOWN_S", cfg.cooldown_s)
    if c["warmup_s"] + c["cooldown_s"] >= c["duration_s"]:
        raise ValueError(f"WARMUP_S+COOLDOWN_S={c['warmup_s'] + c['cooldown_s']}: must be < DURATION_S="
                         f"{c['duration_s']}")
    c["tail_percentile"] = knoblib.check("TAIL_PERCENTILE", cfg.tail_percentile)
    c["open_loop_rate"] = None if cfg.open_loop_rate is None else knoblib.check("OPEN_LOOP_RATE", cfg.open_loop_rate)
    c["open_loop_rate_per"] = knoblib.check("OPEN_LOOP_RATE_PER", cfg.open_loop_rate_per)
    c["open_loop_max_outstanding"] = knoblib.check("OPEN_LOOP_MAX_OUTSTANDING", cfg.open_loop_max_outstanding)
    c["retry_backoff_ms"] = knoblib.check("RETRY_BACKOFF_MS", cfg.retry_backoff_ms)
    c["retry_backoff_max_ms"] = knoblib.check("RETRY_BACKOFF_MAX_MS", cfg.retry_backoff_max_ms)
    if c["retry_backoff_max_ms"] < c["retry_backoff_ms"]:
        raise ValueError(f"RETRY_BACKOFF_MAX_MS={cfg.retry_backoff_max_ms}: must be >= RETRY_BACKOFF_MS="
                         f"{cfg.retry_backoff_ms}")
    c["variant_retry_backoff_ms"] = knoblib.check("VARIANT_RETRY_BACKOFF_MS", cfg.variant_retry_backoff_ms)

    c["concurrency_levels"] = knoblib.check_sweep("CONCURRENCY_LEVELS", cfg.concurrency_levels)
    rates = cfg.exp1_offered_rates
    if rates is None or (isinstance(rates, (list, tuple)) and not rates):
        c["exp1_offered_rates"] = ()
    else:
        c["exp1_offered_rates"] = knoblib.check_sweep("EXP1_OFFERED_RATES", rates)
    c["client_process_per_shard"] = knoblib.check_sweep("CLIENT_PROCESS_PER_SHARD", cfg.client_process_per_shard)
    c["crt_ratios"] = knoblib.check_sweep("CRT_RATIOS", cfg.crt_ratios)
    c["zipfs"] = knoblib.check_sweep("ZIPFS", cfg.zipfs)
    c["robust_rtt_var"] = knoblib.check_sweep("ROBUST_RTT_VAR", cfg.robust_rtt_var)
    c["fixed_client_process_per_shard"] = knoblib.check("FIXED_CLIENT_PROCESS_PER_SHARD", cfg.fixed_client_process_per_shard)
    c["fixed_concurrency"] = knoblib.check("FIXED_CONCURRENCY", cfg.fixed_concurrency)
    c["scalability_concurrency"] = knoblib.check("SCALABILITY_CONCURRENCY", cfg.scalability_concurrency)
    kinds = cfg.fault_kinds if isinstance(cfg.fault_kinds, (list, tuple)) else [cfg.fault_kinds]
    bad = [k for k in kinds if k not in knoblib.FAULT_KIND_WORDS]
    if bad or not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"FAULT_KINDS={list(kinds)!r}: must be distinct words of "
                         f"{', '.join(knoblib.FAULT_KIND_WORDS)}" + (f" ({bad[0]!r} is not one)" if bad else ""))
    c["fault_kinds"] = tuple(kinds)
    for name in ("FAULT_AT_S", "FAULT_FOR_S", "FAULT_AFTER_S", "FAULT_CLOCK_SKEW_MS", "FAULT_SPIKE_MS"):
        c[name.lower()] = knoblib.check(name, getattr(cfg, name.lower()))
    if c["fault_at_s"] <= cfg.warmup_s:
        raise ValueError(f"FAULT_AT_S={c['fault_at_s']}: must be > WARMUP_S={cfg.warmup_s} (exp 6 compares the "
                         "fault with the load before it)")
    c["fault_region"] = None if cfg.fault_region is None else knoblib.check("FAULT_REGION", cfg.fault_region)
    if c["fault_region"] is not None and c["fault_region"] > cfg.regions:
        raise ValueError(f"FAULT_REGION={c['fault_region']}: must be <= REGIONS={cfg.regions}")

    out = dataclasses.replace(cfg, **c)
    for s in out.systems:   # a variant's settings, as it would set them (only when a system of SYSTEMS has it)
        variants.knobs(s, out)
    for r, row in enumerate(rtt_matrix(out), 1):
        classes = {(v / 2, a != r - 1) for a, v in enumerate(row)}  # (one-way delay, jittered) per destination
        if len(classes) > MAX_DELAY_CLASSES:
            raise ValueError(f"RTT_OVERRIDES: region {r} would need {len(classes)} distinct delay classes; "
                             f"must be at most {MAX_DELAY_CLASSES} (prio qdisc has 16 bands)")
    _check_jitter("JITTER_MS", out.jitter_ms, out)
    for j in out.robust_rtt_var:
        _check_jitter("ROBUST_RTT_VAR item", j, out)
    return out


def check_containers(layout, shards: int) -> str:
    """CONTAINERS (a word) and what it allows: with 'replica' at most MAX_SHARDS_WITH_FOLLOWER_CONTAINERS shards per
    region, whose followers' containers fit in the upper half of the region's /24 (ExpConfig.container_ip)."""
    layout = knoblib.check("CONTAINERS", layout)
    if layout == "replica" and shards > MAX_SHARDS_WITH_FOLLOWER_CONTAINERS:
        raise ValueError(f"SHARDS_PER_REGION={shards}: must be <= {MAX_SHARDS_WITH_FOLLOWER_CONTAINERS} with "
                         f"CONTAINERS='replica' (a region's /24 holds its followers' containers from "
                         f".{FOLLOWERS_FROM}, two per shard)")
    return layout


def _protocol_options(raw) -> tuple:
    """PROTOCOL_OPTIONS = {protocol: {option: value}} (or as_dict()'s nested lists) -> sorted nested tuples. Only
    the shape is checked here; names and values are checked against the engine's registry before a sweep starts."""
    if isinstance(raw, (list, tuple)):
        try:
            raw = {name: dict(opts) for name, opts in raw}
        except (TypeError, ValueError):
            raise ValueError(f"PROTOCOL_OPTIONS={raw!r}: must be a dict {{protocol: {{option: value}}}}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"PROTOCOL_OPTIONS={raw!r}: must be a dict {{protocol: {{option: value}}}}")
    out = []
    for name, opts in raw.items():
        if not isinstance(name, str) or not isinstance(opts, dict):
            raise ValueError(f"PROTOCOL_OPTIONS[{name!r}]={opts!r}: must be a dict {{option: value}} under a "
                             "protocol name")
        for k, v in opts.items():
            if not isinstance(k, str) or not isinstance(v, (bool, int, float, str)):
                raise ValueError(f"PROTOCOL_OPTIONS[{name!r}][{k!r}]={v!r}: must be a bool, number or string")
        out.append((name, tuple(sorted(opts.items()))))
    return tuple(sorted(out))


def rtt_matrix(cfg: ExpConfig, regions: int | None = None) -> list[list[float]]:
    """R x R round-trip times in ms (row = source, column = destination, indices from 0 = region 1) of the regions
    deployed (MAX_REGIONS); regions < that gives the top-left sub-matrix (the first k regions: exp 4, REGIONS)."""
    return rtt.matrix(cfg.max_regions if regions is None else regions, cfg.intra_rtt_ms, cfg.inter_rtt_ms,
                      cfg.rtt_overrides)
