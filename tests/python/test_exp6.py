"""Exp 6's points (testbed/core/experiments.py) and knobs (FAULT_* in exp_config.py): each fault kind a point on
the target region, in a run long enough for before, during and after, every schedule a valid deployment."""
import dataclasses

import pytest

from testbed.core import deploy, experiments
from testbed.core.config import ExpConfig, validate
from testbed.runs.backend import base_knobs


def cfg(**kw):
    return validate(dataclasses.replace(ExpConfig(), **kw))


def test_every_kind_is_a_point_with_its_schedule_window_and_region():
    c = cfg()
    pts = experiments.get("exp6").points(c)
    assert [p.label for p in pts] == ["none", "partition", "pause", "crash", "clock", "spike"]
    assert [p.x for p in pts] == [0, 1, 2, 3, 4, 5]
    for p in pts:
        assert p.knobs["duration"] == 30 and p.meta["fault_window_s"] == [10.0, 15.0] and p.meta["fault_region"] == 2
        # a deployment the engine would take: the schedule parses and fits the run, its targets exist
        dep = deploy.build_deployment(mode="dast", **{**base_knobs(c), **p.knobs})
        assert bool(dep.get("faults")) == (p.label != "none"), p.label
    assert [p.knobs["faults"] for p in pts] == ["", "partition:r2@10+5", "pause:follower-r2@10+5",
                                              "crash:follower-r2@10+5", "clock:r2+50ms@10+5", "spike:r2-*+100ms@10+5"]
    # a pause or a crash stops one follower's process: a process per node
    assert pts[2].knobs["processes"] == pts[3].knobs["processes"] == "node" and "processes" not in pts[1].knobs
    assert experiments.get("exp6").points(cfg(fault_region=1, fault_clock_skew_ms=-20))[4].knobs["faults"] == \
        "clock:r0-20ms@10+5"


def test_quick_runs_a_partition_a_pause_and_a_crash_in_13_s():
    q = experiments.quick_config(cfg(), experiments.get("faults"))
    pts = experiments.get("faults").points(q)
    assert [p.label for p in pts] == ["partition", "pause", "crash"]
    assert all(p.knobs["duration"] == 13 and p.meta["fault_window_s"] == [5.0, 8.0] for p in pts)
    assert experiments.quick_config(cfg(fault_kinds=("clock", "spike"))).fault_kinds == ("clock", "spike")


@pytest.mark.parametrize("kw, msg", [
    (dict(fault_kinds=("none", "flood")), "FAULT_KINDS=['none', 'flood']: must be distinct words of none, partition"),
    (dict(fault_kinds=("pause", "pause")), "FAULT_KINDS=['pause', 'pause']: must be distinct"),
    (dict(fault_at_s=4), "FAULT_AT_S=4: must be > WARMUP_S=5"),
    (dict(fault_for_s=0), "FAULT_FOR_S=0: must be a number in [0.5, 600]"),
    (dict(fault_region=4), "FAULT_REGION=4: must be <= REGIONS=3"),
])
def test_bad_fault_knobs_are_one_line(kw, msg):
    with pytest.raises(ValueError) as e:
        cfg(**kw)
    assert str(e.value).startswith(msg) and "\n" not in str(e.value), str(e.value)


def test_a_schedule_its_deployment_cannot_run_is_refused_when_the_sweep_is_planned():
    """A pause as long as the engine's connect timeout passed the knob checks and failed each run before its folder
    existed, so exp 6's figure showed the `none` row alone with no mark: the plan (and --plan) refuses it."""
    from test_runner import FakeBackend
    from testbed.sweeps import runner
    with pytest.raises(ValueError) as e:
        runner.plan(experiments.get("exp6"), cfg(fault_kinds=("none", "pause"), fault_for_s=10), FakeBackend(),
                    log=lambda *_: None)
    assert str(e.value) == ("faults point 'pause' (dast): faults: item 1 'pause:follower-r2@10+10': a pause of 10 s "
                            "is not shorter than the engine's connect timeout (10 s): its peers would take it for dead")
    assert runner.plan(experiments.get("exp6"), cfg(fault_kinds=("none", "pause")), FakeBackend(),
                       log=lambda *_: None).tasks
