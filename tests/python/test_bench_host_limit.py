"""What this host charges per wake-up (txn-wakecost) and the host limit `make bench` prints from it beside the
floor: the probe really waits, refuses bad arguments in one line, and the limit is the floor's wake-ups at the
cost of what ends them (a timer where the engine keeps the delays, else a frame) plus the floor's own work
(docs/efficiency.md)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from test_bench_saturate import load_bench

PROBE = Path(os.environ.get("TXN_BUILD_DIR", REPO / "build")) / "txn-wakecost"
built = pytest.mark.skipif(not PROBE.is_file(), reason="build/txn-wakecost not built (run `make build`)")


@built
def test_the_probe_sleeps_once_per_timer_wait_and_wakes_for_frames():
    p = subprocess.run([str(PROBE), "--waits", "40", "--gap-us", "300"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["waits"] == 40 and r["gap_us"] == 300
    # each timer wait ended at its timeout, asleep (a voluntary switch each); frames may share a wake-up, never
    # need more than one each
    assert r["timer_wakes"] >= 40
    assert 1 <= r["frame_wakes"] <= 40 + 5
    assert r["timer_wake_us"] > 0 and r["frame_wake_us"] > 0


@built
@pytest.mark.parametrize("args, says", [(["--waits", "0"], "--waits 0"), (["--gap-us", "x"], "--gap-us x"),
                                        (["--waits"], "--waits"), (["--bogus"], "--bogus")])
def test_the_probe_refuses_bad_arguments_in_one_line(args, says):
    p = subprocess.run([str(PROBE)] + args, capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and says in p.stderr


def test_the_limit_is_the_floors_wakeups_at_the_hosts_cost_plus_the_floors_work():
    bench = load_bench()
    wake = {"timer_wake_us": 40.0, "frame_wake_us": 10.0}
    # delays kept by the engine: every wake-up the floor counts ends at a timer; 6 x 40 us + 50 us of the floor's own
    # work (20,000 per CPU s)
    assert bench.host_limit(6.0, 20_000, wake, "app") == pytest.approx(1e6 / 290)
    # delays kept by the kernel (or none): at a frame
    assert bench.host_limit(6.0, 20_000, wake, "netem") == pytest.approx(1e6 / 110)
    assert bench.host_limit(6.0, 20_000, wake, "none") == pytest.approx(1e6 / 110)
    # without any of the three there is no limit to print
    assert bench.host_limit(None, 20_000, wake, "app") is None
    assert bench.host_limit(6.0, None, wake, "app") is None
    assert bench.host_limit(6.0, 20_000, {}, "app") is None


def test_bench_prints_the_host_and_each_protocols_limit(monkeypatch, capsys):
    bench = load_bench()
    row = dict(mode="dast", irt_p50=10.4, irt_p99=11.9, irt_floor=10.0, crt_p50=213.0, crt_p99=221.0,
               crt_floor=200.0, retries=0.0, given_up=0, per_cpu_s=1500.0, cpu_s=4.0, wakeups_per_txn=8.1,
               floor_per_cpu_s=20_000.0, floor_wakeups=6.0, host_busy=8.0, verdict="CONSISTENT", counters={},
               intra=5.0, inter=100.0, mechanism="app", shape="3 regions x 2 shards")
    monkeypatch.setattr(bench, "run_one", lambda mode, a: dict(row, mode=mode))
    monkeypatch.setattr(bench, "host_wake_cost",
                        lambda build_dir: {"timer_wake_us": 40.0, "frame_wake_us": 30.0, "waits": 2000})
    monkeypatch.setattr(bench.protocols, "load", lambda: type("R", (), {"names": lambda self: ["dast"]})())
    monkeypatch.setattr("sys.argv", ["bench.py", "--protocols", "dast"])
    assert bench.main() == 0
    out = capsys.readouterr().out
    assert "40.0 us of CPU at a timer, 30.0 us at another process's frame" in out
    # 6 wake-ups at a timer's 40 us + the floor's 50 us
    assert "dast host limit: about 3,448 committed txn per CPU s" in out and "each at a timer" in out
    assert "the engine reached 1,500" in out


SERVER = PROBE.parent / "txn-server"


@pytest.mark.skipif(not SERVER.is_file(), reason="build/txn-server not built (run `make build`)")
def test_bench_of_another_build_writes_the_options_that_build_knows(tmp_path, monkeypatch):
    """`--build-dir` of another commit's build: its runs' deployments carry the protocol options of its txn-server,
    not of this tree's build (an option added since made the other build refuse every run)."""
    bench = load_bench()
    doc = json.loads(subprocess.run([str(SERVER), "--list-modes", "--json"], capture_output=True, text=True,
                                    timeout=30).stdout)
    janus = next(p for p in doc["protocols"] if p["name"] == "janus")
    gone = janus["options"].pop()["name"]   # an option the other build does not have
    (tmp_path / "registry.json").write_text(json.dumps(doc))
    fake = tmp_path / "txn-server"
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'registry.json'}\n")
    fake.chmod(0o755)
    monkeypatch.delenv(bench.protocols.BINARY_ENV, raising=False)   # restored (unset) after the test
    seen = {}

    def run_one(mode, a):
        d = bench.build_deployment(mode=mode, duration=5, warmup=1, cooldown=1)
        seen[mode] = dict(d["protocols"][mode])
        return dict(mode=mode, failed="not run")
    monkeypatch.setattr(bench, "run_one", run_one)
    monkeypatch.setattr(bench, "host_wake_cost", lambda build_dir: {})
    monkeypatch.setattr("sys.argv", ["bench.py", "--protocols", "janus", "--build-dir", str(tmp_path)])
    bench.main()
    assert seen["janus"] and gone not in seen["janus"], (gone, seen)
