"""Run-folder validation: what a run wrote is still all there, whole and self-consistent.

write_manifest(run_dir) when the run's files are complete writes files.json: the size and sha256 of every
raw file (deploy.yml, config.json, clients/*, servers/*, logs/*, anything else but the DERIVED files), the
record count each client reported (n_records of clients/<client>.summary.json, written by txn-client beside its
records CSV), the processes deploy.yml expects, and the bindings of the derived files (testbed/analysis/derived.py):
check.json stamped with the run id and the raw files' digest, the sha256 of summary.json and check.json, and
meta.json's fields as the run ended.

validate_run(run_dir) -> problems, one short line each ([] when the folder is fine):
  - meta.json, summary.json, check.json missing or not valid JSON (e.g. truncated);
  - files.json missing or unreadable: a folder written before manifests existed, or cut off before the end of its
    run, is reported as such ("no manifest") and its raw files cannot be checked; the checks below still run;
  - a raw file missing, added, or changed (size, then sha256) since files.json was written;
  - a client of deploy.yml without its records CSV, a CSV whose header or a line does not parse, whose last line
    is cut, or whose row count differs from the client's n_records (a cut at a line boundary);
  - summary.json's "records" differing from the rows of the CSVs;
  - a replica of deploy.yml without a valid servers/<replica>.state.json;
  - a files.json from before the bindings (an older testbed: "re-run it"); a check.json not bound to this run and
    its raw files, changed since, or whose exit_code does not go with its verdict; a meta.json field changed since
    the run ended, or disagreeing with what ran (derived.py);
  - when nothing above is wrong: every field of summary.json that differs from what the records give now.
A self-test (probe) run has no records: its client checks are skipped. Files are read in a streaming way: a
60 s run of a few MB validates in tens of milliseconds (deriving the summary again, with pandas, is most of it).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from testbed.analysis import derived
from testbed.analysis.results import COLUMNS
from testbed.core import deploy as deploylib

MANIFEST = derived.MANIFEST
MANIFEST_VERSION = 2        # 2: with the bindings of summary.json, check.json and meta.json
# top level; written beside the raw files. timeseries.csv (exp 6's per-second series, timeseries.py) is derived
# from the records each time its figure is drawn, and records.parquet / records.csv (the run's transactions as one
# table, runs_table.py --records) when a user asks for them; none is ever read back in their place
DERIVED = ("meta.json", "summary.json", "check.json", MANIFEST, "timeseries.csv", "records.parquet", "records.csv")
_TMP = f".{MANIFEST}.tmp"
_CHUNK = 1 << 20


_sha256 = derived.sha256


def raw_files(run_dir) -> list[str]:
    """Every raw file of the run (posix paths relative to run_dir), sorted."""
    run_dir = Path(run_dir)
    out = []
    for root, dirs, files in os.walk(run_dir):
        dirs.sort()
        rel_root = Path(root).relative_to(run_dir)
        for f in files:
            if rel_root == Path(".") and f in DERIVED + (_TMP,):
                continue
            out.append((rel_root / f).as_posix())
    return sorted(out)


def _read_json(path: Path):
    """The parsed JSON, or a problem string: 'missing' / 'not valid JSON (truncated?)'."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, f"unreadable ({e.strerror or e})"
    try:
        return json.loads(text), None
    except ValueError:
        return None, "not valid JSON (truncated?)"


def _deployment(run_dir) -> tuple[dict, dict]:
    """(deploy.yml, its nodes' kinds by name); ValueError naming what is wrong."""
    try:
        d = deploylib.load_yaml(Path(run_dir) / "deploy.yml")
        return d, {n["name"]: n["kind"] for n in d["nodes"]}
    except FileNotFoundError:
        raise ValueError("deploy.yml: missing") from None
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        raise ValueError("deploy.yml: not a readable deployment file (truncated?)") from None


def _processes(kinds: dict) -> dict:
    return {k + "s": sorted(n for n, kind in kinds.items() if kind == k) for k in ("replica", "manager", "client")}


def expected_processes(run_dir) -> dict:
    """{'replicas': [...], 'managers': [...], 'clients': [...]} from deploy.yml's nodes, less the nodes whose process
    died mid-run and was not started again (faults.jsonl: they left no state dump or records); ValueError if
    unreadable."""
    return _without_crashed(run_dir, _processes(_deployment(run_dir)[1]))


