"""testbed/core/knobs.py: one range per knob, used by exp_config.py's checks and a single run's, and never wider
than what the engine accepts in a deployment file."""
import dataclasses
import subprocess

import pytest

from conftest import REPO
from testbed.core import config, deploy, knobs

ENGINE = REPO / "build" / "txn-server"


def test_every_name_is_a_knob_somewhere():
    fields = {f.name.upper() for f in dataclasses.fields(config.ExpConfig)}
    for k in knobs.KNOBS:
        for n in k.names:
            assert (n in fields) if n.isupper() else (n in deploy.DEFAULTS), n


def test_every_setting_and_run_knob_has_its_default_in_the_schema_only():
    fields = dataclasses.fields(config.ExpConfig)
    assert {f.name.upper() for f in fields} == {n for k in knobs.SCHEMA for n in k.names if n.isupper()}
    assert set(deploy.DEFAULTS) == {n for k in knobs.SCHEMA for n in k.names if n.islower()}
    for f in fields:   # ExpConfig writes no default of its own
        assert f.default == knobs.default(f.name.upper()), f.name
    assert deploy.DEFAULTS == knobs.run_defaults() and deploy.REPLICAS == knobs.default("REPLICAS")


def test_a_word_knob_names_its_words():
    assert knobs.knob("district").check("uniform") == "uniform" == knobs.check("district", "uniform")
    with pytest.raises(ValueError, match=r"^TPCC_DISTRICT='zone': must be one of fixed, uniform$"):
        config.load_exp_config({"TPCC_DISTRICT": "zone"})
    with pytest.raises(ValueError, match=r"^processes='pod': must be one of container, split, node$"):
        deploy.validate(processes="pod")


def test_every_numeric_setting_and_run_knob_has_a_range():
    numeric = {n for n, v in deploy.DEFAULTS.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numeric == set(knobs.run_knobs())
    for f in dataclasses.fields(config.ExpConfig):
        if f.type in ("int", "float", "int | None") or (f.type == "tuple" and f.name.endswith(("levels", "shard", "ratios", "zipfs", "regions", "var"))):
            assert f.name.upper() in {n for k in knobs.KNOBS for n in k.names}, f.name


def test_defaults_are_in_range():
    for n, k in knobs.run_knobs().items():
        assert k.contains(deploy.DEFAULTS[n]), n
    cfg = config.ExpConfig()
    for k in knobs.KNOBS:
        for n in k.names:
            if n.isupper() and not isinstance(getattr(cfg, n.lower()), tuple) and getattr(cfg, n.lower()) is not None:
                assert k.contains(getattr(cfg, n.lower())), n


@pytest.mark.parametrize("v, ok", [(1, True), (64, True), (0, False), (65, False), (2.5, False), (True, False),
                                   (float("nan"), False), ("3", False)])
def test_check_says_the_knob_and_range(v, ok):
    if ok:
        assert knobs.check("regions", v) == v
    else:
        with pytest.raises(ValueError, match=r"^REGIONS=.*: must be an integer in \[1, 64\]$"):
            knobs.check("REGIONS", v)


def test_the_same_range_on_both_sides():
    with pytest.raises(ValueError, match=r"concurrency=257: must be an integer in \[1, 256\]"):
        deploy.validate(concurrency=257)
    with pytest.raises(ValueError, match=r"CONCURRENCY_LEVELS item=257: must be an integer in \[1, 256\]"):
        config.load_exp_config({"CONCURRENCY_LEVELS": [1, 257]})
    with pytest.raises(ValueError, match=r"TAIL_PERCENTILE=100: must be a number in \(50, 100\)"):
        config.load_exp_config({"TAIL_PERCENTILE": 100})
    with pytest.raises(ValueError, match=r"SCALABILITY_N_REGIONS item=65: must be an integer in \[1, 64\]"):
        config.load_exp_config({"REGIONS": 3, "SCALABILITY_N_REGIONS": [65]})
    # open loop's rate: a run's `rate` (None: closed loop, so a Setting) is held to OPEN_LOOP_RATE's range
    with pytest.raises(ValueError, match=r"^rate=0: must be a number in \(0, 1000000\]$"):
        deploy.validate(rate=0)
    with pytest.raises(ValueError, match=r"^OPEN_LOOP_RATE=0: must be a number in \(0, 1000000\]$"):
        config.load_exp_config({"OPEN_LOOP_RATE": 0})


def bounds():
    """(knob, value) at each bound of every single-run knob, with what else it needs to be a valid run."""
    for n, k in knobs.run_knobs().items():
        step = 1 if k.integer else 0.001   # an open bound: the nearest value inside
        for v in (k.lo + step if k.lo_open else k.lo, k.hi - step if k.hi_open else k.hi):
            v = int(v) if k.integer else v
            extra = {}
            if n in ("warmup", "cooldown"):   # warmup + cooldown < duration
                extra, v = {"duration": 3600}, min(v, 1000)
            if n == "duration" and v < 4:
                extra = {"warmup": 0, "cooldown": 0}
            if n == "jitter":
                extra = {"inter_rtt": 10000}
            if n == "retry_backoff":   # its cap is at least the backoff
                extra = {"retry_backoff_max": 600000}
            yield pytest.param(n, v, extra, id=f"{n}={v}")


@pytest.mark.slow
@pytest.mark.parametrize("name, value, extra", list(bounds()))
def test_the_engine_accepts_every_knob_at_its_bounds(tmp_path, name, value, extra):
    if not ENGINE.exists():
        pytest.skip("txn-server not built")
    d = deploy.build_deployment(**{name: value, **extra})
    p = deploy.write_yaml(d, tmp_path / "deploy.yml")
    r = subprocess.run([str(ENGINE), "--config", str(p), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok: ")


@pytest.mark.slow
def test_the_engine_check_refuses_a_bad_file(tmp_path):
    if not ENGINE.exists():
        pytest.skip("txn-server not built")
    d = deploy.build_deployment()
    d["client"]["n_concurrent"] = 0
    p = deploy.write_yaml(d, tmp_path / "deploy.yml")
    r = subprocess.run([str(ENGINE), "--config", str(p), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "client.n_concurrent" in r.stderr and r.stdout == ""


def test_help_names_unit_and_range():
    assert knobs.help_of("duration") == "client run time, s, in [1, 3600]"
    assert knobs.help_of("payment_crt_rate").endswith("%%, in [-1, 100]")


def test_the_ranges_exp_config_py_states_are_the_knobs():
    """exp_config.py is the user's file and says a setting's range beside it (`lo..hi`): the same as knobs.py."""
    import re
    seen = 0
    for line in (REPO / "exp_config.py").read_text().splitlines():
        m = re.match(r"([A-Z][A-Z0-9_]*)\s*=.*#.*?(-?[\d.]+)\.\.(-?[\d.]+)", line)
        if m:
            k = knobs.knob(m.group(1))
            assert (float(m.group(2)), float(m.group(3))) == (k.lo, k.hi), line
            seen += 1
    assert seen >= 8
