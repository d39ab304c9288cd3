"""testbed/analysis/validate.py on a run folder in the formats the engine and the launcher write (txn-client's records CSV
and summary with n_records, txn-server's state dumps, deploy.yml, meta/summary/check.json): every planted fault is
reported in one line naming it."""
import json
import shutil

import pytest

from testbed.analysis import checker, derived, results, rundirs, validate
from testbed.core import deploy

CLIENT_SUMMARY = ('{{"node": "{name}", "n_records": {n}, "interrupted": false, "window_start_s": 2.000, '
                  '"window_end_s": 9.000, "throughput_tps": {tps:.3f}, "aborted_attempts": 3, "irt": {{"committed": '
                  '{irt}}}, "crt": {{"committed": {crt}}}, "all": {{"committed": {n}}}}}\n')


def dump(name, gshard, replica):
    """A replica's state dump as txn-server writes it (TPC-C aggregates that the checker accepts)."""
    return {"node": name, "shard": gshard, "replica": replica, "workload": "tpcc", "digest": f"9f{gshard:014x}",
            "rows": {"warehouse": 1, "district": 10}, "executed_pieces": 1234,
            "tpcc": {"warehouses": [{"w_id": gshard, "w_ytd": 300.0, "districts": [
                {"d_id": i, "d_ytd": 30.0, "d_next_o_id": 31, "max_o_id": 30, "max_no_o_id": 30, "min_no_o_id": 22,
                 "no_count": 9, "sum_ol_cnt": 300, "ol_count": 300} for i in range(10)]}]}}


def make_run(root, n=400, probe=False, run_id="20261121-231500-ab12"):
    """results/n_clients/<run-id>/ as a finished local run leaves it, files.json included. -> run_dir."""
    dep = deploy.build_deployment(regions=2, shards=2, duration=10, warmup=2, cooldown=1, base_port=24000)
    run = root / "n_clients" / run_id
    for sub in ("logs", "servers", "clients"):
        (run / sub).mkdir(parents=True)
    deploy.write_yaml(dep, run / "deploy.yml")
    (run / "config.json").write_text(json.dumps({"experiment": "n_clients", "knobs": {"regions": 2}}, indent=2))
    for node in dep["nodes"]:
        name, kind = node["name"], node["kind"]
        (run / "logs" / f"{name}.log").write_text(f"READY {name} {node['host']}:{node['port']}\nstopping\n")
        if kind == "replica":
            gshard = node["region"] * dep["shards_per_region"] + node["shard"]
            (run / "servers" / f"{name}.state.json").write_text(json.dumps(dump(name, gshard, node["replica"])) + "\n")
        elif kind == "client":
            lines = ["txn_id,type,type_name,class,start_us,latency_us,attempts,status\n"]
            for i in range(n):
                crt = i % 7 == 0
                lines.append(f"{i},{1 if crt else 0},{'Payment' if crt else 'NewOrder'},{'CRT' if crt else 'IRT'},"
                             f"{i * 24000 + 113},{201337 if crt else 11042 + i % 13},{1 + (i % 50 == 0)},"
                             f"{'given_up' if i == 77 else 'committed'}\n")
            (run / "clients" / f"{name}.records.csv").write_text("".join(lines))
            n_crt = len(range(0, n, 7))
            (run / "clients" / f"{name}.summary.json").write_text(
                CLIENT_SUMMARY.format(name=name, n=n, tps=n / 10, irt=n - n_crt, crt=n_crt))
    meta = {"run_id": run.name, "name": "n_clients", "backend": "local", "probe": 3 if probe else None,
            "shaping": "app", "status": "ok", "start_time": "2026-11-21T23:15:00+0000"}
    (run / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    results.summarize_run(run)
    assert checker.check_run(run)["exit_code"] != 2   # readable (its verdict is the checker tests' business)
    validate.write_manifest(run)
    return run


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path)


def clients_of(run):
    return sorted(p.name.removesuffix(".records.csv") for p in (run / "clients").glob("*.records.csv"))


def cut(path, n_bytes):
    path.write_bytes(path.read_bytes()[:n_bytes])


