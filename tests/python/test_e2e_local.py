"""End-to-end: the real build/txn-server and build/txn-client on loopback (marked slow, run by default)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from testbed.core import deploy, protocols
from testbed.runs.lifecycle import engine_usage_from_facts
from testbed.runs.local import LocalRunner as LocalBackend

from conftest import REPO, built_modes, procs_mentioning

BUILD = Path(os.environ.get("TXN_BUILD_DIR", REPO / "build"))  # TXN_BUILD_DIR: test another build
SERVER, CLIENT = BUILD / "txn-server", BUILD / "txn-client"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (os.access(SERVER, os.X_OK) and os.access(CLIENT, os.X_OK)),
    reason="build/txn-server or build/txn-client not built (run `make build`)")]


MODES = built_modes()


@pytest.mark.parametrize("mode", MODES)
def test_tpcc_3x2_low_load(tmp_path, mode):
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=1, concurrency=2, duration=8, warmup=2,
                                cooldown=1, mode=mode, workload="tpcc", scale=0.01,
                                base_port=26000 + 200 * MODES.index(mode))
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "e2e", out_root=tmp_path)
    irt, crt = res.summary["classes"]["IRT"], res.summary["classes"]["CRT"]
    assert irt["committed"] > 0 and crt["committed"] > 0, res.summary
    assert res.check["verdict"] == "CONSISTENT", res.check
    assert res.ok and res.reason == "", res.reason          # the lifecycle's verdict, files validated included
    assert irt["p50_ms"] < 100, f"IRT median {irt['p50_ms']} ms is not below one cross-region RTT"
    assert res.summary.get("counters"), "the protocol's counters did not reach the summary"
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


@pytest.mark.parametrize("mode", MODES)
def test_tpca_zipf_runs_consistent(tmp_path, mode):
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=1, concurrency=2, duration=6, warmup=1,
                                cooldown=1, mode=mode, workload="tpca", zipf=0.9, scale=0.01,
                                base_port=26100 + 200 * MODES.index(mode))
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "e2e-tpca", out_root=tmp_path)
    assert res.summary["classes"]["IRT"]["committed"] > 0 and res.summary["classes"]["CRT"]["committed"] > 0
    assert res.check["verdict"] == "CONSISTENT", res.check
    assert res.ok, res.reason


@pytest.mark.parametrize("mode", MODES)
def test_append_runs_consistent_with_every_dependency_kind(tmp_path, mode):
    """The anomaly workload on every protocol: the anomaly check ran (not skipped), inferred ww, wr and rw
    dependencies from real reads, and found nothing (Janus did not, before its execution rule waited for whole
    earlier components: docs/protocols/janus.md); a run that gives up transactions (TAPIR's crossed CRTs, which
    abort each other without backoff: docs/workloads.md) is still consistent."""
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=1, concurrency=2, duration=6, warmup=1,
                                cooldown=1, mode=mode, workload="append", append_keys=4, append_crt_ratio=0.3,
                                base_port=26150 + 200 * MODES.index(mode))
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "e2e-append", out_root=tmp_path)
    assert res.summary["classes"]["IRT"]["committed"] > 0 and res.summary["classes"]["CRT"]["committed"] > 0
    assert res.check["verdict"] == "CONSISTENT", res.check
    assert res.check["checks"]["anomalies"]["verdict"] == "pass", res.check["checks"]["anomalies"]
    assert res.check["anomaly_classes"] == {}
    assert all(n > 0 for n in res.check["stats"]["dependency_edges"].values()), res.check["stats"]
    assert res.ok, res.reason


def _run_server(cfg, name, tmp_path, binary=SERVER, timeout=30):
    p = subprocess.run([str(binary), "--config", str(cfg), "--name", name, "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, [x for x in p.stderr.splitlines() if x.strip()]


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d["nodes"][-1].update(shard=7), "shard"),            # client's shard outside its region
    (lambda d: d["link"].update(rtt_ms=[[5, 100]]), "rtt_ms"),       # not R x R
    (lambda d: d["workload"].update(name="tpcz"), "tpcz"),           # unknown workload
    (lambda d: d["workload"].update(zipf=1.5), "zipf"),
    (lambda d: d.update(colour="blue"), "colour"),                   # unknown key
    (lambda d: d.update(runtime={"transport": "quic"}), "runtime.transport"),
])
def test_bad_deployment_file_is_one_line_exit_2(tmp_path, mutate, needle):
    d = deploy.build_deployment(regions=2, shards=1, base_port=26600)
    mutate(d)
    cfg = deploy.write_yaml(d, tmp_path / "deploy.yml")
    code, lines = _run_server(cfg, "s0.0.0", tmp_path)
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines


def test_malformed_yaml_names_the_line(tmp_path):
    cfg = tmp_path / "deploy.yml"
    cfg.write_text("name: x\nmode: dast\nregions: [1,\n")
    code, lines = _run_server(cfg, "s0.0.0", tmp_path)
    assert code == 2 and len(lines) == 1 and "line" in lines[0], lines


@pytest.mark.parametrize("transport", ["tcp", "grpc"])
def test_an_unreachable_server_is_named_given_up_and_the_process_goes_on(tmp_path, transport):
    """Whatever stopped a server (the engine knows no fault plan), its peers give it up after the connect timeout,
    name it, count what they dropped for it, and go on to their own end (it used to be exit 3 unless a crash of that
    peer was planned)."""
    d = deploy.build_deployment(regions=1, shards=1, duration=3, warmup=0.5, cooldown=0.5,
                                base_port=26700 if transport == "tcp" else 26750,
                                processes="node")   # the client alone, with no server up
    d["runtime"] = {"connect_timeout_s": 1, "transport": transport}
    cfg = deploy.write_yaml(d, tmp_path / "deploy.yml")
    client = next(n["name"] for n in d["nodes"] if n["kind"] == "client")
    code, lines = _run_server(cfg, client, tmp_path, binary=CLIENT)  # no server is running
    assert code == 0, lines
    assert any("unreachable" in x and "s0.0.0" in x for x in lines), lines
    facts = json.loads((tmp_path / f"{client}.summary.json").read_text())["process"]
    assert facts["unreachable_peers"] == ["s0.0.0"] and facts["dropped_to"]["s0.0.0"] >= 1, facts
    assert facts["dropped_messages"] == sum(facts["dropped_to"].values()), facts


@pytest.mark.parametrize("transport", ["tcp", "grpc"])
def test_rtt_self_test_through_the_transport(tmp_path, transport):
    """txn-client --probe measures the configured matrix (app delays) through the real transport, either one."""
    from testbed.core import rtt as selftest
    m = [[5, 60, 100], [60, 5, 140], [100, 140, 5]]
    d = deploy.build_deployment(regions=3, shards=2, rtt_ms=m, transport=transport,
                                base_port=26800 if transport == "tcp" else 26900)
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "selftest", out_root=tmp_path, probe=10)
    assert selftest.compare(res.probe, m) == [], selftest.format_matrix(res.probe, m)
    assert res.probe["samples"] == [[10] * 3] * 3
    # asymmetric sanity: the 60 ms pair really is faster than the 140 ms pair (not a constant delay)
    assert res.probe["rtt_ms"][0][1] < 80 < 120 < res.probe["rtt_ms"][1][2]
    # the same measurement, told the wrong matrix, fails loudly
    assert any("region 1 -> 2" in p for p in selftest.compare(res.probe, [[5, 100, 100], [100, 5, 140],
                                                                          [100, 140, 5]]))
    assert procs_mentioning(str(res.run_dir)) == []


def test_one_process_per_node_still_runs_consistent(tmp_path):
    """processes=node (a process per node, for isolation) is the layout every run used before engine processes."""
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=1, concurrency=2, duration=6, warmup=1,
                                cooldown=1, workload="tpcc", scale=0.01, processes="node", base_port=27000)
    assert not any("process" in n for n in d["nodes"])
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "e2e-node", out_root=tmp_path)
    assert res.check["verdict"] == "CONSISTENT", res.check
    assert res.ok, res.reason
    assert len(list((res.run_dir / "logs").glob("*.log"))) == len(d["nodes"])


@pytest.mark.parametrize("layout", ["container", "split"])
def test_container_processes_keep_their_messages_in_memory(tmp_path, layout):
    """The default layout: a process runs all of a container's nodes (split: its servers, and its clients in
    another); the nodes of a process exchange most of their messages without the transport, and say so."""
    import json
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=2, concurrency=2, duration=6, warmup=1,
                                cooldown=1, workload="tpcc", scale=0.01, base_port=27100, processes=layout)
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "e2e-" + layout, out_root=tmp_path)
    assert res.ok, res.reason
    logs = sorted(p.stem for p in (res.run_dir / "logs").glob("*.log"))
    assert logs == sorted(name for name, _ in deploy.processes(d["nodes"])), logs
    first = "shard0.0" if layout == "container" else "srv0.0"
    assert len(logs) == (6 if layout == "container" else 12)   # 6 shard processes, or 6 server + 6 client ones
    facts = json.loads((res.run_dir / "servers" / "s0.0.1.state.json").read_text())["process"]
    assert facts["name"] == first and facts["nodes"] == (6 if layout == "container" else 4), facts
    assert facts["local_messages"] > 0 < facts["remote_messages"], facts
    client = json.loads((res.run_dir / "clients" / "c0.0.1.summary.json").read_text())
    assert client["process"]["name"] == (first if layout == "container" else "cli0.0") and not client["interrupted"]
    if layout == "container":
        log = (res.run_dir / "logs" / "shard0.0.log").read_text()
        assert log.index("GO shard0.0") < log.index("DONE shard0.0"), log
    # what the processes say of their CPU and wake-ups (what a swarm run records) agrees with their rusage, which
    # the local runner reads: a little less (each stops counting when it writes its last file), never more
    meta = json.loads((res.run_dir / "meta.json").read_text())
    said = engine_usage_from_facts(res.run_dir)
    assert 0.7 * meta["cpu_seconds"] <= said["cpu_seconds"] <= meta["cpu_seconds"] * 1.001 + 0.01, (said, meta)
    assert 0.7 * meta["engine_wakeups"] <= said["engine_wakeups"] <= meta["engine_wakeups"], (said, meta)


def test_a_node_of_a_bigger_process_is_not_started_alone(tmp_path):
    d = deploy.build_deployment(regions=1, shards=1, base_port=27300)
    cfg = deploy.write_yaml(d, tmp_path / "deploy.yml")
    code, lines = _run_server(cfg, "s0.0.1", tmp_path)
    assert code == 2 and len(lines) == 1, lines
    assert "runs in process 'shard0.0'" in lines[0] and "--process shard0.0" in lines[0], lines


@pytest.mark.parametrize("mode", MODES)
def test_grpc_transport_runs_every_protocol_consistent(tmp_path, mode):
    """runtime.transport: grpc (the transport before tcp) still carries every protocol's runs, checked."""
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=1, concurrency=2, duration=6, warmup=1,
                                cooldown=1, mode=mode, workload="tpcc", scale=0.01, transport="grpc",
                                base_port=28000 + 150 * MODES.index(mode))
    assert d["runtime"] == {"transport": "grpc"}
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "e2e-grpc", out_root=tmp_path)
    assert res.summary["classes"]["IRT"]["committed"] > 0 and res.summary["classes"]["CRT"]["committed"] > 0
    assert res.check["verdict"] == "CONSISTENT", res.check
    assert res.ok, res.reason


