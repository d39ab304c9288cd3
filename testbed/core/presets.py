"""Presets: named sets of exp_config.py settings that a command line selects (`run_experiments.py --preset NAME`).

    cfg = presets.apply(load_exp_config(path), "artifact")   # ValueError for an unknown name or a refused value
    presets.changes(cfg_before, "artifact")                  # [(knob, the file's value, the preset's value), ...]

A preset is a layer over the user's exp_config.py, as every flag is: the knobs it names take its values (it is
asked for on the command line, after the file was written), every other knob keeps the file's, and --seed,
--quick and --repeats still apply on top. The result is validated as any exp_config.py is
(testbed/core/config.py), so a preset cannot start what the file could not. The values are written here once;
docs/experiments.md ("The artifact's sweeps") lists them beside the artifact's own names.

artifact: the DAST artifact's exp_config.py (its sweeps, scale, repeats and trial length) for a cluster. One value
of it is not the artifact's: exp 5's X = 80 ms. Here X is the cross-region RTT's std-dev (100 +- X ms, each
direction X / sqrt(2)), and a per-direction std-dev above the one-way delay (50 ms; X > 70.7) biases the mean delay
by more than 8 % (samples below zero are clipped): config.py refuses it, as it refused the artifact's own clipping
(its defect: "X >= 50 clips one-way delay at 0"). The sweep stops at 70.

smoke: every experiment once, short, on the deployment the file describes (its regions and shards are kept, so on
the swarm it runs on the containers `make main` brought up): the point of each sweep where the baselines are most
loaded or contended (its last), exp 4 at its first and its last region count (so the regions a run uses go up and
down on one backend, as in `make main-all`), exp 6 its partition and pause. A value of it is a function of the
file's settings. `make smoke` runs it with --fresh into results/smoke/; CI runs it after `make main`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from testbed.core.config import KNOBS, ExpConfig, validate
SMOKE_FAULT_KINDS = ("partition", "pause")   # exp 6 in `make smoke`: a region's and a follower's fault


@dataclass(frozen=True)
class Preset:
    name: str
    about: str          # one line, shown by --help and the plan
    knobs: dict         # exp_config.py name -> value


PRESETS = {p.name: p for p in [
    Preset("artifact", "the DAST artifact's sweeps, scale, repeats and 15 s trials (its exp_config.py)", dict(
        REGIONS=4,                  # N_REGIONS: the regions of every experiment but exp 4
        MAX_REGIONS=6,              # MAX_REGIONS: the regions deployed
        SHARDS_PER_REGION=2,        # N_SHARD_PER_REGION
        N_REPEAT=5,                 # N_REPEAT
        DURATION_S=15,              # its trial length (DEFAULT_TRIAL_DURATION = 15)
        WARMUP_S=5,                 # its window started about 5 s in; it ended 5 s before the end (one 5 s poll
        COOLDOWN_S=2,               # interval): here the window is [5, 13) s, 8 s of the 15
        TAIL_PERCENTILE=99,         # TAIL_PERCENTILE
        CONCURRENCY_LEVELS=[1, 5, 10, 15, 20, 25, 30, 40, 50],  # exp 1: coordinators per client process
        CLIENT_PROCESS_PER_SHARD=[1, 2, 3],                     # exp 1: client processes per shard
        CRT_RATIOS=[10, 20, 30, 40, 50, 60, 70, 80, 90],        # exp 2
        ZIPFS=[0.5, 0.6, 0.7, 0.8, 0.9, 1],                     # exp 3 (its `zipfs`)
        SCALABILITY_N_REGIONS=[3, 5],                           # exp 4
        ROBUST_RTT_VAR=[10, 20, 30, 40, 50, 60, 70],            # exp 5 (its ROUBUST_RTT_VAR, without 80: above)
    )),
    # a value computed from the file's settings (a function of its ExpConfig): the point that preset keeps of them
    Preset("smoke", "every experiment once, in ~10 min: each sweep's last point (exp 4 its first and last region "
           "counts), exp 6 its partition and pause, 8 s runs, 1 repeat (`make smoke`: a setup check before a long "
           "sweep, and CI's)", dict(
        N_REPEAT=1,
        DURATION_S=8, WARMUP_S=2, COOLDOWN_S=1,                  # a 5 s window: every class commits in it
        CLIENT_PROCESS_PER_SHARD=lambda c: c.client_process_per_shard[:1],
        CONCURRENCY_LEVELS=lambda c: c.concurrency_levels[-1:],  # the most contended point of exp 1
        EXP1_OFFERED_RATES=lambda c: c.exp1_offered_rates[-1:],
        CRT_RATIOS=lambda c: c.crt_ratios[-1:],
        ZIPFS=lambda c: c.zipfs[-1:],
        # first and last: each protocol's runs change the regions used up, and the next protocol's down again
        SCALABILITY_N_REGIONS=lambda c: tuple(dict.fromkeys((c.scalability_n_regions[0],
                                                              c.scalability_n_regions[-1]))),
        ROBUST_RTT_VAR=lambda c: c.robust_rtt_var[-1:],
        FAULT_KINDS=lambda c: tuple(k for k in c.fault_kinds if k in SMOKE_FAULT_KINDS) or c.fault_kinds[:1],
        FAULT_AT_S=3, FAULT_FOR_S=2, FAULT_AFTER_S=3,            # exp 6: 8 s runs, the fault in [3, 5) s
    )),
]}


def get(name: str) -> Preset:
    """The preset of that name; ValueError '--preset 'x': must be one of artifact' otherwise."""
    if name not in PRESETS:
        raise ValueError(f"--preset {name!r}: must be one of {', '.join(PRESETS)}")
    return PRESETS[name]


def apply(cfg: ExpConfig, name: str | None) -> ExpConfig:
    """cfg with the preset's knobs set, validated (ValueError naming the knob); cfg itself when name is None."""
    if name is None:
        return cfg
    return validate(dataclasses.replace(cfg, **{KNOBS[k]: v(cfg) if callable(v) else v
                                                for k, v in get(name).knobs.items()}))


def _shown(v):
    return list(v) if isinstance(v, tuple) else v


def changes(cfg: ExpConfig, name: str) -> list[tuple[str, object, object]]:
    """(knob, cfg's value, the preset's value) of every knob the preset sets to another value than cfg has."""
    after = apply(cfg, name)
    return [(k, _shown(getattr(cfg, KNOBS[k])), _shown(getattr(after, KNOBS[k]))) for k in get(name).knobs
            if getattr(cfg, KNOBS[k]) != getattr(after, KNOBS[k])]