def test_a_whole_run_is_valid_and_its_manifest_says_what_it_holds(run):
    assert validate.validate_run(run) == []
    m = json.loads((run / "files.json").read_text())
    files = m["files"]
    assert {"deploy.yml", "config.json", "logs/m0.log", "servers/s0.0.0.state.json", "clients/c1.1.0.records.csv",
            "clients/c1.1.0.summary.json"} <= set(files)
    assert not {"meta.json", "summary.json", "check.json", "files.json"} & set(files)
    assert len(files) == 2 + (2 + 12 + 4) + 12 + 4 * 2   # deploy+config, a log per process, dumps, CSV+summary
    csv = run / "clients" / "c0.0.0.records.csv"
    assert files["clients/c0.0.0.records.csv"]["size"] == csv.stat().st_size
    assert len(files["clients/c0.0.0.records.csv"]["sha256"]) == 64
    assert m["n_records"] == {c: 400 for c in clients_of(run)}
    assert m["processes"]["replicas"][:3] == ["s0.0.0", "s0.0.1", "s0.0.2"] and len(m["processes"]["replicas"]) == 12
    assert m["processes"]["clients"] == clients_of(run) and m["processes"]["managers"] == ["m0", "m1"]
    # the derived files bound to the raw ones: check.json to this run and its raw files, both hashed, meta recorded
    check = json.loads((run / "check.json").read_text())
    assert check["run_id"] == run.name and check["raw_files_sha256"] == derived.raw_digest(files)
    assert m["run_id"] == run.name and set(m["derived"]) == {"summary.json", "check.json"}
    assert m["derived"]["check.json"]["sha256"] == derived.sha256(run / "check.json")
    assert m["meta"] == {k: v for k, v in json.loads((run / "meta.json").read_text()).items() if k != "status"}


def test_truncated_summary(run):
    cut(run / "summary.json", 200)
    assert validate.validate_run(run) == ["summary.json: not valid JSON (truncated?)"]


@pytest.mark.parametrize("name", ["meta.json", "check.json"])
def test_missing_or_truncated_meta_and_check(run, name):
    cut(run / name, 10)
    assert validate.validate_run(run) == [f"{name}: not valid JSON (truncated?)"]
    (run / name).unlink()
    assert validate.validate_run(run) == [f"{name}: missing"]


def test_records_cut_mid_line(run):
    csv = run / "clients" / "c1.0.0.records.csv"
    size = csv.stat().st_size
    cut(csv, size - 20)   # inside the last line
    assert validate.validate_run(run) == [
        "clients/c1.0.0.records.csv: last line cut (no newline at the end)",
        "client c1.0.0: 399 records in clients/c1.0.0.records.csv, its summary says n_records 400 (records lost)",
        "summary.json: records 1600, the client CSVs hold 1599",
        f"clients/c1.0.0.records.csv: {size - 20} bytes, files.json says {size} (truncated or changed)"]


def test_records_cut_at_a_line_boundary_is_caught_by_n_records(tmp_path):
    run = make_run(tmp_path)
    csv = run / "clients" / "c0.1.0.records.csv"
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[:-50]))   # whole lines: the CSV itself parses
    probs = validate.validate_run(run)
    assert probs[0] == ("client c0.1.0: 350 records in clients/c0.1.0.records.csv, its summary says n_records 400 "
                        "(records lost)")
    assert "summary.json: records 1600, the client CSVs hold 1550" in probs and len(probs) == 3
    # even without the manifest (the client's own summary gives n_records), and whatever summary.json says
    (run / "files.json").unlink()
    results.summarize_run(run)   # a re-summarized folder: the totals agree, the lost records still show
    assert validate.validate_run(run) == [
        "files.json: missing (no manifest: a folder from before manifests, or a run cut off); raw files unchecked",
        "client c0.1.0: 350 records in clients/c0.1.0.records.csv, its summary says n_records 400 (records lost)"]


def test_removed_state_dump(run):
    (run / "servers" / "s1.0.2.state.json").unlink()
    assert validate.validate_run(run) == ["replica s1.0.2: no state dump (servers/s1.0.2.state.json missing)"]


