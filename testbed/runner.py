"""The shared sweep runner behind experiments/exp*.py and run_experiments.py.

For every built protocol of SYSTEMS (an unbuilt one is skipped with a message), every point of the
experiment and every repeat: build the deployment, run it into results/<exp>/<run-id>/, and record the
outcome in the run's meta.json: ok, or failed with a reason (run error, inconsistent checker verdict, no
commits in the window). A failure never stops the sweep (Ctrl-C or SIGTERM does, cleanly: the run that was
interrupted is marked failed, the figure is still drawn from what exists).

Resume: a run is identified by its point key (a hash of the experiment, the protocol, every deploy knob but
the per-repeat seed, the backend and its shaping mechanism) and its repeat index. A run with the same key and
repeat that ended ok is reused; failed ones are run again; --fresh runs everything again (old folders stay).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from . import deploy as deploylib
from . import experiments, figures
from .backend import BACKENDS, base_knobs, open_backend
from .config import ExpConfig, load_exp_config
from .experiments import Experiment, Point
from .local import RunError

KEY_VERSION = 1
NOT_MEASUREMENT = ("seed", "base_port", "host")  # knobs that place a run or vary per repeat
WATCHDOG_EXTRA_S = 180      # on top of duration + drain: the backend's own limits must have failed by then
EST_STARTUP_S = 8           # first guess of per-run overhead for the ETA, before a run has been timed


class RunTimeout(RunError):
    """The runner's watchdog fired (the backend's own time limits did not stop the run)."""


class Interrupted(Exception):
    pass


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


def point_key(experiment: str, system: str, knobs: dict, backend: str, mechanism: str) -> str:
    """Stable hash of everything that determines a point's measurement (not the per-repeat seed)."""
    k = {n: v for n, v in deploylib.validate(**knobs).items() if n not in NOT_MEASUREMENT}
    blob = json.dumps(_canon({"v": KEY_VERSION, "experiment": experiment, "system": system, "knobs": k,
                              "backend": backend, "mechanism": mechanism}), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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
    interrupted: bool = False

    @property
    def failed(self) -> list:
        return [o for o in self.outcomes if o.status != "ok"]


# ---------------------------------------------------------------- planning

def plan(exp: Experiment, cfg: ExpConfig, backend, log=print) -> Sweep:
    """Every (system, point, repeat) to run, knobs validated before anything starts (ValueError)."""
    sweep = Sweep(exp)
    built = set(backend.built_modes())
    systems = []
    for s in cfg.systems:
        if s in built:
            systems.append(s)
        else:
            sweep.skipped[s] = "not built"
            log(f"skipping {s}: not built (txn-server --list-modes lists: {', '.join(sorted(built)) or 'nothing'})")
    for s in systems:
        for p in exp.points(cfg):
            if s == "slog" and (p.regions or cfg.regions) < 3:
                log(f"skipping slog at {p.label}: SLOG needs at least 3 regions")
                continue
            knobs = {**base_knobs(cfg, **p.base), **p.knobs, "mode": s, "name": exp.name}
            key = point_key(exp.name, s, knobs, backend.name, backend.mechanism)
            for r in range(cfg.n_repeat):
                sweep.tasks.append(Task(s, p, r, {**knobs, "seed": r + 1}, key))
    return sweep


def manifest(sweep: Sweep, cfg: ExpConfig, backend, quick: bool) -> dict:
    exp = sweep.experiment
    systems = {s: sweep.skipped.get(s, "run") for s in cfg.systems}
    points, seen = [], set()
    for t in sweep.tasks:
        if t.key not in seen:
            seen.add(t.key)
            points.append(dict(key=t.key, system=t.system, x=t.point.x, series=t.point.series,
                               label=t.point.label, knobs=_canon({k: v for k, v in t.knobs.items() if k != "seed"})))
    return {"experiment": exp.name, "title": exp.title, "workload": exp.workload,
            "x": {"name": exp.x_name, "label": exp.x_label.replace("{inter}", f"{cfg.inter_rtt_ms:g}"),
                  "unit": exp.x_unit},
            "systems": systems, "n_repeat": cfg.n_repeat, "tail_percentile": cfg.tail_percentile,
            "quick": quick, "backend": backend.name, "mechanism": backend.mechanism,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "points": points, "exp_config": cfg.as_dict()}


def reusable_runs(exp_dir: Path) -> dict:
    """(point_key, repeat) -> the newest run folder of that point and repeat that ended ok."""
    out = {}
    for run_dir, meta in figures.scan_runs(exp_dir):   # oldest first: newer ones overwrite
        if figures.run_outcome(run_dir, meta)[0] == "ok":
            out[(meta["point_key"], int(meta.get("repeat", 0)))] = run_dir
    return out


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

def _record(run_dir: Path | None, status: str, reason: str) -> None:
    """Write the runner's verdict into the run's meta.json (the run folder stays the single record)."""
    if run_dir is None:
        return
    path = Path(run_dir) / "meta.json"
    meta = figures.read_json(path) or {"status": "failed", "error": reason or "no meta.json"}
    meta["outcome"] = {"status": status, "reason": reason}
    if status != "ok" and meta.get("status") == "ok" and reason.startswith("interrupted"):
        meta.update(status="failed", error=reason)
    path.write_text(json.dumps(meta, indent=2) + "\n")


class _Signals:
    """While a sweep runs (main thread only): SIGTERM stops it like Ctrl-C, and a watchdog (SIGALRM) cuts a
    run that outlives every limit of the backend."""

    def __init__(self):
        self.main = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM")
        self.old = {}

    def __enter__(self):
        if self.main:
            def on_term(signum, _frame):
                raise KeyboardInterrupt(signal.Signals(signum).name)

            def on_alarm(_signum, _frame):
                raise RunTimeout(f"runner watchdog: the run outlived {self.limit:.0f}s")
            self.old = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
                        signal.SIGALRM: signal.signal(signal.SIGALRM, on_alarm)}
        return self

    def arm(self, seconds: float) -> None:
        self.limit = seconds
        if self.main:
            signal.setitimer(signal.ITIMER_REAL, seconds)

    def disarm(self) -> None:
        if self.main:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def __exit__(self, *exc):
        self.disarm()
        for s, h in self.old.items():
            signal.signal(s, h)
        return False