def test_a_run_of_another_build_is_checked_with_that_builds_replay(tmp_path):
    """`--build-dir` (make bench's before/after, another build's engine): the checker decodes the run's transaction
    logs and replays them with that build's txn-replay, which knows its log format and workload code."""
    other = tmp_path / "other-build"
    other.mkdir()
    for b in ("txn-server", "txn-client"):
        (other / b).symlink_to(BUILD / b)
    calls = tmp_path / "replay-calls"
    (other / "txn-replay").write_text(f'#!/bin/bash\necho "$1" >> "{calls}"\nexec "{BUILD / "txn-replay"}" "$@"\n')
    (other / "txn-replay").chmod(0o755)
    d = deploy.build_deployment(regions=3, shards=2, clients_per_shard=1, concurrency=1, duration=4, warmup=1,
                                cooldown=1, workload="tpcc", scale=0.01, base_port=27300)
    res = LocalBackend(build_dir=other, progress=False).run(d, "e2e-other-build", out_root=tmp_path)
    assert res.ok and res.check["verdict"] == "CONSISTENT", (res.reason, res.check)
    used = calls.read_text().split()
    assert used.count("--dump") == 6 and used.count("--config") == 1, used   # 6 clients' logs, then the replay


def test_a_stranger_writing_to_a_server_is_refused_and_noted_not_blamed(tmp_path):
    """Frames from outside the deployment (here: a well-formed, empty, unstamped frame and junk bytes, written to a
    server's port mid-run) are refused before they are read: the run stays CONSISTENT, the server's facts count them
    and the checker notes them (before 2026-11-29 junk was delivered and blamed on a client: INCONSISTENT)."""
    import socket
    import threading
    import time
    d = deploy.build_deployment(regions=2, shards=1, clients_per_shard=1, concurrency=2, duration=4, warmup=1,
                                cooldown=1, workload="append", base_port=27800)
    port = next(n["port"] for n in d["nodes"] if n["name"] == "s0.0.0")
    sent = []

    def stranger():
        for _ in range(100):   # until the server listens
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"\0\0\0\0" * 3 + b"\x00\x00\x00\x05hello")
                    sent.append(1)
                    time.sleep(0.2)
                    return
            except OSError:
                time.sleep(0.1)
    t = threading.Thread(target=stranger, daemon=True)
    t.start()
    res = LocalBackend(build_dir=BUILD, progress=False).run(d, "e2e-junk", out_root=tmp_path)
    t.join(timeout=5)
    assert sent, "the stranger never connected"
    assert res.check["verdict"] == "CONSISTENT", res.check["violations"][:3]
    notes = [n for n in res.check["notes"] if "from outside the deployment" in n]
    assert len(notes) == 1 and "refused 1 connection(s)" in notes[0] and "127.0.0.1:" in notes[0], res.check["notes"]