def test_modified_state_dump_same_size_and_other_size(run):
    p = run / "servers" / "s0.1.1.state.json"
    text = p.read_text()
    p.write_text(text.replace('"executed_pieces": 1234', '"executed_pieces": 1235'))
    assert validate.validate_run(run) == ["servers/s0.1.1.state.json: changed since the run (sha256 differs from "
                                          "files.json)"]
    p.write_text(text.replace('"w_ytd": 300.0', '"w_ytd": 3000.0'))
    size = len(text)
    assert validate.validate_run(run) == [f"servers/s0.1.1.state.json: {size + 1} bytes, files.json says {size} "
                                          "(truncated or changed)"]
    cut(p, 100)
    assert validate.validate_run(run)[0] == "servers/s0.1.1.state.json: not valid JSON (truncated?)"


def test_missing_manifest_is_a_problem_of_its_own(run):
    """A folder written before manifests existed: reported as 'no manifest', nothing else when the rest is whole
    (the lead's resume/drawing decides what a manifest-less folder is worth: this says it, explicitly)."""
    (run / "files.json").unlink()
    assert validate.validate_run(run) == ["files.json: missing (no manifest: a folder from before manifests, or a "
                                          "run cut off); raw files unchecked"]
    (run / "files.json").write_text('{"version": 1, "files": {"deploy.yml": {"si')
    assert validate.validate_run(run) == ["files.json: not valid JSON (truncated?); raw files unchecked"]


def test_without_manifest_the_csvs_are_still_parsed(run):
    (run / "files.json").unlink()
    csv = run / "clients" / "c0.0.0.records.csv"
    lines = csv.read_text().splitlines(keepends=True)
    lines[123] = "122,0,NewOrder,IRT,2928113\n"
    csv.write_text("".join(lines))
    assert "clients/c0.0.0.records.csv: line 124 has 5 fields, not 8" in validate.validate_run(run)
    csv.write_text("id,kind\n1,2\n")
    assert ("clients/c0.0.0.records.csv: header does not start with txn_id,type,type_name,class,start_us,latency_us,"
            "attempts,status") in validate.validate_run(run)
    # further columns (the engine's outputs digest) are fine, and then every line has as many fields
    csv.write_text(",".join(["txn_id", "type", "type_name", "class", "start_us", "latency_us", "attempts", "status",
                             "outputs"]) + "\n" + "".join(x if i == 122 else x.rstrip("\n") + ",9f3a\n"
                                                          for i, x in enumerate(lines[1:])))
    assert "clients/c0.0.0.records.csv: line 124 has 5 fields, not 9" in validate.validate_run(run)


def test_client_without_records_and_a_stray_csv(run):
    (run / "clients" / "c1.1.0.records.csv").rename(run / "clients" / "c7.7.7.records.csv")
    assert validate.validate_run(run) == [
        "clients/c7.7.7.records.csv: c7.7.7 is not a client of deploy.yml",
        "client c1.1.0: no records (clients/c1.1.0.records.csv missing)",
        "clients/c7.7.7.records.csv: not in files.json (added after the run)"]


def test_missing_log_and_added_file(run):
    (run / "logs" / "c0.0.0.log").unlink()
    (run / "logs" / "extra.log").write_text("x\n")
    assert validate.validate_run(run) == ["logs/c0.0.0.log: missing (files.json lists it)",
                                          "logs/extra.log: not in files.json (added after the run)"]


def test_missing_deploy_yml(run):
    (run / "files.json").unlink()
    (run / "deploy.yml").unlink()
    probs = validate.validate_run(run)
    assert "deploy.yml: missing" in probs


def test_probe_run_has_no_records_to_check(tmp_path):
    run = make_run(tmp_path, probe=True)
    shutil.rmtree(run / "clients")
    validate.write_manifest(run)
    assert validate.validate_run(run) == []


def test_not_a_directory(tmp_path):
    assert validate.validate_run(tmp_path / "nope") == [f"{tmp_path / 'nope'}: not a directory"]


