"""Protocol variants (testbed/core/variants.py): a SYSTEMS item '<protocol>+<variant>' runs beside the plain protocol in
one sweep, as a system of its own (its point keys, meta.json, its figure line, its baseline in results/claims.md),
running its protocol with the variant's knobs. 'tapir+backoff': TAPIR retrying its aborts after its authors'
randomized exponential backoff, beside 'tapir' retrying them at once."""
import json

import pandas as pd
import pytest

from test_figures import make_run, rec
from test_runner import EXP1, FakeBackend, cfg, sweep
from testbed.analysis import claims, figures
from testbed.core.config import load_exp_config
from testbed.sweeps import runner


def plan(c, modes=("dast", "tapir")):
    logs = []
    return runner.plan(EXP1, c, FakeBackend(modes=modes), log=logs.append), logs


def test_a_variant_runs_its_protocol_with_its_knobs_under_its_own_name():
    s, logs = plan(cfg(SYSTEMS=["dast", "tapir", "tapir+backoff"], N_REPEAT=1,
                       PROTOCOL_OPTIONS={"tapir": {"prepare_timeout_ms": 700}}))
    by = {sy: [t for t in s.tasks if t.system == sy] for sy in ("tapir", "tapir+backoff")}
    assert len(by["tapir"]) == len(by["tapir+backoff"]) == 3 and logs == []
    for t in by["tapir+backoff"]:   # the protocol runs, with its options, and the variant's backoff (exp_config's cap)
        assert t.knobs["mode"] == "tapir" and t.knobs["protocol_options"] == {"prepare_timeout_ms": 700}
        assert (t.knobs["retry_backoff"], t.knobs["retry_backoff_max"]) == (100, 5000)
    assert all("retry_backoff" not in t.knobs for t in by["tapir"])   # the plain protocol retries at once
    assert {t.key for t in by["tapir"]}.isdisjoint({t.key for t in by["tapir+backoff"]})
    assert s.systems == ["dast", "tapir", "tapir+backoff"]
    s2, _ = plan(cfg(SYSTEMS=["tapir+backoff"], N_REPEAT=1, VARIANT_RETRY_BACKOFF_MS=25, RETRY_BACKOFF_MAX_MS=400))
    assert {(t.knobs["retry_backoff"], t.knobs["retry_backoff_max"]) for t in s2.tasks} == {(25, 400)}


def test_a_variants_runs_say_their_system_validate_and_are_reused_apart_from_the_protocols(tmp_path):
    c = cfg(SYSTEMS=["tapir", "tapir+backoff"], N_REPEAT=1, CONCURRENCY_LEVELS=[1])
    b = FakeBackend(modes=("tapir",))
    sweep(tmp_path, b, c)
    assert sorted(b.calls) == [("tapir", 1, 1)] * 2
    metas = [json.loads(p.read_text()) for p in (tmp_path / "n_clients").glob("*/meta.json")]
    assert sorted(m["system"] for m in metas) == ["tapir", "tapir+backoff"] and {m["status"] for m in metas} == {"ok"}
    b2 = FakeBackend(modes=("tapir",))
    s, _ = sweep(tmp_path, b2, c)     # both reused: their folders validate (deploy.yml ran tapir for tapir+backoff)
    assert b2.calls == [] and [o.reused for o in s.outcomes] == [True, True]


@pytest.mark.parametrize("systems, msg", [
    (["tapir+bakoff"], "SYSTEMS item 'tapir+bakoff': 'bakoff' is not a variant (did you mean backoff?); variants: "
                       "backoff (testbed/core/variants.py)"),
    (["tapri+backoff"], "SYSTEMS item 'tapri+backoff': not a protocol (did you mean tapir?); protocols: dast, janus, "
                        "tapir, slog"),
    (["tapir+backoff+x"], "SYSTEMS item 'tapir+backoff+x': must be a protocol name (`txn-server --list-modes`) or "
                          "<protocol>+<variant> (testbed/core/variants.py)"),
])
def test_an_unknown_variant_or_protocol_is_refused_in_one_line(systems, msg):
    with pytest.raises(ValueError) as e:
        load_exp_config({"SYSTEMS": systems})
    assert str(e.value) == msg


def test_a_refused_variant_stops_a_sweep_before_anything_runs(tmp_path, monkeypatch, capsys):
    b = FakeBackend(modes=("dast", "tapir"))
    monkeypatch.setattr(runner, "open_backend", lambda kind, c: b)
    cfgfile = tmp_path / "exp_config.py"
    cfgfile.write_text("SYSTEMS = ['dast', 'tapir+nobackoff']\n")
    rc, pdf = runner.run_experiment("exp1", config=cfgfile, out=tmp_path / "res")
    err = capsys.readouterr().err
    assert rc == 2 and pdf is None and b.calls == [] and not (tmp_path / "res").exists()
    assert err == ("experiments/exp1_n_clients.py: error: SYSTEMS item 'tapir+nobackoff': 'nobackoff' is not a "
                   "variant (did you mean backoff?); variants: backoff (testbed/core/variants.py)\n")


