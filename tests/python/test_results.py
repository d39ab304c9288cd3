import json

import pytest

from testbed.core import deploy
from testbed.analysis import results
from testbed.analysis.results import nearest_rank

HEADER = "txn_id,type,type_name,class,start_us,latency_us,attempts,status\n"


@pytest.mark.parametrize("values,p,want", [
    ([15, 20, 35, 40, 50], 5, 15), ([15, 20, 35, 40, 50], 30, 20), ([15, 20, 35, 40, 50], 40, 20),
    ([15, 20, 35, 40, 50], 50, 35), ([15, 20, 35, 40, 50], 100, 50),
    ([3, 6, 7, 8, 8, 10, 13, 15, 16, 20], 25, 7), ([3, 6, 7, 8, 8, 10, 13, 15, 16, 20], 75, 15),
    (list(range(1, 101)), 99, 99), (list(range(1, 101)), 99.9, 100), (list(range(1, 101)), 95, 95),
    (list(range(1000, 0, -1)), 99.9, 999), (list(range(1, 1001)), 50, 500), ([7], 99.9, 7),
])
def test_nearest_rank_known_vectors(values, p, want):
    assert nearest_rank(values, p) == want


def test_nearest_rank_empty_and_range():
    assert nearest_rank([], 50) is None
    with pytest.raises(ValueError):
        nearest_rank([1], 0)


def write_run(tmp_path, files, duration=10, warmup=2, cooldown=1):
    d = deploy.build_deployment(regions=1, shards=1, duration=duration, warmup=warmup, cooldown=cooldown)
    deploy.write_yaml(d, tmp_path / "deploy.yml")
    (tmp_path / "clients").mkdir()
    for name, rows in files.items():
        (tmp_path / "clients" / f"{name}.records.csv").write_text(
            HEADER + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return tmp_path


def test_window_trims_warmup_and_cooldown(tmp_path):
    # window [2 s, 9 s): starts at 1.9 s and 9.0 s are outside for latency
    rows = [(1, 0, "NewOrder", "IRT", 1_900_000, 500_000, 1, "committed"),   # ends 2.4 s: counts for tput only
            (2, 0, "NewOrder", "IRT", 2_000_000, 10_000, 1, "committed"),    # in
            (3, 0, "NewOrder", "IRT", 8_990_000, 20_000, 1, "committed"),    # starts in, ends 9.01 s: latency only
            (4, 0, "NewOrder", "IRT", 9_000_000, 30_000, 1, "committed")]    # out
    s = results.summarize_run(write_run(tmp_path, {"c0.0.0": rows}))
    irt = s["classes"]["IRT"]
    assert s["window_s"] == [2, 9] and s["window_len_s"] == 7
    assert irt["latency_samples"] == 2 and irt["p50_ms"] == 10.0 and irt["p99_ms"] == 20.0
    assert irt["committed"] == 2 and irt["throughput_tps"] == pytest.approx(2 / 7)


def test_summary_on_synthetic_run(tmp_path):
    c0 = [(i, 0, "NewOrder", "IRT", 3_000_000 + i * 1000, (i + 1) * 1000, 1, "committed") for i in range(100)]
    c1 = [(100, 1, "Payment", "CRT", 4_000_000, 200_000, 3, "committed"),
          (101, 1, "Payment", "CRT", 4_100_000, 300_000, 1, "committed"),
          (102, 1, "Payment", "CRT", 4_200_000, 900_000, 20, "given_up"),
          (103, 0, "NewOrder", "IRT", 500_000, 1_000, 1, "committed")]  # warm-up: not in latency stats
    run = write_run(tmp_path, {"c0.0.0": c0, "c0.0.1": c1})
    s = results.summarize_run(run)
    assert json.loads((run / "summary.json").read_text()) == s
    irt, crt, al = (s["classes"][c] for c in ("IRT", "CRT", "all"))
    assert s["clients"] == 2 and s["records"] == 104
    assert irt["latency_samples"] == 100 and irt["p50_ms"] == 50.0 and irt["p99_ms"] == 99.0
    assert irt["p99.9_ms"] == 100.0 and irt["p90_ms"] == 90.0
    assert crt["latency_samples"] == 2 and crt["p50_ms"] == 200.0 and crt["p99_ms"] == 300.0
    assert crt["given_up"] == 1 and crt["aborts"] == 2 + 19 and crt["mean_attempts"] == pytest.approx(8.0)
    assert crt["abort_rate"] == pytest.approx(21 / 24, abs=1e-6)
    assert al["committed"] == 102 and s["throughput_tps"] == pytest.approx(102 / 7)
    assert s["by_type"] == {"NewOrder": 101, "Payment": 2}
    table = results.format_table(s)
    assert "IRT" in table and "CRT" in table and "p99.9ms" in table and "50.0" in table


def test_summary_of_empty_run(tmp_path):
    s = results.summarize_run(write_run(tmp_path, {}))
    assert s["records"] == 0 and s["classes"]["all"]["p50_ms"] is None and s["throughput_tps"] == 0
    assert "-" in results.format_table(s)


def test_cpu_shares_busy_and_steal():
    from testbed.runs.lifecycle import cpu_shares, cpu_times
    # user nice system idle iowait irq softirq steal; 100 ticks of wall clock on 2 CPUs
    before = {"ticks": [100, 0, 50, 800, 10, 0, 0, 40], "cpus": 2, "wall": 1000.0}
    after = {"ticks": [130, 0, 60, 860, 10, 0, 0, 140], "cpus": 2, "wall": 1100.0}
    assert cpu_shares(before, after) == {"busy_pct": 20.0, "steal_pct": 50.0}
    assert cpu_shares(None, after) == {} and cpu_shares(after, after) == {}
    # busy that the ticks did not see (a process waking in step with them): the wall clock's share not idle
    blind = {"ticks": [100, 0, 50, 950, 10, 0, 0, 40], "cpus": 2, "wall": 1100.0}
    assert cpu_shares(before, blind) == {"busy_pct": 25.0, "steal_pct": 0.0}
    t = cpu_times()
    assert t is None or (len(t["ticks"]) == 8 and t["cpus"] >= 1 and t["wall"] > 0)


def test_server_counters_are_summed_over_the_dumps_into_the_summary(tmp_path):
    run = write_run(tmp_path, {})
    (run / "servers").mkdir()
    for name, counters in (("s0.0.0", {"irts": 10, "irts_behind_undecided_crt": 2, "largest_scc_max": 3}),
                           ("s0.0.1", {"irts": 5, "counter_proposals": 1, "largest_scc_max": 2}), ("m0", None)):
        dump = {"node": name, "kind": "manager" if counters is None else "replica"}
        if counters is not None:
            dump["counters"] = counters
        (run / "servers" / f"{name}.state.json").write_text(json.dumps(dump))
    # a `_max` counter is a maximum over the servers, the others are sums
    want = {"irts": 15, "irts_behind_undecided_crt": 2, "counter_proposals": 1, "largest_scc_max": 3}
    assert results.server_counters(run) == want
    s = results.summarize_run(run)
    assert s["counters"] == want and "irts_behind_undecided_crt 2" in results.format_table(s)
    (run / "servers" / "m0.state.json").write_text("{broken")
    with pytest.raises(ValueError, match="m0.state.json"):
        results.server_counters(run)