def _without_crashed(run_dir, procs: dict) -> dict:
    """procs less the nodes faults.jsonl records down at the end (a malformed faults.jsonl excuses none)."""
    from testbed.analysis.durability import crashed_replicas
    from testbed.analysis.histories import Unreadable
    try:
        crashed = crashed_replicas(run_dir)
    except Unreadable:
        return procs
    return {k: [n for n in v if n not in crashed] for k, v in procs.items()}


def _n_records(run_dir: Path, client: str):
    data, _ = _read_json(run_dir / "clients" / f"{client}.summary.json")
    n = data.get("n_records") if isinstance(data, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _hashed(run_dir: Path, rels) -> dict:
    """{rel: {size, sha256}} of files of the run folder."""
    return {rel: {"size": (run_dir / rel).stat().st_size, "sha256": _sha256(run_dir / rel)} for rel in rels}


def _store(run_dir: Path, manifest: dict) -> None:
    """Write files.json atomically."""
    tmp = run_dir / _TMP
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, run_dir / MANIFEST)


def write_manifest(run_dir) -> dict:
    """Write run_dir/files.json (see the module doc) and return it. Call it once the raw files, summary.json,
    check.json and meta.json (but for its status) are final."""
    run_dir = Path(run_dir)
    files = _hashed(run_dir, raw_files(run_dir))
    try:
        processes = expected_processes(run_dir)
    except ValueError:
        processes = None
    clients = (processes or {}).get("clients", [])
    derived.stamp_check(run_dir, derived.raw_digest(files))
    meta, _ = _read_json(run_dir / "meta.json")
    manifest = {"version": MANIFEST_VERSION, "run_id": run_dir.name, "files": files, "processes": processes,
                "n_records": {c: _n_records(run_dir, c) for c in clients},
                "derived": _hashed(run_dir, [n for n in ("summary.json", "check.json") if (run_dir / n).is_file()]),
                "meta": derived.meta_record(meta if isinstance(meta, dict) else {})}
    _store(run_dir, manifest)
    return manifest


def rebind_check(run_dir) -> str | None:
    """Bind a check.json written again (the checker run by hand) as write_manifest binds the run's own, when
    files.json still lists the raw files as they are (binding a verdict of changed files would bless them).
    None when bound, else why not."""
    run_dir = Path(run_dir)
    manifest, why = _read_json(run_dir / MANIFEST)
    if why or not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return f"{MANIFEST}: {why or 'not a manifest'}"
    files = _hashed(run_dir, raw_files(run_dir))
    if files != manifest["files"]:
        return f"the raw files changed since {MANIFEST} was written"
    derived.stamp_check(run_dir, derived.raw_digest(files))
    manifest.setdefault("derived", {}).update(_hashed(run_dir, ["check.json"]))
    _store(run_dir, manifest)
    return None


def _csv_problems(path: Path, rel: str) -> tuple[int | None, list[str]]:
    """(data rows, problems) of a records CSV, streamed: header (the required columns first, further ones such as
    the outputs digest after them), fields per line as in the header, last line whole. rows is None when the
    header is wrong or the file empty."""
    required = ",".join(COLUMNS).encode()
    probs = []
    with open(path, "rb") as f:
        first = f.readline()
        if not first:
            return None, [f"{rel}: empty"]
        header = first.rstrip(b"\r\n")
        if header != required and not header.startswith(required + b","):
            return None, [f"{rel}: header does not start with {required.decode()}"]
        commas = header.count(b",")
        rows, carry = 0, b""
        while chunk := f.read(_CHUNK):
            data = carry + chunk
            end = data.rfind(b"\n")
            if end < 0:
                carry = data
                continue
            body, carry = data[:end], data[end + 1:]
            n = body.count(b"\n") + 1
            if not probs and body.count(b",") != commas * n:  # rare: find the line
                for k, line in enumerate(body.split(b"\n")):
                    if line.count(b",") != commas:
                        probs.append(f"{rel}: line {rows + k + 2} has {line.count(b',') + 1} fields, not {commas + 1}")
                        break
            rows += n
    if carry:
        probs.append(f"{rel}: last line cut (no newline at the end)")
    return rows, probs


