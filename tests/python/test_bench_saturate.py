"""scripts/bench.py --saturate: the load doubles per protocol until the host passes the limit, a point fails or
a verdict is not CONSISTENT; bad arguments are one line before anything runs (no engine here: run_one is faked)."""
import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import pytest

from testbed.core.paths import REPO


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_script", REPO / "scripts" / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_point(mode, c, busy, verdict="CONSISTENT"):
    return dict(mode=mode, clients_per_region=2 * c, per_s=100.0 * c, per_cpu_s=1000.0, wakeups_per_txn=10.0,
                host_busy=busy, irt_p99=11.0, crt_p99=215.0, retries=0.0, given_up=0, verdict=verdict)


def run_saturate(monkeypatch, capsys, points, busy_limit=70.0, max_concurrency=256):
    bench = load_bench()
    asked = []

    def run_one(mode, a, concurrency=None, floor=True):
        asked.append((mode, concurrency))
        return points(mode, concurrency)

    monkeypatch.setattr(bench, "run_one", run_one)
    a = SimpleNamespace(busy_limit=busy_limit, max_concurrency=max_concurrency, duration=20)
    rc = bench.saturate(["dast", "janus"], a)
    return rc, asked, capsys.readouterr().out


def test_doubles_until_the_host_passes_the_limit(monkeypatch, capsys):
    busy = {1: 5, 2: 10, 4: 20, 8: 40, 16: 69.9, 32: 75, 64: 90}
    rc, asked, out = run_saturate(monkeypatch, capsys, lambda m, c: fake_point(m, c, busy[c] if m == "dast" else 80))
    assert rc == 0
    assert asked == [("dast", c) for c in (1, 2, 4, 8, 16, 32)] + [("janus", 1)]
    assert "passed 70 % busy" in out
    assert len([l for l in out.splitlines() if l.startswith("dast")]) == 6


def test_a_failed_point_ends_that_protocol_and_the_exit_code_says_so(monkeypatch, capsys):
    def points(m, c):
        if m == "dast" and c == 4:
            return dict(mode=m, failed="engine crashed")
        return fake_point(m, c, 10, verdict="INCONSISTENT" if m == "janus" and c == 2 else "CONSISTENT")
    rc, asked, out = run_saturate(monkeypatch, capsys, points)
    assert rc == 1
    assert asked == [("dast", 1), ("dast", 2), ("dast", 4), ("janus", 1), ("janus", 2)]
    assert "FAILED: engine crashed" in out and "INCONSISTENT" in out


def test_max_concurrency_bounds_the_sweep(monkeypatch, capsys):
    rc, asked, _ = run_saturate(monkeypatch, capsys, lambda m, c: fake_point(m, c, 1), max_concurrency=5)
    assert rc == 0
    assert [c for m, c in asked if m == "dast"] == [1, 2, 4]


@pytest.mark.parametrize("args,line", [
    (["--busy-limit", "0"], "bench: --busy-limit 0: expected a share of the host in (0, 100]"),
    (["--busy-limit", "120"], "bench: --busy-limit 120: expected a share of the host in (0, 100]"),
    (["--max-concurrency", "0"], "bench: --max-concurrency 0: expected 1-256"),
])
def test_bad_arguments_are_one_line(args, line):
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "bench.py"), "--saturate", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [line]


def test_protocol_options_are_typed_as_run_local_types_them(monkeypatch, capsys):
    # --option's value is read as a YAML scalar, so a number option takes a number (the schema refused '100')
    bench = load_bench()
    seen = {}

    def saturate(modes, a):
        seen.update(a.options)
        return 0

    monkeypatch.setattr(bench, "saturate", saturate)
    monkeypatch.setattr(sys, "argv", ["bench.py", "--saturate", "--protocols", "dast", "--option",
                                      "dast.sync_interval_ms=100", "--option", "dast.defer_commutative=false"])
    assert bench.main() == 0
    assert seen == {"dast": {"sync_interval_ms": 100, "defer_commutative": False}}
