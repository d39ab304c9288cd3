"""The five experiments as data: what each sweeps, from which exp_config.py knob, at which fixed load.

An Experiment turns an ExpConfig into a list of Points; the shared runner (testbed/sweeps/runner.py) runs every
point for every built protocol and repeat, and testbed/analysis/figures.py draws them. A Point carries the deploy
knobs it changes (over testbed.runs.backend.base_knobs) and the x value plotted for it.

Fixed load of exp 2, 3 and 5: FIXED_CLIENT_PROCESS_PER_SHARD client processes per shard x FIXED_CONCURRENCY
coordinators each; exp 4: the same processes x SCALABILITY_CONCURRENCY coordinators, in each of the first k regions
of the MAX_REGIONS deployed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from testbed.core.config import ExpConfig, validate

QUICK_DURATION_S, QUICK_WARMUP_S, QUICK_COOLDOWN_S = 14, 3, 1
QUICK_MAX_POINTS = 3
QUICK_FAULT_AT_S, QUICK_FAULT_FOR_S, QUICK_FAULT_AFTER_S = 5, 3, 5   # exp 6 --quick: 13 s runs ...
QUICK_FAULT_KINDS = ("partition", "pause", "crash")   # ... of the kinds a replicated shard or a region must survive


@dataclass(frozen=True)
class Point:
    x: float                       # plotted value
    knobs: dict                    # deploy knobs over base_knobs (workload, concurrency, ...)
    base: dict = field(default_factory=dict)   # base_knobs() arguments: regions, rtt_jitter_ms
    series: str = ""               # sub-line of a protocol (exp 1 with several client-process counts), else ""
    label: str = ""                # shown in progress lines and tables
    meta: dict = field(default_factory=dict)   # recorded in each run's meta.json (exp 6: its fault window)
    axis: tuple = ()               # (x name, x label, x unit) when not the experiment's (exp 1 by offered load)

    @property
    def regions(self) -> int | None:
        return self.base.get("regions")


@dataclass(frozen=True)
class Experiment:
    name: str                      # results/<name>/..., results/data-<name>.pdf (the original's trial names)
    number: int
    title: str
    x_name: str                    # recorded in meta.json
    x_label: str                   # axis label, with unit
    x_unit: str
    points: Callable[[ExpConfig], list]
    workload: str = ""             # for the caption

    def script(self) -> str:
        return f"experiments/exp{self.number}_{self.name}.py"

    def axis(self, point: Point | None = None) -> tuple[str, str, str]:
        """(x name, x label, x unit) of a point: its own when it has one, else the experiment's."""
        return point.axis if point is not None and point.axis else (self.x_name, self.x_label, self.x_unit)


def _fixed_load(cfg: ExpConfig) -> dict:
    return dict(clients_per_shard=cfg.fixed_client_process_per_shard, concurrency=cfg.fixed_concurrency)


def _num(v):
    return int(v) if float(v).is_integer() else float(v)


# exp 1's x when EXP1_OFFERED_RATES sets it (an open load; docs/workloads.md)
OFFERED_AXIS = ("offered_tps", "offered load (txn/s, all regions; open loop, Poisson arrivals)", "txn/s")


def _exp1(cfg: ExpConfig) -> list[Point]:
    # clients per region = CLIENT_PROCESS_PER_SHARD x SHARDS_PER_REGION x concurrency. Each (processes,
    # concurrency) pair is its own point (the original merged pairs with equal clients per region); with
    # several process counts each gets its own line.
    several = len(cfg.client_process_per_shard) > 1
    pts = []
    if cfg.exp1_offered_rates:
        # by offered load instead: each total rate open loop, taken by the most coordinators the closed-loop sweep
        # would use (enough for its highest load; more waiting arrivals is what an overload looks like)
        conc = max(cfg.concurrency_levels)
        for cps in cfg.client_process_per_shard:
            for r in cfg.exp1_offered_rates:
                pts.append(Point(x=_num(r), knobs=dict(workload="tpcc", payment_crt_rate=-1, clients_per_shard=cps,
                                                       concurrency=conc, rate=float(r), rate_per="total",
                                                       max_outstanding=cfg.open_loop_max_outstanding),
                                 series=f"{cps} client proc/shard" if several else "",
                                 label=f"{_num(r)} txn/s offered ({cps} proc/shard x {conc} coord)",
                                 axis=OFFERED_AXIS))
        return pts
    for cps in cfg.client_process_per_shard:
        for conc in cfg.concurrency_levels:
            pts.append(Point(x=cps * cfg.shards_per_region * conc,
                             knobs=dict(workload="tpcc", payment_crt_rate=-1, clients_per_shard=cps,
                                        concurrency=conc),
                             series=f"{cps} client proc/shard" if several else "",
                             label=f"{cps} proc/shard x {conc} coord"))
    return pts