def watchdog_limit(deploy: dict) -> float:
    """Seconds after which the runner cuts a run the backend has not stopped itself."""
    c = deploy["client"]
    return float(c["duration_s"]) + float(c.get("drain_timeout_s", 10)) + WATCHDOG_EXTRA_S


def _interrupted(e: BaseException) -> bool:
    return isinstance(e, KeyboardInterrupt) or bool(getattr(e, "interrupted", False))


def run_one(backend, exp: Experiment, cfg: ExpConfig, t: Task, out_root: Path, sig: _Signals,
            quick: bool) -> Outcome:
    meta_extra = {"experiment": exp.name, "system": t.system,
                  "x": {"name": exp.x_name, "value": t.point.x, "unit": exp.x_unit},
                  "series": t.point.series, "point_label": t.point.label, "repeat": t.repeat,
                  "n_repeat": cfg.n_repeat, "point_key": t.key, "mechanism": backend.mechanism, "quick": quick}
    config = {"experiment": exp.name, "knobs": t.knobs, "exp_config": cfg.as_dict(), "quick": quick}
    t0 = time.monotonic()
    run_dir = None
    try:
        deploy = backend.deployment(**t.knobs)
        sig.arm(watchdog_limit(deploy))
        try:
            meta_extra["runner_start_unix"] = time.time()
            res = backend.run(deploy, exp.name, out_root=str(out_root), config=config, meta_extra=meta_extra)
        finally:
            sig.disarm()
        run_dir = res.run_dir
        status, reason = figures.verdict(res.check or {}, res.summary or {})
    except (KeyboardInterrupt, RunError) as e:
        run_dir = getattr(e, "run_dir", None)
        reason = "interrupted" if _interrupted(e) else ("run error: " + str(e).splitlines()[0] if str(e) else
                                                       f"run error: {type(e).__name__}")
        if isinstance(e, RunTimeout):
            reason = f"timeout: {e}"
        _record(run_dir, "failed", reason)
        if _interrupted(e):
            raise Interrupted(reason) from None
        return Outcome(t, "failed", reason, Path(run_dir) if run_dir else None, wall_s=time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - a bug or an unexpected backend error fails this run only
        reason = f"error: {type(e).__name__}: {e}".splitlines()[0]
        traceback.print_exc(file=sys.stderr)
        return Outcome(t, "failed", reason, None, wall_s=time.monotonic() - t0)
    _record(run_dir, status, reason)
    return Outcome(t, status, reason, Path(run_dir), wall_s=time.monotonic() - t0)


def run_sweep(exp: Experiment, cfg: ExpConfig, backend, out_root="results", fresh: bool = False,
              quick: bool = False, log=print, tty: bool | None = None) -> Sweep:
    """Plan, write results/<exp>/sweep.json, run (or reuse) every task. Returns the Sweep (interrupted set
    when Ctrl-C/SIGTERM stopped it)."""
    out_root = Path(out_root)
    sweep = plan(exp, cfg, backend, log=log)
    exp_dir = out_root / exp.name
    exp_dir.mkdir(parents=True, exist_ok=True)
    (exp_dir / figures.MANIFEST).write_text(json.dumps(manifest(sweep, cfg, backend, quick), indent=2) + "\n")
    reuse = {} if fresh else reusable_runs(exp_dir)
    est = cfg.duration_s + EST_STARTUP_S
    progress = Progress(len(sweep.tasks), est, tty=tty)
    try:
        with _Signals() as sig:
            for t in sweep.tasks:
                progress.start(t, cfg.n_repeat)
                old = reuse.get((t.key, t.repeat))
                if old is not None:
                    o = Outcome(t, "ok", "", old, reused=True)
                else:
                    o = run_one(backend, exp, cfg, t, out_root, sig, quick)
                sweep.outcomes.append(o)
                progress.finish(o)
    except (Interrupted, KeyboardInterrupt):
        sweep.interrupted = True
        progress.write("interrupted: stopping the sweep (the interrupted run is marked failed)")
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
    ap.add_argument("--backend", default="auto", choices=BACKENDS,
                    help="auto (default): the local Docker swarm when Docker answers (containers brought up, the "
                         "job run in the driver container), else local processes; local; swarm")
    ap.add_argument("--config", default=None, help="experiment config file (default: exp_config.py)")
    ap.add_argument("--out", default="results", help="results root (default results/)")


def run_experiment(name: str, config=None, quick=False, fresh=False, backend_kind="auto", out="results",
                   log=print) -> tuple[int, Path | None]:
    """One experiment end to end: sweep, close the backend, draw the figure, print the table and the PDF path.
    Returns (exit code, pdf): 0 all ok, 1 some point failed, 2 bad configuration, 130 interrupted."""
    exp = experiments.get(name)
    try:
        cfg = load_exp_config(config)
        if quick:
            cfg = experiments.quick_config(cfg, exp)
        backend = open_backend(backend_kind, cfg)
    except (ValueError, RuntimeError) as e:
        print(f"{exp.script()}: error: {e}", file=sys.stderr)
        return 2, None
    t0 = time.monotonic()
    log(f"== {exp.title}: {exp.script()}{' --quick' if quick else ''} on the {backend.describe()}")
    try:
        try:
            sweep = plan(exp, cfg, backend, log=lambda *_: None)
        except ValueError as e:
            print(f"{exp.script()}: error: {e}", file=sys.stderr)
            return 2, None
        n, systems = len(sweep.tasks), list(dict.fromkeys(t.system for t in sweep.tasks))
        log(f"   protocols {', '.join(systems) or '(none built)'}; {len({t.key for t in sweep.tasks})} points"
            f" x {cfg.n_repeat} repeat(s) = {n} runs of {cfg.duration_s:g} s"
            f" (~{_hms(n * (cfg.duration_s + EST_STARTUP_S))} if none is reused)")
        sweep = run_sweep(exp, cfg, backend, out_root=out, fresh=fresh, quick=quick, log=log)
    finally:
        try:
            backend.close()
        except Exception as e:  # noqa: BLE001
            print(f"warning: closing the backend failed: {e}", file=sys.stderr)
    fig = figures.draw(exp.name, root=out, tail=cfg.tail_percentile)
    log("")
    log(figures.point_table(fig.table, fig.tail))
    n_reused = sum(o.reused for o in sweep.outcomes)
    log(f"\n{len(sweep.outcomes)} of {len(sweep.tasks)} runs done ({n_reused} reused, {len(sweep.failed)} failed) "
        f"in {_hms(time.monotonic() - t0)}" + ("; INTERRUPTED" if sweep.interrupted else ""))
    log(f"figure: {fig.pdf}  (also {fig.png.name}, {fig.csv.name})")
    return (130 if sweep.interrupted else 1 if sweep.failed else 0), fig.pdf


def main(name: str, argv=None) -> int:
    exp = experiments.get(name)
    ap = argparse.ArgumentParser(prog=exp.script(), description=f"{exp.title}. Sweeps {exp.x_label} for every "
                                 "built protocol of SYSTEMS (exp_config.py), N_REPEAT times per point, into "
                                 f"results/{exp.name}/<run-id>/, then draws results/data-{exp.name}.pdf (+ .png, "
                                 ".csv). Re-running resumes: ok runs of the same configuration are reused.")
    add_arguments(ap)
    a = ap.parse_args(argv)
    from . import mainjob
    try:
        where = mainjob.choose(a.backend)
        if where == "swarm-via-driver":
            return mainjob.run_in_driver(exp.script(), argv if argv is not None else sys.argv[1:], a.config)
    except (RuntimeError, ValueError) as e:
        print(f"{exp.script()}: error: {e}", file=sys.stderr)
        return 2
    return run_experiment(name, a.config, a.quick, a.fresh, "local" if where == "local" else "swarm", a.out)[0]
