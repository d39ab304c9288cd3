"""End-to-end: the real build/txn-server and build/txn-client on loopback (marked slow, run by default)."""
import os
import subprocess
from pathlib import Path

import pytest

from testbed import deploy
from testbed.local import LocalBackend

from conftest import REPO, procs_mentioning

BUILD = Path(os.environ.get("TXN_BUILD_DIR", REPO / "build"))  # TXN_BUILD_DIR: test another build
SERVER, CLIENT = BUILD / "txn-server", BUILD / "txn-client"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (os.access(SERVER, os.X_OK) and os.access(CLIENT, os.X_OK)),
    reason="build/txn-server or build/txn-client not built (run `make build`)")]


def test_dast_tpcc_3x2_low_load(tmp_path):
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=1, concurrency=2, duration=8, warmup=2,
                                cooldown=1, mode="dast", workload="tpcc", scale=0.01, base_port=26000)
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "e2e", out_root=tmp_path)
    irt, crt = res.summary["classes"]["IRT"], res.summary["classes"]["CRT"]
    assert irt["committed"] > 0 and crt["committed"] > 0, res.summary
    assert res.check["verdict"] == "CONSISTENT", res.check
    assert irt["p50_ms"] < 100, f"IRT median {irt['p50_ms']} ms is not below one cross-region RTT"
    assert procs_mentioning(str(res.run_dir)) == []


def test_unknown_mode_is_rejected_by_server(tmp_path):
    d = deploy.build_deployment(regions=1, shards=1, base_port=26500)
    d["mode"] = "bogus"
    cfg = deploy.write_yaml(d, tmp_path / "deploy.yml")
    p = subprocess.run([str(SERVER), "--config", str(cfg), "--name", "s0.0.0", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=30)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and "bogus" in lines[0] and lines[0].startswith("txn-server: error:"), p.stderr
