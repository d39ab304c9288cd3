"""A run's engine CPU and wake-ups from its processes' own facts (what a swarm run records: testbed/runs/lifecycle.py)."""
import json

from testbed.runs.lifecycle import engine_usage_from_facts
from testbed.runs.local import LocalRunner

from test_local_fake import small


def facts(run, kind, node, process, cpu, switches):
    f = run / kind / f"{node}.{'state' if kind == 'servers' else 'summary'}.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"node": node, "process": {"name": process, "cpu_s": cpu, "voluntary_switches": switches}}))


def test_each_process_counts_once_by_its_last_word(tmp_path):
    # shard0.0 wrote its client's summary first, then its replicas' dumps: the dumps hold its whole run
    facts(tmp_path, "clients", "c0.0.0", "shard0.0", 1.0, 100)
    facts(tmp_path, "servers", "s0.0.0", "shard0.0", 1.5, 150)
    facts(tmp_path, "servers", "s0.0.1", "shard0.0", 1.5, 150)
    facts(tmp_path, "servers", "s1.0.0", "shard1.0", 0.25, 40)
    assert engine_usage_from_facts(tmp_path) == {"cpu_seconds": 1.75, "engine_wakeups": 190}


def test_a_process_that_said_nothing_leaves_it_unknown(tmp_path):
    facts(tmp_path, "servers", "s0.0.0", "shard0.0", 1.5, 150)
    (tmp_path / "servers" / "s1.0.0.state.json").write_text(json.dumps({"node": "s1.0.0", "process": {"name": "x"}}))
    assert engine_usage_from_facts(tmp_path) == {}   # not a sum that leaves a process out
    (tmp_path / "servers" / "s1.0.0.state.json").write_text("{not json")
    assert engine_usage_from_facts(tmp_path) == {}
    assert engine_usage_from_facts(tmp_path / "absent") == {}


def test_a_backend_that_cannot_read_rusage_records_what_the_processes_said(fake_bin, tmp_path):
    class Remote(LocalRunner):   # as the swarm's: its processes are not this process's children
        measures_cpu = False

    res = Remote(build_dir=fake_bin, ready_timeout_s=20, grace_s=5, margin_s=20, progress=False).run(
        small(), "t", out_root=tmp_path)
    assert res.ok, res.reason
    meta = json.loads((res.run_dir / "meta.json").read_text())
    # the fake processes say nothing of their CPU: unknown, not zero
    assert meta["cpu_seconds"] is None and meta["engine_wakeups"] is None and "engine_usage_from" not in meta
