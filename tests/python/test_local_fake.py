"""LocalBackend against the Python fake binaries (tests/python/fake_txn.py): lifecycle, errors, cleanup."""
import json

import pytest

from testbed import deploy
from testbed.local import _LIVE, LocalRunner as LocalBackend
from testbed.runtypes import RunError

from conftest import procs_mentioning


def small():
    return deploy.build_deployment(regions=2, shards=1, duration=2, warmup=0.5, cooldown=0.5, base_port=24000)


def backend(fake_bin):
    return LocalBackend(build_dir=fake_bin, ready_timeout_s=20, grace_s=5, margin_s=20, progress=False)


def test_successful_run(fake_bin, tmp_path):
    res = backend(fake_bin).run(small(), "t", out_root=tmp_path / "results")
    run = res.run_dir
    assert run.parent == tmp_path / "results" / "t" and len(run.name.split("-")) == 3
    assert res.consistent and res.check["dumps"] == 6
    assert res.summary["classes"]["IRT"]["p50_ms"] == 20.0 and res.summary["classes"]["CRT"]["p50_ms"] == 150.0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "ok" and meta["shaping"] == "app" and meta["kernel"] and meta["hostname"]
    assert set(meta["processes"]) == {n["name"] for n in small()["nodes"]}
    for f in ("deploy.yml", "config.json", "summary.json", "check.json", "logs/s0.0.0.log", "logs/c1.0.0.log"):
        assert (run / f).is_file(), f
    assert "READY s0.0.0" in (run / "logs/s0.0.0.log").read_text()
    assert procs_mentioning(str(run)) == [] and not _LIVE  # the servers' children were killed too


@pytest.mark.parametrize("fail,needle", [("early:s1.0.2", "s1.0.2 exited with code 1"),
                                         ("die:m0", "died mid-run: m0")])
def test_failing_server_is_named_and_everything_stops(fake_bin, tmp_path, monkeypatch, fail, needle):
    monkeypatch.setenv("FAKE_FAIL", fail)
    with pytest.raises(RunError) as e:
        backend(fake_bin).run(small(), "t", out_root=tmp_path)
    assert needle in str(e.value)
    if fail.startswith("early"):
        assert "fake failure of s1.0.2" in str(e.value)  # tail of its log
    run = e.value.run_dir
    assert json.loads((run / "meta.json").read_text())["status"] == "failed"
    assert procs_mentioning(str(run)) == [] and not _LIVE


def test_missing_binary(tmp_path):
    with pytest.raises(RunError, match="missing or not executable"):
        LocalBackend(build_dir=tmp_path, progress=False).run(small(), "t", out_root=tmp_path)