def test_the_variants_cap_is_checked_with_the_config():
    with pytest.raises(ValueError, match=r"^VARIANT_RETRY_BACKOFF_MS=100: must be <= RETRY_BACKOFF_MAX_MS=5, the "):
        load_exp_config({"SYSTEMS": ["tapir+backoff"], "RETRY_BACKOFF_MAX_MS": 5})
    assert load_exp_config({"SYSTEMS": ["tapir"], "RETRY_BACKOFF_MAX_MS": 5}).retry_backoff_max_ms == 5
    with pytest.raises(ValueError, match=r"^VARIANT_RETRY_BACKOFF_MS=0: must be a number in \(0, 60000\]$"):
        load_exp_config({"VARIANT_RETRY_BACKOFF_MS": 0})


def test_a_variant_that_changes_nothing_runs_and_says_so_once():
    s, logs = plan(cfg(SYSTEMS=["dast", "dast+backoff"], N_REPEAT=1))
    assert logs == ["dast+backoff: the backoff variant changes nothing for dast (only TAPIR aborts): its runs repeat "
                    "dast's"]
    assert {t.knobs["mode"] for t in s.tasks if t.system == "dast+backoff"} == {"dast"}
    # nor does it change TAPIR's when every protocol backs off so already
    _, logs = plan(cfg(SYSTEMS=["tapir", "tapir+backoff"], N_REPEAT=1, RETRY_BACKOFF_MS=100))
    assert logs == ["tapir+backoff: the backoff variant changes nothing: exp_config.py already gives every protocol "
                    "retry_backoff=100, retry_backoff_max=5000"]


def test_a_variant_of_a_protocol_not_built_is_skipped():
    s, logs = plan(cfg(SYSTEMS=["dast", "tapir+backoff"], N_REPEAT=1), modes=("dast",))
    assert {t.system for t in s.tasks} == {"dast"} and s.skipped == {"tapir+backoff": "not built"}
    assert logs[0].startswith("skipping tapir+backoff: tapir is not built (txn-server --list-modes lists: dast)")


def _two_tapirs(root, tapir_tail=100, backoff_tail=50):
    """DAST, TAPIR and TAPIR with a 10 ms backoff at one point: IRT p99 10 ms, tapir_tail, backoff_tail."""
    for system, key, ms, extra in (("dast", "d", 10, {}), ("tapir", "t", tapir_tail, {}),
                                   ("tapir+backoff", "b", backoff_tail,
                                    dict(retry_backoff=10, retry_backoff_max=5000))):
        rows = [rec(i, "IRT", 3 + i * 0.01, ms) for i in range(100)] + [rec(100, "CRT", 4, 200)]
        make_run(root, system=system, key=key, clients={"c0.0.0": rows}, deploy_extra=extra)
    runs = figures.load_runs(root / "n_clients", 99)
    return runs, figures.aggregate(runs)


def test_a_variants_line_has_its_protocols_colour_and_marker_its_own_style_and_label(tmp_path):
    tapir, mine = figures.style("tapir"), figures.style("tapir+backoff")
    assert (mine["color"], mine["marker"]) == (tapir["color"], tapir["marker"])
    assert mine["linestyle"] != tapir["linestyle"] and mine["label"] == "Tapir (backoff)"
    assert figures.line_name("tapir+backoff", "2 client proc/shard") == "Tapir (backoff) [2 client proc/shard]"
    runs, agg = _two_tapirs(tmp_path)
    assert figures.line_name("tapir+backoff", runs=runs) == "Tapir (backoff 10 ms)"
    assert list(agg.system) == ["dast", "tapir", "tapir+backoff"]          # beside its protocol
    assert list(agg.line) == ["DAST", "Tapir", "Tapir (backoff 10 ms)"]
    assert "Tapir (backoff 10 ms)" in figures.point_table(agg, 99)
    cap = figures.caption(runs, None, "TPC-C", 1, 99)
    assert ("aborted attempts retried at once (the artifact's): DAST, Tapir; aborted attempts retried after a "
            "randomized exponential backoff from 10 ms, at most 5000 ms: Tapir (backoff 10 ms)") in cap, cap
    fig = figures.draw("n_clients", root=tmp_path, tail=99)   # drawn: its dotted line, its legend entry
    assert fig.png.is_file() and "tapir+backoff" in set(pd.read_csv(fig.csv).system)


def test_the_claims_hold_dast_against_every_baseline_the_variant_too(tmp_path):
    runs, agg = _two_tapirs(tmp_path)
    cmp = {c["baseline"]: (c["line"], round(c["irt"], 1)) for c in claims.comparisons(agg)}
    assert cmp == {"tapir": ("Tapir", 90.0), "tapir+backoff": ("Tapir (backoff 10 ms)", 80.0)}
    summary = {"classes": {"all": {"mean_attempts": 1.25}}}
    assert claims.why("tapir+backoff", summary) == claims.why("tapir", summary) == 0.25
    md = claims.render({"n_clients": claims.points(tmp_path, "n_clients", 99)})
    assert "| 2 | Tapir (backoff 10 ms) | " in md and "| 0.00 retries / txn | ok |" in md
    assert "| Tapir (backoff 10 ms) | 80.0 / 0.0 |" in md
    assert "| exp 1 | Tapir | 90.0 | 0.0 |" in md and "| exp 1 | Tapir (backoff 10 ms) | 80.0 | 0.0 |" in md
    assert "| all | every baseline above | 80.0 to 90.0 | 0.0 |" in md
