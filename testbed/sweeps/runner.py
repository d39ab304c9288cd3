"""The shared sweep runner behind experiments/exp*.py and run_experiments.py.

For every built protocol of SYSTEMS (an unbuilt one is skipped with a message), every point of the
experiment and every repeat: build the deployment, run it into results/<exp>/<run-id>/, and record the
outcome (the run lifecycle records it in the run's meta.json: ok, or failed with a reason -- run error,
inconsistent checker verdict, no commits in the window -- or interrupted). A failure never stops the sweep;
Ctrl-C, SIGTERM or SIGHUP does, cleanly: the run under way is recorded as interrupted, nothing is left running,
the figure is still drawn from what exists, and the exit code is 128 + the signal (130 for Ctrl-C).

Resume: a run is identified by its point key (a hash of the experiment, the protocol, every deploy knob but
the per-repeat seed, the backend and its shaping mechanism) and its repeat index. A run with the same key and
repeat that ended ok, and whose folder still validates (testbed/analysis/rundirs.py: its summary derived again from
the records, its verdict and identity bound to them), is reused; failed, interrupted, cut-off, damaged or doctored
ones are run again, saying why; --fresh runs everything again (old folders stay).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from testbed.analysis import claims, drawing, figures, index, runs_table
from testbed.analysis.rundirs import run_outcome, scan_runs
from testbed.core import (deploy as deploylib, experiments, files, interrupts, lock, options, presets, protocols,
                          variants)
from testbed.core.config import ExpConfig, load_exp_config, validate
from testbed.core.experiments import Experiment, Point
from testbed.core.runtypes import Interrupted, RunError
from testbed.core.tables import text_table
from testbed.runs.backend import Backend, base_knobs
from testbed.runs.backends import open_backend
from testbed.runs.driverexec import ENV_JOB
from testbed.runs.jobs import job
from testbed.sweeps import mainjob

KEY_VERSION = 1
NOT_MEASUREMENT = ("seed", "base_port", "host")  # knobs that place a run or vary per repeat
UNSET_LEFT_OUT = ("faults", "faults_seed")  # knobs newer than KEY_VERSION 1: left out of a key while unset, so the
                                            # points measured before them keep their keys (and resume)
OPEN_LOOP_ONLY = ("rate", "rate_per", "max_outstanding")   # the same for open loop's: left out while rate is unset
BACKOFF_ONLY = ("retry_backoff", "retry_backoff_max")     # and the retry backoff's, while retries go at once
EST_STARTUP_S = 8           # first guess of per-run overhead for the ETA, before a run has been timed (the plan's too)


def _canon(v):
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return int(v) if float(v).is_integer() else float(v)
    if isinstance(v, dict):
        return {str(k): _canon(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    return str(v)


def point_key(experiment: str, system: str, knobs: dict, backend: str, mechanism: str, seed: int = 1) -> str:
    """Stable hash of everything that determines a point's measurement: not the per-repeat seed, but the sweep's
    first seed (SEED / --seed; repeat r runs seed + r)."""
    valid = deploylib.validate(**knobs)
    k = {n: v for n, v in valid.items() if n not in NOT_MEASUREMENT
         and not (n in UNSET_LEFT_OUT and not v) and not (n in OPEN_LOOP_ONLY and valid["rate"] is None)
         and not (n in BACKOFF_ONLY and not valid["retry_backoff"])}
    what = {"v": KEY_VERSION, "experiment": experiment, "system": system, "knobs": k, "backend": backend,
            "mechanism": mechanism}
    if seed != 1:  # the default leaves the keys of earlier sweeps as they were
        what["seed"] = seed
    blob = json.dumps(_canon(what), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_length(sweep, cfg: ExpConfig) -> float:
    """Seconds of load per run: DURATION_S, or the mean of the points' own (exp 6 sets its runs' length)."""
    lengths = [float(t.knobs.get("duration", cfg.duration_s)) for t in sweep.tasks]
    return sum(lengths) / len(lengths) if lengths else cfg.duration_s


def run_estimate(sweep, cfg: ExpConfig) -> float:
    """Seconds one run of the sweep is expected to take before any has been timed: its length plus EST_STARTUP_S
    (start-up, drain, collection, checker). The ETA of the progress line starts from it, then uses the runs'
    measured times; the plan (--plan) and the line a sweep starts with multiply it by the runs."""
    return run_length(sweep, cfg) + EST_STARTUP_S


@dataclass
class Task:
    system: str
    point: Point
    repeat: int
    knobs: dict
    key: str


@dataclass
class Outcome:
    task: Task
    status: str                 # ok | failed
    reason: str = ""
    run_dir: Path | None = None
    reused: bool = False
    wall_s: float = 0.0


@dataclass
class Sweep:
    experiment: Experiment
    tasks: list = field(default_factory=list)
    outcomes: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)   # system -> why
    skipped_points: dict = field(default_factory=dict)  # system -> {"x": [points not run], "reason": why}
    systems: list = field(default_factory=list)   # SYSTEMS, or every built protocol when SYSTEMS is empty
    interrupted: Interrupted | None = None   # what stopped the sweep, if anything

    @property
    def failed(self) -> list:
        return [o for o in self.outcomes if o.status != "ok"]


# ---------------------------------------------------------------- planning

def plan(exp: Experiment, cfg: ExpConfig, backend, log=print) -> Sweep:
    """Every (system, point, repeat) to run, knobs validated before anything starts (ValueError, also when there is
    nothing to run). What a protocol needs (its minimum number of regions, its options) comes from the engine's
    registry; SYSTEMS holds protocol names (testbed/core/config.py), of which an unbuilt one is skipped, and
    '<protocol>+<variant>' names (testbed/core/variants.py): the protocol runs (its mode, its registry entry, its
    PROTOCOL_OPTIONS) with the variant's knobs, under the full name (the task's system, in its point key)."""
    sweep = Sweep(exp)
    try:
        registry = backend.registry()
        lists = f"txn-server --list-modes lists: {', '.join(registry.names())}"
    except protocols.RegistryError as e:
        registry, lists = None, f"no protocol is built: {e}"
        log(lists)
    built = registry.names() if registry else []
    systems = []
    for s in cfg.systems or built:
        mode = variants.protocol_of(s)
        if mode in built:
            systems.append(s)
        else:   # a real protocol, not built (a name no protocol has is refused)
            protocols.check_name(mode, f"SYSTEMS item {s!r}", registry)
            sweep.skipped[s] = "not built"
            log(f"skipping {s}: {'' if mode == s else mode + ' is '}not built ({lists})")
    sweep.systems = list(cfg.systems or built)
    for name in sorted(set(dict(cfg.protocol_options)) - set(built)):
        log(f"PROTOCOL_OPTIONS[{name!r}] ignored: {name} is not built")
    points = exp.points(cfg)
    for s in systems:
        mode = variants.protocol_of(s)
        proto = registry.get(mode)
        if all((p.regions or cfg.regions) < proto.min_regions for p in points):
            knob = "SCALABILITY_N_REGIONS" if any(p.regions for p in points) else "REGIONS"
            most = max(p.regions or cfg.regions for p in points)
            raise ValueError(f"{knob}={most if knob == 'REGIONS' else list(cfg.scalability_n_regions)}: {s} needs "
                             f"at least {proto.min_regions} regions; raise {knob} or drop {s} from SYSTEMS")
        proto.check_options(cfg.options_of(mode))
        note = variants.unchanged(s, cfg, base_knobs(cfg))
        if note:
            log(note)
        for p in points:
            if (p.regions or cfg.regions) < proto.min_regions:
                log(f"skipping {s} at {p.label}: {s} needs at least {proto.min_regions} regions")
                sk = sweep.skipped_points.setdefault(s, {"x": [], "reason": f"needs at least {proto.min_regions} regions"})
                sk["x"].append(p.x)
                continue
            knobs = {**base_knobs(cfg, **p.base), **variants.knobs(s, cfg), **p.knobs, "mode": mode,
                     "name": exp.name, "protocol_options": cfg.options_of(mode)}
            key = point_key(exp.name, s, knobs, backend.name, backend.mechanism, cfg.seed)
            if knobs.get("faults"):   # its schedule against its deployment, as the run would plan it (exp 6)
                _check_faults(exp, s, p, knobs, cfg.seed, backend)
            for r in range(cfg.n_repeat):
                sweep.tasks.append(Task(s, p, r, {**knobs, "seed": cfg.seed + r}, key))
    if not sweep.tasks:  # refused before sweep.json is written: the last sweep's stays, and its figure
        raise ValueError(f"nothing to run: no protocol of SYSTEMS ({', '.join(sweep.systems) or 'every built one'}) "
                         f"is built ({lists}); `make build` builds the engine")
    return sweep


def _check_faults(exp: Experiment, system: str, p: Point, knobs: dict, seed: int, backend) -> None:
    """ValueError (one line naming the point) when the point's fault schedule cannot run on its deployment: a pause
    not shorter than the engine's connect timeout, a spike between regions the deployment lacks, ... (the checks
    testbed/core/faults.py plan makes as a run starts, made before anything does)."""
    try:
        deploylib.build_deployment(**{**knobs, "seed": seed, "mechanism": backend.mechanism})
    except deploylib.faultlib.FaultError as e:
        raise ValueError(f"{exp.name} point {p.label!r} ({system}): {e}".splitlines()[0]) from e


def manifest(sweep: Sweep, cfg: ExpConfig, backend, quick: bool) -> dict:
    exp = sweep.experiment
    x_name, x_label, x_unit = exp.axis(sweep.tasks[0].point if sweep.tasks else None)
    systems = {s: sweep.skipped.get(s, "run") for s in sweep.systems}
    points, seen = [], set()
    for t in sweep.tasks:
        if t.key not in seen:
            seen.add(t.key)
            points.append(dict(key=t.key, system=t.system, x=t.point.x, series=t.point.series,
                               label=t.point.label, knobs=_canon({k: v for k, v in t.knobs.items() if k != "seed"})))
    return {"experiment": exp.name, "title": exp.title, "workload": exp.workload,
            "x": {"name": x_name, "label": x_label.replace("{inter}", f"{cfg.inter_rtt_ms:g}"), "unit": x_unit},
            "systems": systems, "skipped_points": sweep.skipped_points, "n_repeat": cfg.n_repeat, "tail_percentile": cfg.tail_percentile,
            "quick": quick, "backend": backend.name, "mechanism": backend.mechanism,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "points": points, "exp_config": cfg.as_dict()}


def previous_runs(exp_dir: Path) -> dict:
    """(point_key, repeat) -> (run_dir, meta) of the newest run of that point and repeat, reused when its outcome
    is ok (rundirs.run_outcome: ended ok, and its folder validates), else run again (a newer failed or damaged run is
    not papered over by an older ok one)."""
    newest = {}
    for run_dir, meta in scan_runs(exp_dir):   # oldest first: newer ones overwrite
        newest[(meta["point_key"], int(meta.get("repeat", 0)))] = (run_dir, meta)
    return newest


# ---------------------------------------------------------------- progress

def _hms(s: float) -> str:
    s = int(max(0, s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """A tqdm bar on a terminal, plain lines otherwise: system, point, repeat, elapsed, ETA."""

    def __init__(self, total: int, est_run_s: float, tty: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.total, self.done, self.est = total, 0, est_run_s
        self.timed: list[float] = []
        self.t0 = time.monotonic()
        tty = self.stream.isatty() if tty is None else tty
        self.bar = None
        if tty and total:
            from tqdm import tqdm
            self.bar = tqdm(total=total, file=self.stream, unit="run", dynamic_ncols=True,
                            bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} runs{postfix}")

    def eta(self) -> float:
        per = sum(self.timed) / len(self.timed) if self.timed else self.est
        return (self.total - self.done) * per

    def write(self, msg: str) -> None:
        if self.bar is not None:
            self.bar.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def start(self, t: Task, n_repeat: int) -> None:
        what = f"{t.system} {t.point.label} (x={t.point.x:g}) repeat {t.repeat + 1}/{n_repeat}"
        el = time.monotonic() - self.t0
        if self.bar is not None:
            self.bar.set_description_str(what)
            self.bar.set_postfix_str(f"elapsed {_hms(el)}, ETA ~{_hms(self.eta())}")
        else:
            self.write(f"[{self.done + 1}/{self.total}] {what}; elapsed {_hms(el)}, ETA ~{_hms(self.eta())}")

    def finish(self, o: Outcome) -> None:
        self.done += 1
        if not o.reused:
            self.timed.append(o.wall_s)
        if o.reused:
            msg = f"    reused ok run {o.run_dir}"
        elif o.status == "ok":
            msg = f"    ok in {o.wall_s:.0f}s: {o.run_dir}"
        else:
            msg = f"    FAILED in {o.wall_s:.0f}s ({o.reason})" + (f": {o.run_dir}" if o.run_dir else "")
        self.write(msg)
        if self.bar is not None:
            self.bar.set_postfix_str(f"elapsed {_hms(time.monotonic() - self.t0)}, ETA ~{_hms(self.eta())}")
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------- running

def run_one(backend, exp: Experiment, cfg: ExpConfig, t: Task, out_root: Path, quick: bool) -> Outcome:
    """One run of the sweep; its outcome is the one the run lifecycle recorded. Interrupted propagates."""
    meta_extra = {"experiment": exp.name, "system": t.system,
                  "x": {"name": exp.axis(t.point)[0], "value": t.point.x, "unit": exp.axis(t.point)[2]},
                  "series": t.point.series, "point_label": t.point.label, "repeat": t.repeat,
                  "n_repeat": cfg.n_repeat, "point_key": t.key, "mechanism": backend.mechanism, "quick": quick,
                  "runner_start_unix": time.time(), **t.point.meta}
    config = {"experiment": exp.name, "knobs": t.knobs, "exp_config": cfg.as_dict(), "quick": quick}
    t0 = time.monotonic()
    try:
        deploy = backend.deployment(**t.knobs)
        res = backend.run(deploy, exp.name, out_root=str(out_root), config=config, meta_extra=meta_extra)
    except Interrupted:
        raise
    except RunError as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        return Outcome(t, "failed", reason, Path(e.run_dir) if e.run_dir else None, wall_s=time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - a bug or an unexpected backend error fails this run only
        reason = f"error: {type(e).__name__}: {e}".splitlines()[0]
        traceback.print_exc(file=sys.stderr)
        return Outcome(t, "failed", reason, None, wall_s=time.monotonic() - t0)
    return Outcome(t, res.status, res.reason, Path(res.run_dir), wall_s=time.monotonic() - t0)


def run_sweep(exp: Experiment, cfg: ExpConfig, backend, out_root="results", fresh: bool = False,
              quick: bool = False, log=print, tty: bool | None = None) -> Sweep:
    """Plan, write results/<exp>/sweep.json, run (or reuse) every task. Returns the Sweep (interrupted set
    when Ctrl-C/SIGTERM stopped it)."""
    out_root = Path(out_root)
    sweep = plan(exp, cfg, backend, log=log)
    exp_dir = out_root / exp.name
    exp_dir.mkdir(parents=True, exist_ok=True)
    (exp_dir / figures.MANIFEST).write_text(json.dumps(manifest(sweep, cfg, backend, quick), indent=2) + "\n")
    previous = {} if fresh else previous_runs(exp_dir)
    progress = Progress(len(sweep.tasks), run_estimate(sweep, cfg), tty=tty)
    try:
        with interrupts.stop_on_signals() as stop:
            for t in sweep.tasks:
                stop.check()
                progress.start(t, cfg.n_repeat)
                old = previous.get((t.key, t.repeat))
                status, reason = run_outcome(*old) if old else ("", "")
                if status == "ok":
                    o = Outcome(t, "ok", "", old[0], reused=True)
                else:
                    if old:  # why this point runs again
                        progress.write(f"    running it again: its last run {old[0].name} {status} ({reason})")
                    o = run_one(backend, exp, cfg, t, out_root, quick)
                sweep.outcomes.append(o)
                progress.finish(o)
    except Interrupted as e:
        sweep.interrupted = e
        progress.write(f"{e}: stopped the sweep (the run under way is recorded as interrupted)")
    finally:
        progress.close()
    return sweep


# ---------------------------------------------------------------- command line

def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--quick", action="store_true",
                    help="preset for a 2-core machine: each sweep thinned to at most 3 points (first, middle, "
                         f"last), one client-process count, {experiments.QUICK_DURATION_S} s runs "
                         f"({experiments.QUICK_WARMUP_S} s warm-up, {experiments.QUICK_COOLDOWN_S} s cool-down), "
                         "1 repeat; exp 4 sweeps 2..REGIONS regions if fewer than two counts are configured")
    ap.add_argument("--fresh", action="store_true",
                    help="run every point again instead of reusing ok runs of the same configuration "
                         "(old run folders are kept, the newest run counts)")
    ap.add_argument("--seed", type=int, default=None,
                    help="workload seed of each point's first repeat (repeat r uses SEED + r - 1); overrides SEED of "
                         "exp_config.py (default 1), recorded in every run folder; another seed gives other points")
    ap.add_argument("--repeats", type=int, default=None,
                    help="runs per point, overriding N_REPEAT (and --quick's 1): e.g. --quick --repeats 3 for the "
                         "quick points with a spread; the runs already there count (repeat 1 of a --quick sweep is "
                         "reused)")
    ap.add_argument("--preset", default=None, metavar="NAME",
                    help="a named set of exp_config.py settings laid over the file's (the knobs it names take its "
                         "values; --seed, --quick and --repeats apply on top): "
                         + "; ".join(f"{p.name}: {p.about}" for p in presets.PRESETS.values())
                         + " (docs/experiments.md)")
    ap.add_argument("--plan", action="store_true",
                    help="print the plan (per experiment: protocols, points, repeats, runs, estimated time; the "
                         "total) and exit 0 without starting anything")
    options.add_backend(ap)
    options.add_config(ap)
    options.add_results_root(ap)
    options.add_wait(ap)


def sweep_config(exp: Experiment, config=None, preset: str | None = None, seed: int | None = None,
                 quick: bool = False, repeats: int | None = None) -> ExpConfig:
    """exp_config.py (or config) with the command line's layers over it, in this order: --preset, --seed, --quick,
    --repeats; each result validated (ValueError naming the knob)."""
    cfg = presets.apply(load_exp_config(config), preset)
    if seed is not None:
        cfg = validate(dataclasses.replace(cfg, seed=seed))
    if quick:
        cfg = experiments.quick_config(cfg, exp)
    if repeats is not None:
        cfg = validate(dataclasses.replace(cfg, n_repeat=repeats))
    return cfg


def run_experiment(name: str, config=None, quick=False, fresh=False, backend_kind="auto", out="results",
                   log=print, seed: int | None = None, repeats: int | None = None,
                   preset: str | None = None) -> tuple[int, Path | None]:
    """One experiment end to end: sweep, close the backend, draw the figure, print the table and the PDF path.
    preset lays a named set of settings over the config (testbed/core/presets.py), seed overrides SEED, repeats
    N_REPEAT (also the --quick preset's). Returns (exit code, pdf): 0 all ok, 1 some point failed, 2 bad
    configuration, 128 + signal interrupted."""
    exp = experiments.get(name)
    try:
        cfg = sweep_config(exp, config, preset, seed, quick, repeats)
        backend = open_backend(backend_kind, cfg)
    except (ValueError, RuntimeError) as e:
        print(f"{exp.script()}: error: {e}", file=sys.stderr)
        return 2, None
    t0 = time.monotonic()
    flags = (f" --preset {preset}" if preset else "") + (" --quick" if quick else "")
    log(f"== {exp.title}: {exp.script()}{flags} on the {backend.describe()}")
    try:
        try:
            sweep = plan(exp, cfg, backend, log=lambda *_: None)
        except ValueError as e:
            print(f"{exp.script()}: error: {e}", file=sys.stderr)
            return 2, None
        n, systems = len(sweep.tasks), list(dict.fromkeys(t.system for t in sweep.tasks))
        log(f"   protocols {', '.join(systems) or '(none built)'}; {len({t.key for t in sweep.tasks})} points"
            f" x {cfg.n_repeat} repeat(s) = {n} runs of {run_length(sweep, cfg):g} s"
            f" (~{_hms(n * run_estimate(sweep, cfg))} if none is reused)")
        sweep = run_sweep(exp, cfg, backend, out_root=out, fresh=fresh, quick=quick, log=log)
    finally:
        try:
            backend.close()
        except Exception as e:  # noqa: BLE001
            print(f"warning: closing the backend failed: {e}", file=sys.stderr)
    n_reused = sum(o.reused for o in sweep.outcomes)
    code = sweep.interrupted.exit_code if sweep.interrupted else 1 if sweep.failed else 0
    try:
        fig = drawing.draw(exp.name, root=out, tail=cfg.tail_percentile)
    except figures.NoRuns as e:
        log(f"\nno figure: {e}")
        return code or 1, None
    except files.DiskFull as e:   # the runs are recorded; the figure before this one is untouched
        log(f"\nno figure: {e}")
        return code or 1, None
    log("")
    log(drawing.point_table(fig))
    hot = figures.hot_points(fig.table)
    if hot:  # the figure's caption says it too
        log(f"\nWARNING: the host's CPU was more than {figures.CPU_BUSY_WARN_PCT} % busy at {', '.join(hot)}: the "
            "tails there include waiting for a core, not only the protocol; lower the load (CONCURRENCY_LEVELS, "
            "FIXED_CONCURRENCY, SCALABILITY_CONCURRENCY) or give the runs more cores")
    unkept = figures.unkept_points(fig.table)
    if unkept:  # the caption says it too
        log(f"\nWARNING: the open load was not kept up with at {', '.join(unkept)} (arrivals shed or never sent): the "
            "latencies there are of what the system did run; lower OPEN_LOOP_RATE (EXP1_OFFERED_RATES) or raise OPEN_LOOP_MAX_OUTSTANDING")
    log(f"\n{len(sweep.outcomes)} of {len(sweep.tasks)} runs done ({n_reused} reused, {len(sweep.failed)} failed) "
        f"in {_hms(time.monotonic() - t0)}" + (f"; INTERRUPTED ({sweep.interrupted})" if sweep.interrupted else ""))
    log(f"figure: {fig.pdf}  (also {fig.png.name}, {fig.csv.name})")
    return code, fig.pdf


# ---------------------------------------------------------------- the plan of a job

class _Planning(Backend):
    """What plan() asks of a backend, without opening one (no container is asked, no run starts): the engine's
    protocol registry, read as the local backend reads it (the driver runs this checkout's engine too)."""
    mechanism = "app"

    def __init__(self, kind: str):
        self.name = kind

    def deployment(self, **knobs) -> dict:
        raise NotImplementedError("a plan deploys nothing")

    def run(self, deploy, name, out_root="results", config=None, meta_extra=None, probe=0):
        raise NotImplementedError("a plan runs nothing")


@dataclass
class PlannedSweep:
    """One experiment of a job's plan: its sweep as run_experiment() would plan it."""
    experiment: Experiment
    cfg: ExpConfig
    sweep: Sweep

    @property
    def systems(self) -> list[str]:
        return list(dict.fromkeys(t.system for t in self.sweep.tasks))

    @property
    def points(self) -> int:
        """The experiment's points that run (a protocol's line has one each; exp 4 skips SLOG's below 3 regions)."""
        return len({(t.point.series, t.point.x, t.point.label) for t in self.sweep.tasks})

    @property
    def runs(self) -> int:
        return len(self.sweep.tasks)

    @property
    def run_s(self) -> float:
        return run_estimate(self.sweep, self.cfg)

    @property
    def estimate_s(self) -> float:
        return self.runs * self.run_s


def plan_job(names: list[str], config=None, preset: str | None = None, seed: int | None = None, quick: bool = False,
             repeats: int | None = None, backend_kind: str = "auto", log=print) -> list[PlannedSweep]:
    """Every experiment of a job planned as its sweep would be (testbed/core/presets.py, sweep_config, plan()),
    nothing started: no backend opened, no lock taken, nothing written. log gets what plan() says (protocols or
    points skipped). ValueError '<script>: error: <what>' for the first experiment that would be refused."""
    out = []
    for name in names:
        exp = experiments.get(name)
        try:
            cfg = sweep_config(exp, config, preset, seed, quick, repeats)
            out.append(PlannedSweep(exp, cfg, plan(exp, cfg, _Planning(backend_kind),
                                                   log=lambda m, e=exp: log(f"exp{e.number}: {m}"))))
        except ValueError as e:
            raise ValueError(f"{exp.script()}: error: {e}") from None
    return out


def render_plan(plans: list[PlannedSweep], preset: str | None = None, config=None) -> str:
    """The plan as printed: what the preset changes in the config, a row per experiment (protocols, points,
    repeats, runs, seconds per run, estimated time), the total in runs and hours."""
    lines = []
    if preset:
        p = presets.get(preset)
        changed = presets.changes(load_exp_config(config), preset)
        lines.append(f"preset {p.name}: {p.about}; over {config or 'exp_config.py'} it sets"
                     + (":" if changed else " nothing new (the file has its values already)"))
        lines += [f"  {k} = {new!r}  (the file: {old!r})" for k, old, new in changed]
    total_runs, total_s = sum(pl.runs for pl in plans), sum(pl.estimate_s for pl in plans)
    rows = [[f"exp{pl.experiment.number} {pl.experiment.name}", ", ".join(pl.systems), str(pl.points),
             str(pl.cfg.n_repeat), str(pl.runs), f"{pl.run_s:g} s", _hms(pl.estimate_s)] for pl in plans]
    rows.append(["total", "", "", "", str(total_runs), "", _hms(total_s)])
    lines.append(text_table(["experiment", "protocols", "points", "repeats", "runs", "per run", "estimated"], rows,
                            left=(0, 1)))
    lines.append(f"{total_runs} runs, about {_hms(total_s)} ({total_s / 3600:.1f} h) if none is reused (per run: "
                 f"its length + {EST_STARTUP_S:g} s for start-up, checks and collection, the runner's first ETA; the "
                 "progress line then uses the measured times)")
    return "\n".join(lines)


def run_experiments(names: list[str], a: argparse.Namespace, argv: list[str], script: str) -> int:
    """The command lines' common body: run on the host through the driver container (testbed/sweeps/mainjob.py), or
    here (local backend, or inside the driver) holding the job's lock; experiments stop at the first bad
    configuration or interrupt. Prints the figure paths, and writes results/claims.md, the table of every run
    (results/runs.parquet, runs.csv: testbed/analysis/runs_table.py) and the page of all of it (results/index.html:
    testbed/analysis/index.py).
    With --plan: prints the job's plan (render_plan) and returns 0, starting nothing (2 and one line when it would
    be refused). With a preset or several experiments the plan is printed before anything starts too (on the host:
    not again by the job it starts in the driver)."""
    prog = Path(script).stem
    preset, plan_only = getattr(a, "preset", None), getattr(a, "plan", False)
    if preset is not None:
        try:
            presets.get(preset)
        except ValueError as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
    if plan_only or ((preset is not None or len(names) > 1) and not os.environ.get(ENV_JOB)):
        notes = []
        try:
            plans = plan_job(names, a.config, preset, a.seed, a.quick, a.repeats, a.backend, log=notes.append)
        except ValueError as e:
            if plan_only:
                print(e, file=sys.stderr)
                return 2
            plans = None   # the experiment says so when it starts, in the same words (or its engine can tell more)
        if plans is not None:
            print(render_plan(plans, preset, a.config), flush=True)
        if plan_only:
            for n in notes:   # a sweep says them as it starts
                print(f"  {n}")
            return 0
    try:
        where = mainjob.choose(a.backend)
        if where == "swarm-via-driver":
            return mainjob.run_in_driver(script, argv, a.config, wait=a.wait, preset=preset)
    except (RuntimeError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    kind = "local" if where == "local" else "swarm"
    rc, pdfs = 0, []
    try:
        with job(kind, a.out, a.wait):
            for name in names:
                code, pdf = run_experiment(name, a.config, a.quick, a.fresh, kind, a.out, seed=a.seed,
                                           repeats=a.repeats, preset=preset)
                if pdf:
                    pdfs.append(pdf)
                rc = max(rc, code)
                if code == 2 or code > 128:  # bad configuration or interrupted: stop here
                    break
    except (lock.Busy, RuntimeError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    if rc == 2 and not pdfs:  # refused before anything ran: its one line says it all
        return rc
    print("\nfigures:" if pdfs else "\nno figure written")
    for p in pdfs:
        print(f"  {p}")
    try:
        table = claims.write(a.out)
    except (OSError, ValueError) as e:  # the figures stand without it
        print(f"warning: {claims.FILE} not written: {e}", file=sys.stderr)
    else:
        if table:
            print(f"every experiment's numbers beside the paper's claims: {table}")
    for refresh in (runs_table.refresh, index.refresh):   # the page last: it links the tables
        line = refresh(a.out)
        print(line, file=sys.stderr if line.startswith("warning:") else sys.stdout)
    return rc


def main(name: str, argv=None) -> int:
    exp = experiments.get(name)
    ap = argparse.ArgumentParser(prog=exp.script(), description=f"{exp.title}. Sweeps {exp.x_label} for every "
                                 "built protocol of SYSTEMS (exp_config.py), N_REPEAT times per point, into "
                                 f"results/{exp.name}/<run-id>/, then draws results/data-{exp.name}.pdf (+ .png, "
                                 ".csv). Re-running resumes: ok runs of the same configuration are reused.")
    add_arguments(ap)
    argv = sys.argv[1:] if argv is None else argv
    return run_experiments([name], ap.parse_args(argv), argv, exp.script())