def _exp2(cfg: ExpConfig) -> list[Point]:
    return [Point(x=_num(r), knobs=dict(workload="tpcc", payment_crt_rate=int(r), **_fixed_load(cfg)),
                  label=f"{_num(r)} % CRT") for r in cfg.crt_ratios]


def _exp3(cfg: ExpConfig) -> list[Point]:
    return [Point(x=_num(z), knobs=dict(workload="tpca", zipf=float(z), **_fixed_load(cfg)),
                  label=f"zipf {_num(z)}") for z in cfg.zipfs]


def _exp4(cfg: ExpConfig) -> list[Point]:
    # the same load per region at every point (so throughput should grow with the regions), lighter than exp 2, 3
    # and 5's: at 10 regions it must still leave the host below CPU_BUSY_WARN_PCT
    load = dict(clients_per_shard=cfg.fixed_client_process_per_shard, concurrency=cfg.scalability_concurrency)
    return [Point(x=int(k), knobs=dict(workload="tpcc", payment_crt_rate=-1, **load),
                  base=dict(regions=int(k)), label=f"{k} regions") for k in cfg.scalability_n_regions]


def _exp5(cfg: ExpConfig) -> list[Point]:
    return [Point(x=_num(j), knobs=dict(workload="tpcc", payment_crt_rate=-1, **_fixed_load(cfg)),
                  base=dict(rtt_jitter_ms=float(j)), label=f"RTT {cfg.inter_rtt_ms:g} +- {_num(j)} ms")
            for j in cfg.robust_rtt_var]


def fault_region(cfg: ExpConfig) -> int:
    """Exp 6's target region, 0-based: FAULT_REGION (from 1), else the last region used."""
    return (cfg.fault_region or cfg.regions) - 1


def fault_schedule(kind: str, cfg: ExpConfig) -> str:
    """The nemesis schedule (docs/nemesis.md) of one exp 6 fault kind, on the target region, in the window
    [FAULT_AT_S, FAULT_AT_S + FAULT_FOR_S)."""
    r, at, length = fault_region(cfg), _num(cfg.fault_at_s), _num(cfg.fault_for_s)
    return {"none": "",
            "partition": f"partition:r{r}@{at}+{length}",
            "pause": f"pause:follower-r{r}@{at}+{length}",
            "crash": f"crash:follower-r{r}@{at}+{length}",   # killed, then restarted empty: it catches up
            "clock": f"clock:r{r}{_num(cfg.fault_clock_skew_ms):+}ms@{at}+{length}",
            "spike": f"spike:r{r}-*+{_num(cfg.fault_spike_ms)}ms@{at}+{length}"}[kind]


def _exp6(cfg: ExpConfig) -> list[Point]:
    # each fault kind at exp 2-5's fixed load, in runs long enough for before, during and after
    at, length = float(cfg.fault_at_s), float(cfg.fault_for_s)
    meta = dict(fault_window_s=[at, at + length], fault_region=fault_region(cfg))
    # a pause or crash stops an engine process: with one per container (the default) that is a whole shard, its 3
    # replicas and clients; one process per node stops the one follower the fault names (about 3x the CPU per
    # transaction). A crash's window is the time its follower is down: it is restarted empty at the window's end
    return [Point(x=i, knobs=dict(workload="tpcc", payment_crt_rate=-1, **_fixed_load(cfg),
                                  duration=at + length + float(cfg.fault_after_s), faults=fault_schedule(k, cfg),
                                  **(dict(processes="node") if k in ("pause", "crash") else {})),
                  label=k, meta=dict(meta, fault_kind=k)) for i, k in enumerate(cfg.fault_kinds)]


