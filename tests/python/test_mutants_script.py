"""scripts/mutants.py: the verdict of each kind of mutant, and the stress runs' nemesis as the deployment takes it."""
import importlib.util

import pytest

from testbed.core import deploy
from testbed.core.paths import REPO

spec = importlib.util.spec_from_file_location("mutants_script", REPO / "scripts" / "mutants.py")
mutants = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mutants)


@pytest.mark.parametrize("kind, sim, e2e, want", [
    ("-", "passed", "passed (5 runs)", "ok"),
    ("-", "passed", "CAUGHT: order (run 2)", "BROKEN BASELINE"),
    ("safety", "CAUGHT 3: X", "passed (5 runs)", "MISSED by the end-to-end checker"),
    ("safety", "passed", "CAUGHT: anomalies (run 1)", "ok"),
    ("durability", "CAUGHT 1: X", "passed (5 runs)", "MISSED by the end-to-end checker"),
    ("durability", "passed", "CAUGHT: durability (run 1)", "ok"),
    ("latency", "CAUGHT 1: X", "passed", "ok"),
    ("latency", "passed", "passed", "MISSED"),
    ("equivalent", "CAUGHT 1: X", "passed (5 runs)", "ok"),
    ("equivalent", "passed", "passed (5 runs)", "MISSED by its simulator test"),
])
def test_verdicts(kind, sim, e2e, want):
    assert mutants.verdict(kind, sim, e2e) == want


def test_an_equivalent_mutant_caught_end_to_end_fails_its_row():
    assert mutants.verdict("equivalent", "CAUGHT 1: X", "CAUGHT: order (run 4)").startswith("NOT EQUIVALENT")


def test_every_mutant_has_a_known_kind():
    assert {k for _, _, k in mutants.MUTANTS} <= {"-", "safety", "latency", "durability", "recovery", "equivalent"}


@pytest.mark.parametrize("duration", [10, 20, 60])
def test_stress_nemesis_is_a_valid_schedule_with_jitter_inside_every_region(duration):
    dep = mutants.e2e_deployment("janus", "stress", duration, 27000, attempt=0)
    kinds = [f["kind"] for f in dep["faults"]]
    assert kinds.count("pause") == 6 and kinds.count("partition") == 1 and kinds.count("jitter") == 3
    spikes = [f for f in dep["faults"] if f["kind"] == "spike"   # into one follower per region, from the others
              and all(a != b for a, b in f["links"])]
    assert sorted(f["to_nodes"][0][1] for f in spikes) == ["0", "1", "2"]
    assert all(f["to_nodes"][0][-1] != "0" and all(b == int(f["to_nodes"][0][1]) != a for a, b in f["links"])
               for f in spikes)
    assert all(f"jitter:r{r}+" in mutants.stress_faults(duration) for r in range(3))
    plain = mutants.e2e_deployment("janus", "plain", duration, 27000, attempt=1)
    assert not plain.get("faults")
    # a follower crashed between the first two pauses and restarted before the second, a quarter into the run, so
    # that a bug of the restarted replica has three quarters of the run's load to show (unannounced: the engine reads
    # no plan); every protocol goes on without it, then with it back
    for protocol in ("dast", "janus", "tapir", "slog"):
        for attempt in range(5):
            faults = mutants.e2e_deployment(protocol, "stress", duration, 27000, attempt)["faults"]
            crash = [f for f in faults if f["kind"] == "crash"]
            assert len(crash) == 2 and not any(c["node"].endswith(".0") for c in crash)
            assert [c["node"][1] for c in crash] == ["1", "2"]   # a follower of region 1, then one of region 2
            # over the first rejoin, the restarted follower's sibling hears its own region 800 ms late (the
            # rejoin's Seal among what comes late) and the other regions 150 ms late (its answers in the old epoch
            # reach their coordinators after replica 0's in the new one); no pause over the rejoin
            sibling = crash[0]["node"][:-1] + ("2" if crash[0]["node"].endswith("1") else "1")
            late = [f for f in faults if f["kind"] == "spike" and f.get("to_nodes") == [sibling]]
            assert sorted(map(str, (f["links"] for f in late))) == ["[[0, 1], [2, 1]]", "[[1, 1]]"], late
            inside = next(f for f in late if f["links"] == [[1, 1]])
            assert inside["extra_ms"] == 800 and inside["start_s"] < crash[0]["end_s"] < inside["end_s"] - 0.4
            pauses = sorted((f["start_s"], f["end_s"], f["node"]) for f in faults if f["kind"] == "pause")
            assert pauses[0][1] < crash[0]["start_s"] < crash[0]["end_s"] < pauses[1][0]
            assert pauses[1][2].startswith("s0.") and not any(
                p[0] < inside["end_s"] and p[1] > inside["start_s"] for p in pauses if p[2][:4] == sibling[:4])
            assert crash[0]["end_s"] <= 0.3 * duration
            assert pauses[3][1] < crash[1]["start_s"] < crash[1]["end_s"] <= 0.6 * duration