@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_csv_streaming_across_chunk_boundaries(run, monkeypatch, chunk):
    monkeypatch.setattr(validate, "_CHUNK", chunk)
    assert validate.validate_run(run) == []
    (run / "files.json").unlink()
    csv = run / "clients" / "c1.1.0.records.csv"
    lines = csv.read_text().splitlines(keepends=True)
    lines[200] = lines[200].replace(",IRT,", ",IRT,,")
    csv.write_text("".join(lines) + "400,0,NewOrder,IRT,96")
    assert validate.validate_run(run) == [   # 400 whole rows still: n_records and summary.json agree
        "files.json: missing (no manifest: a folder from before manifests, or a run cut off); raw files unchecked",
        "clients/c1.1.0.records.csv: line 201 has 9 fields, not 8",   # line 1 is the header
        "clients/c1.1.0.records.csv: last line cut (no newline at the end)"]


# ---------------------------------------------------------------- the derived files: re-derived, or bound by hashes

def edit_json(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def test_a_summary_the_records_do_not_give_is_named_field_by_field(run):
    """The issue's repro: a parseable summary.json whose throughput was set to 999.0 is not this run's summary."""
    true = json.loads((run / "summary.json").read_text())
    edit_json(run / "summary.json", lambda s: s["classes"]["all"].update(throughput_tps=999.0))
    tput = true["classes"]["all"]["throughput_tps"]
    line = f"summary.json: classes.all.throughput_tps 999.0, the records give {tput}"
    assert validate.validate_run(run) == [line]
    assert rundirs.run_outcome(run) == ("failed", f"invalid run folder: {line}")
    # any field, at any depth: counters (from the state dumps), a percentile gone, a field added, a type's count
    edit_json(run / "summary.json", lambda s: (s["counters"].update(irts=5), s["classes"]["CRT"].pop("p99_ms"),
                                               s.update(note="x"), s["by_type"].update(NewOrder=1)))
    assert validate.validate_run(run) == [   # in the summary's order, at most 3 lines
        f"summary.json: classes.CRT.p99_ms missing, the records give {true['classes']['CRT']['p99_ms']}", line,
        f"summary.json: by_type.NewOrder 1, the records give {true['by_type']['NewOrder']}",
        "summary.json: 2 more field(s) differ from the records"]   # counters.irts, note
    # the same numbers written another way (a float for an int, the last digits of a float) are the same
    true["classes"]["all"]["throughput_tps"] *= 1 + 1e-12
    true["records"] = float(true["records"])
    (run / "summary.json").write_text(json.dumps(true))
    assert validate.validate_run(run) == []


def test_a_check_json_of_another_run_fails(tmp_path):
    run = make_run(tmp_path / "a", run_id="20261121-231500-aaaa")
    other = make_run(tmp_path / "b", n=300, run_id="20261121-231500-bbbb")
    shutil.copy(other / "check.json", run / "check.json")
    probs = validate.validate_run(run)
    assert probs[0] == "check.json: the verdict of run 20261121-231500-bbbb, not of this one (copied from another run?)"
    assert probs[1:] == ["check.json: changed since the run (sha256 differs from files.json; edited?)"]
    # its run id made this run's: it was recorded for other raw files
    edit_json(run / "check.json", lambda c: c.update(run_id=run.name))
    assert validate.validate_run(run) == [
        "check.json: recorded for other raw files than files.json lists (copied from another run?)",
        "check.json: changed since the run (sha256 differs from files.json; edited?)"]
    assert rundirs.run_outcome(run)[0] == "failed"


@pytest.mark.parametrize("edit,more", [
    (lambda c: c.update(exit_code=0),
     ["check.json: exit_code 0 does not go with verdict 'INCONSISTENT (1 violations)'"]),
    (lambda c: c.update(verdict="CONSISTENT"), ["check.json: exit_code 1 does not go with verdict 'CONSISTENT'"]),
    (lambda c: c.update(violations=[]), ["check.json: exit_code 1 with 0 violation(s)"]),
    (lambda c: c.update(verdict="CONSISTENT", exit_code=0, violations=[]), []),   # whole in itself: the hash tells
], ids=["exit-code-1-to-0", "verdict", "violations", "all-three"])
def test_an_edited_check_json_fails(run, edit, more):
    # the fixture's verdict: INCONSISTENT (a transaction given up before the retry limit)
    assert rundirs.run_outcome(run)[1].startswith("inconsistent: INCONSISTENT (1 violations)")
    edit_json(run / "check.json", edit)
    assert validate.validate_run(run) == ["check.json: changed since the run (sha256 differs from files.json; "
                                          "edited?)"] + more
    assert rundirs.run_outcome(run)[1].startswith("invalid run folder: check.json: changed since the run")


def test_a_folder_written_before_the_bindings_is_re_run(run):
    """files.json version 1 and a check.json without run id and digest: an older testbed wrote them."""
    edit_json(run / "check.json", lambda c: [c.pop(k) for k in ("run_id", "raw_files_sha256")])
    edit_json(run / "files.json", lambda m: [m.pop(k) for k in ("run_id", "derived", "meta")] and m.update(version=1))
    assert validate.validate_run(run) == [
        "files.json: written by an older testbed, before summary.json, check.json and meta.json were bound to the raw "
        "files; re-run it",
        "check.json: not bound to its run (no run id and raw-file digest: written by an older testbed, or not at the "
        "end of a run); re-run it"]


def test_an_edited_meta_json_fails(run):
    edit_json(run / "meta.json", lambda m: m.update(backend="swarm", status="failed"))   # the status may change
    assert validate.validate_run(run) == ['meta.json: backend "swarm", files.json recorded "local" when the run ended']
    edit_json(run / "meta.json", lambda m: (m.update(backend="local"), m.pop("shaping")))
    assert validate.validate_run(run) == ['meta.json: shaping missing, files.json recorded "app" when the run ended']


def test_a_run_folder_moved_or_renamed_fails(tmp_path):
    run = make_run(tmp_path)
    edit_json(run / "meta.json", lambda m: m.update(experiment="n_clients"))
    validate.write_manifest(run)
    moved = run.parents[1] / "crt_ratio" / "20261121-231501-cd34"
    moved.parent.mkdir()
    run.rename(moved)
    probs = validate.validate_run(moved)
    assert probs[0] == "files.json: written for run 20261121-231500-ab12, not for this folder (copied?)"
    assert "check.json: the verdict of run 20261121-231500-ab12, not of this one (copied from another run?)" in probs
    assert "meta.json: run_id \"20261121-231500-ab12\", but the folder is 20261121-231501-cd34" in probs
    assert "meta.json: experiment \"n_clients\", but the folder is under crt_ratio/" in probs


def test_files_json_edited_to_match_changed_files_or_dropping_a_binding_fails(run):
    """files.json is itself bound: check.json carries the digest of its raw-file list, and must be hashed in it."""
    log = run / "logs" / "m0.log"
    log.write_text("READY m0 forged\n")
    edit_json(run / "files.json", lambda m: m["files"]["logs/m0.log"].update(size=log.stat().st_size,
                                                                             sha256=derived.sha256(log)))
    assert validate.validate_run(run) == [
        "check.json: recorded for other raw files than files.json lists (copied from another run?)"]
    validate.write_manifest(run)     # sealed again: consistent
    edit_json(run / "check.json", lambda c: c.update(exit_code=0, verdict="CONSISTENT", violations=[]))
    edit_json(run / "files.json", lambda m: m["derived"].pop("check.json"))
    assert validate.validate_run(run) == ["check.json: files.json holds no sha256 of it (written after the run?)"]


def test_a_check_run_again_by_hand_is_bound_when_the_raw_files_are_the_runs(run, capsys):
    assert checker.main([str(run)]) in (0, 1)    # `python -m testbed.analysis.checker RUN` writes check.json
    assert validate.validate_run(run) == [] and "not bound" not in capsys.readouterr().err
    (run / "logs" / "m0.log").write_text("changed\n")
    checker.main([str(run)])
    assert ("checker: note: check.json is not bound to the run (the raw files changed since files.json was written): "
            "sweeps run it again, figures skip it") in capsys.readouterr().err
    assert ("check.json: not bound to its run (no run id and raw-file digest: written by an older testbed, or not at "
            "the end of a run); re-run it") in validate.validate_run(run)