EXPERIMENTS = {e.name: e for e in [
    Experiment("n_clients", 1, "Exp 1: load (clients per region)", "clients_per_region",
               "clients per region (client processes x shards x coordinators)", "clients", _exp1,
               "TPC-C 44/44/4/4/4, natural CRT mix"),
    Experiment("crt_ratio", 2, "Exp 2: share of cross-region transactions", "crt_ratio",
               "cross-region Payments (% of transactions)", "%", _exp2, "TPC-C 100 % Payment"),
    Experiment("tpca", 3, "Exp 3: contention (TPC-A zipf)", "zipf",
               "zipf coefficient of TPC-A keys (higher = more skew)", "", _exp3, "TPC-A, 10 % CRT"),
    Experiment("scalability", 4, "Exp 4: number of regions", "n_regions",
               "regions", "regions", _exp4, "TPC-C 44/44/4/4/4, natural CRT mix"),
    Experiment("robust", 5, "Exp 5: cross-region RTT variance", "rtt_jitter_ms",
               "cross-region RTT std-dev X (ms): RTT = {inter} ms \u00b1 X", "ms", _exp5,
               "TPC-C 44/44/4/4/4, natural CRT mix"),
    Experiment("faults", 6, "Exp 6: what a fault does to each protocol", "fault", "fault kind", "", _exp6,
               "TPC-C 44/44/4/4/4, natural CRT mix"),
]}
ALIASES = {f"exp{e.number}": e.name for e in EXPERIMENTS.values()}


def get(name: str) -> Experiment:
    name = ALIASES.get(name, name)
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment {name!r}: must be one of {', '.join(EXPERIMENTS)} (or exp1..exp6)")
    return EXPERIMENTS[name]


def _thin(values, n=QUICK_MAX_POINTS) -> tuple:
    """At most n values: first, evenly spaced middle ones, last (order kept)."""
    v = list(values)
    if len(v) <= n:
        return tuple(v)
    idx = sorted({round(i * (len(v) - 1) / (n - 1)) for i in range(n)})
    return tuple(v[i] for i in idx)


def quick_config(cfg: ExpConfig, exp: Experiment | None = None) -> ExpConfig:
    """The --quick preset for a 2-core machine: every sweep thinned to at most 3 points (first, middle, last),
    one client-process count, 14 s runs (3 s warm-up, 1 s cool-down), 1 repeat; exp 6 its partition, pause and
    crash only, in 13 s runs (the fault in [5, 8) s). Exp 4 with fewer than two
    configured region counts sweeps 2..MAX_REGIONS instead (SLOG is skipped below 3 regions)."""
    q = dataclasses.replace(
        cfg, duration_s=QUICK_DURATION_S, warmup_s=QUICK_WARMUP_S, cooldown_s=QUICK_COOLDOWN_S, n_repeat=1,
        client_process_per_shard=(min(cfg.client_process_per_shard),),
        concurrency_levels=_thin(cfg.concurrency_levels), crt_ratios=_thin(cfg.crt_ratios),
        exp1_offered_rates=_thin(cfg.exp1_offered_rates),
        zipfs=_thin(cfg.zipfs), robust_rtt_var=_thin(cfg.robust_rtt_var),
        fault_at_s=min(cfg.fault_at_s, QUICK_FAULT_AT_S), fault_for_s=min(cfg.fault_for_s, QUICK_FAULT_FOR_S),
        fault_after_s=min(cfg.fault_after_s, QUICK_FAULT_AFTER_S),
        fault_kinds=tuple(k for k in cfg.fault_kinds if k in QUICK_FAULT_KINDS) or cfg.fault_kinds[:2])
    if exp is not None and exp.name == "scalability":
        regions = cfg.scalability_n_regions
        if len(regions) < 2 and cfg.max_regions >= 2:
            regions = tuple(range(2, cfg.max_regions + 1))
        q = dataclasses.replace(q, scalability_n_regions=_thin(regions))
    return validate(q)
