"""Exp 6's per-second series and fault effect (testbed/analysis/timeseries.py) on records with known times."""
import math

import pandas as pd
import pytest

from testbed.analysis import timeseries


def records(rows):
    """rows: (class, start_s, latency_ms, status, attempts)."""
    return pd.DataFrame([{"txn_id": i, "type": 0, "type_name": "t", "class": c, "start_us": int(s * 1e6),
                          "latency_us": int(lat * 1000), "attempts": a, "status": st}
                         for i, (c, s, lat, st, a) in enumerate(rows)])


def test_buckets_count_completions_percentiles_by_start_in_flight_and_give_ups():
    df = records([("IRT", 0.1, 10, "committed", 1),      # ends 0.11 s
                  ("IRT", 0.5, 30, "committed", 2),      # ends 0.53 s, one retry
                  ("CRT", 0.9, 300, "committed", 1),     # ends 1.2 s: started in 0, done in 1
                  ("IRT", 1.5, 2_000, "given_up", 5),    # ends 3.5 s: in flight at the ends of 1 and 2
                  ("IRT", 2.2, 5, "committed", 1)])
    ts = timeseries.series(df, 4)
    assert list(ts.t_s) == [0, 1, 2, 3]
    assert list(ts.throughput_tps) == [2, 1, 1, 0]
    assert ts.irt_p50_ms[0] == 10 and ts.irt_p99_ms[0] == 30 and ts.crt_p99_ms[0] == 300
    assert math.isnan(ts.crt_p99_ms[1]) and math.isnan(ts.irt_p99_ms[1])   # the given-up one is no sample
    assert ts.irt_p99_ms[2] == 5
    assert list(ts.in_flight) == [1, 1, 1, 0]
    assert list(ts.given_up) == [0, 0, 0, 1] and list(ts.retried) == [1, 0, 0, 4]
    assert list(ts.stalled) == [False, False, False, True]   # the give-up still in flight, nothing committed
    with pytest.raises(ValueError):
        timeseries.series(df, 4, bucket_s=0)


def test_half_second_buckets_and_the_csv_round_trip(tmp_path):
    df = records([("IRT", 0.2, 10, "committed", 1), ("IRT", 0.7, 10, "committed", 1)])
    ts = timeseries.series(df, 1, bucket_s=0.5)
    assert list(ts.throughput_tps) == [2.0, 2.0]
    (tmp_path / "clients").mkdir()
    df.drop(columns=["txn_id"]).assign(txn_id=df.txn_id).to_csv(tmp_path / "clients" / "c0.0.0.records.csv",
                                                                 index=False)
    timeseries.write_series(tmp_path, 2)
    back = timeseries.read_series(tmp_path)
    assert list(back.columns) == timeseries.COLUMNS and list(back.throughput_tps) == [2.0, 0.0]
    assert timeseries.read_series(tmp_path / "nowhere") is None


def steady(t0, t1, rate, lat_ms, cls="IRT"):
    n = int((t1 - t0) * rate)
    return [(cls, t0 + i / rate, lat_ms, "committed", 1) for i in range(n)]


def test_a_fault_that_stalls_then_recovers_two_seconds_after_the_heal():
    # 100 txn/s at 10 ms; a fault in [10, 15): nothing completes, its issues wait until 15; slow until 17
    rows = steady(0, 10, 100, 10) + [("IRT", 10 + i / 100, (15 - (10 + i / 100)) * 1000, "committed", 1)
                                      for i in range(20)] + steady(15, 17, 30, 80) + steady(17, 30, 100, 10)
    eff = timeseries.fault_effect(records(rows), 10, 15, warmup_s=2, duration_s=30)
    assert eff["before"]["throughput_tps"] == pytest.approx(100) and eff["before"]["irt_p99_ms"] == 10
    assert eff["during"]["irt_p99_ms"] >= 4900 and eff["during"]["throughput_tps"] <= 1   # one finished at 10.0
    assert eff["recovery_s"] == 2.0
    # throughput alone: a 2 s window from 16.5 s holds 0.5 s at 30/s and 1.5 s at 100/s, 82.5/s, short of 90; from
    # 16.75 s 0.25 s at 30 and 1.75 s at 100, 91.25/s: back 1.75 s after the heal
    assert eff["tput_back_s"] == 1.75
    # it never recovers: stays slow to the end
    rows = steady(0, 10, 100, 10) + steady(10, 30, 30, 80)
    eff = timeseries.fault_effect(records(rows), 10, 15, warmup_s=2, duration_s=30)
    assert eff["recovery_s"] is None and eff["tput_back_s"] is None
    # a fault that changes nothing: recovered at once
    eff = timeseries.fault_effect(records(steady(0, 30, 100, 10)), 10, 15, warmup_s=2, duration_s=30)
    assert eff["recovery_s"] == 0.0 and eff["tput_back_s"] == 0.0
    with pytest.raises(ValueError, match="not inside"):
        timeseries.fault_effect(records(rows), 1, 5, warmup_s=2, duration_s=30)


def test_the_baseline_before_a_fault_leaves_out_what_the_fault_held():
    # 10 ms IRTs and CRTs of 200 ms, until a fault at 10 s holds the CRTs issued in its last 0.2 s until 15 s
    rows = steady(0, 10, 100, 10) + steady(0, 9.8, 5, 200, "CRT") + [("CRT", 9.9, 5100, "committed", 1)]
    rows += steady(15, 30, 100, 10)
    eff = timeseries.fault_effect(records(rows), 10, 15, warmup_s=2, duration_s=30)
    assert eff["before"]["crt_p99_ms"] == 200 and eff["during"]["throughput_tps"] <= 1