def validate_run(run_dir) -> list[str]:
    """Problems of a run folder, one short line each; [] when it is whole and consistent (see the module doc)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return [f"{run_dir}: not a directory"]
    probs, top = [], {}
    for name in ("meta.json", "summary.json", "check.json"):
        data, why = _read_json(run_dir / name)
        if why:
            probs.append(f"{name}: {why}")
        top[name] = data if isinstance(data, dict) else None
    meta, summary = top["meta.json"] or {}, top["summary.json"]

    manifest, why = _read_json(run_dir / MANIFEST)
    if why == "missing":
        probs.append(f"{MANIFEST}: missing (no manifest: a folder from before manifests, or a run cut off); "
                     "raw files unchecked")
    elif why or not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        probs.append(f"{MANIFEST}: {why or 'not a manifest'}; raw files unchecked")
    has_manifest = not why and isinstance(manifest, dict) and isinstance(manifest.get("files"), dict)

    reported = set()   # raw files whose absence a process check below already names
    try:
        (deploy, kinds), why = _deployment(run_dir), None
    except ValueError as e:
        deploy, kinds, why = None, {}, str(e)
    procs = (manifest.get("processes") if has_manifest else None) or \
        (_without_crashed(run_dir, _processes(kinds)) if deploy else {})
    if not procs and why:
        probs.append(why)
    for r in procs.get("replicas", []):
        rel = f"servers/{r}.state.json"
        _, why = _read_json(run_dir / rel)
        if why == "missing":
            probs.append(f"replica {r}: no state dump ({rel} missing)")
            reported.add(rel)
        elif why:
            probs.append(f"{rel}: {why}")

    if not meta.get("probe"):
        rows = {}  # every records CSV, as results.read_records() reads them: client -> data rows (None: unparsable)
        for path in sorted((run_dir / "clients").glob("*.records.csv")):
            client, rel = path.name.removesuffix(".records.csv"), f"clients/{path.name}"
            rows[client], csv_probs = _csv_problems(path, rel)
            probs += csv_probs
            if client not in procs.get("clients", [client]):
                probs.append(f"{rel}: {client} is not a client of deploy.yml")
        for c in procs.get("clients", []):
            rel = f"clients/{c}.records.csv"
            if c not in rows:
                probs.append(f"client {c}: no records ({rel} missing)")
                reported.add(rel)
                continue
            want = (manifest.get("n_records") or {}).get(c) if has_manifest else _n_records(run_dir, c)
            if want is None:
                probs.append(f"client {c}: no n_records to check its records against "
                             f"(clients/{c}.summary.json missing or without it)")
            elif rows[c] is not None and rows[c] != want:
                probs.append(f"client {c}: {rows[c]} records in {rel}, its summary says n_records {want} "
                             f"({'records lost' if rows[c] < want else 'rows added'})")
        total = sum(n for n in rows.values() if n is not None)
        if summary is not None and None not in rows.values() and summary.get("records") != total:
            probs.append(f"summary.json: records {summary.get('records')}, the client CSVs hold {total}")

    if has_manifest:
        listed = manifest["files"]
        for rel in sorted(listed):
            want, path = listed[rel], run_dir / rel
            if not path.is_file():
                if rel not in reported:
                    probs.append(f"{rel}: missing ({MANIFEST} lists it)")
            elif path.stat().st_size != want.get("size"):
                probs.append(f"{rel}: {path.stat().st_size} bytes, {MANIFEST} says {want.get('size')} "
                             "(truncated or changed)")
            elif _sha256(path) != want.get("sha256"):
                probs.append(f"{rel}: changed since the run (sha256 differs from {MANIFEST})")
        for rel in raw_files(run_dir):
            if rel not in listed:
                probs.append(f"{rel}: not in {MANIFEST} (added after the run)")
        if not isinstance(manifest.get("version"), int) or manifest["version"] < 2:
            probs.append(f"{MANIFEST}: written by an older testbed, before summary.json, check.json and meta.json "
                         "were bound to the raw files; re-run it")
        elif manifest.get("run_id") != run_dir.name:
            probs.append(f"{MANIFEST}: written for run {manifest.get('run_id')}, not for this folder (copied?)")
    return probs + _derived_problems(run_dir, top, manifest if has_manifest else None, deploy, probs)


def _derived_problems(run_dir: Path, top: dict, manifest: dict | None, deploy: dict | None, found: list) -> list:
    """The derived files against the raw ones (testbed/analysis/derived.py); summary.json is derived again only
    when nothing else is wrong (a damaged folder is failed already, and its records would only add noise)."""
    meta, summary, check = top["meta.json"], top["summary.json"], top["check.json"]
    probs = derived.check_problems(run_dir, check, manifest) if check is not None else []
    if meta is not None:
        config = _read_json(run_dir / "config.json")[0] if "repeat" in meta else None
        probs += derived.meta_problems(run_dir, meta, manifest, deploy, config if isinstance(config, dict) else None)
    if summary is not None and deploy and not (meta or {}).get("probe") and not found + probs:
        probs += derived.summary_problems(run_dir, summary, deploy.get("client") or {})
    return probs
