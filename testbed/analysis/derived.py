"""A run folder's derived files held to its raw ones: what is drawn or reused is derived from the raw records again,
or bound to them by hashes (testbed/analysis/validate.py writes the bindings into files.json and calls the checks).

Figures draw summary.json's numbers, reuse trusts check.json's verdict, and both read meta.json's identity (system,
x, point key, repeat); none of them is a raw file, so a parseable but wrong one must not pass:
  - summary.json is derived again from the client records and the state dumps (results.summarize: tens of ms for
    tens of thousands of records) and every field compared, numbers to a relative 1e-9:
    `summary.json: classes.all.throughput_tps 999.0, the records give 373.5`;
  - check.json is stamped at the end of its run with the run id and the digest of the raw files (stamp_check), and
    files.json holds its sha256: a verdict copied from another run or edited does not match; its exit_code must
    also go with its verdict and violations;
  - files.json records meta.json as it was when the run ended (all but status, reason and error, which a later
    outcome may change): every recorded field must still be there, equal; and what the figures and reuse read
    must agree with what ran: run_id and experiment with the folder, system with deploy.yml's mode, repeat with
    deploy.yml's seed (config.json's SEED + repeat).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

from testbed.analysis import results
from testbed.core import variants

MANIFEST = "files.json"
META_MUTABLE = ("status", "reason", "error")   # meta.json fields a later outcome may rewrite
REL_TOL = 1e-9            # numbers of summary.json: the same code on the same records gives the same floats
MAX_LINES = 3             # field lines per file; the rest is counted
_MISSING = object()


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def raw_digest(files: dict) -> str:
    """One sha256 over files.json's "files" (every raw file's path, size and sha256)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def stamp_check(run_dir: Path, digest: str) -> None:
    """Bind check.json (when there is one) to its run: the run id and the digest of the raw files it was checked
    with. Called once the raw files are final (validate.write_manifest)."""
    path = run_dir / "check.json"
    try:
        check = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(check, dict):
        check.update(run_id=run_dir.name, raw_files_sha256=digest)
        tmp = path.with_name(".check.json.tmp")
        tmp.write_text(json.dumps(check, indent=2) + "\n")
        os.replace(tmp, path)


def meta_record(meta: dict) -> dict:
    """What files.json keeps of meta.json: every field but META_MUTABLE, as JSON gives it back."""
    return {k: v for k, v in json.loads(json.dumps(meta, default=str)).items() if k not in META_MUTABLE}


def _short(v) -> str:
    text = "missing" if v is _MISSING else json.dumps(v, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def differences(stored, derived, path: str = "") -> list[tuple[str, object, object]]:
    """(field path, stored value, derived value) of every field that differs; _MISSING for an absent field."""
    if isinstance(stored, dict) and isinstance(derived, dict):
        out = []
        for k in list(derived) + [k for k in stored if k not in derived]:
            out += differences(stored.get(k, _MISSING), derived.get(k, _MISSING), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(stored, list) and isinstance(derived, list) and len(stored) == len(derived):
        return [d for i, (a, b) in enumerate(zip(stored, derived)) for d in differences(a, b, f"{path}[{i}]")]
    if _number(stored) and _number(derived):
        same = math.isclose(stored, derived, rel_tol=REL_TOL, abs_tol=REL_TOL)
    else:
        same = stored is not _MISSING and derived is not _MISSING and stored == derived
    return [] if same else [(path, stored, derived)]


def _capped(name: str, lines: list[str], what: str) -> list[str]:
    more = len(lines) - MAX_LINES
    return lines[:MAX_LINES] + ([f"{name}: {more} more field(s) {what}"] if more > 0 else [])


def summary_problems(run_dir: Path, summary: dict, client: dict) -> list[str]:
    """summary.json against the summary the raw files give (client: deploy.yml's client section, the window)."""
    try:
        derived = results.summarize(run_dir, client["warmup_s"], client["duration_s"], client["cooldown_s"],
                                    write=False)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"summary.json: cannot be derived from the records again ({type(e).__name__}: {e})".splitlines()[0]]
    lines = [f"summary.json: {p} {_short(a)}, the records give " + ("none" if b is _MISSING else _short(b))
             for p, a, b in differences(summary, derived)]
    return _capped("summary.json", lines, "differ from the records")


def check_problems(run_dir: Path, check: dict, manifest: dict | None) -> list[str]:
    """check.json bound to this run and its raw files (stamp_check, files.json), and whole in itself."""
    probs = []
    if "run_id" not in check or "raw_files_sha256" not in check:
        probs.append("check.json: not bound to its run (no run id and raw-file digest: written by an older testbed, "
                     "or not at the end of a run); re-run it")
    elif check["run_id"] != run_dir.name:
        probs.append(f"check.json: the verdict of run {check['run_id']}, not of this one (copied from another run?)")
    elif manifest and check["raw_files_sha256"] != raw_digest(manifest["files"]):
        probs.append(f"check.json: recorded for other raw files than {MANIFEST} lists (copied from another run?)")
    hashed = (manifest or {}).get("derived")
    want = (hashed or {}).get("check.json")
    if isinstance(hashed, dict) and not isinstance(want, dict):
        probs.append(f"check.json: {MANIFEST} holds no sha256 of it (written after the run?)")
    elif want and sha256(run_dir / "check.json") != want.get("sha256"):
        probs.append(f"check.json: changed since the run (sha256 differs from {MANIFEST}; edited?)")
    code, verdict, violations = check.get("exit_code"), str(check.get("verdict")), check.get("violations")
    words = {0: "CONSISTENT", 1: "INCONSISTENT", 2: "UNREADABLE"}
    if words.get(code if _number(code) else None) != verdict.partition(" ")[0]:
        probs.append(f"check.json: exit_code {_short(code)} does not go with verdict {verdict!r}")
    elif code in (0, 1) and isinstance(violations, list) and (code == 1) != bool(violations):
        probs.append(f"check.json: exit_code {code} with {len(violations)} violation(s)")
    return probs


def meta_problems(run_dir: Path, meta: dict, manifest: dict | None, deploy: dict | None, config: dict | None
                  ) -> list[str]:
    """meta.json against files.json's record of it, and against what ran (the folder, deploy.yml, config.json)."""
    recorded = (manifest or {}).get("meta")
    recorded = recorded if isinstance(recorded, dict) else {}
    lines = [f"meta.json: {p} {_short(a)}, {MANIFEST} recorded " + ("no such field" if b is _MISSING else _short(b))
             + " when the run ended"
             for p, a, b in differences({k: meta.get(k, _MISSING) for k in recorded}, recorded)]
    probs = _capped("meta.json", lines, f"differ from {MANIFEST}'s record")
    if meta.get("run_id", run_dir.name) != run_dir.name:
        probs.append(f"meta.json: run_id {_short(meta['run_id'])}, but the folder is {run_dir.name}")
    if meta.get("experiment", run_dir.parent.name) != run_dir.parent.name:
        probs.append(f"meta.json: experiment {_short(meta['experiment'])}, but the folder is under "
                     f"{run_dir.parent.name}/")
    deploy = deploy or {}
    if "system" in meta and "mode" in deploy and variants.protocol_of(str(meta["system"])) != deploy["mode"]:
        probs.append(f"meta.json: system {_short(meta['system'])}, but deploy.yml ran {deploy['mode']}")
    seed = ((config or {}).get("exp_config") or {}).get("seed")
    if _number(meta.get("repeat")) and _number(seed) and "seed" in deploy and deploy["seed"] != seed + meta["repeat"]:
        probs.append(f"meta.json: repeat {meta['repeat']}, but deploy.yml ran seed {deploy['seed']} "
                     f"(repeat {deploy['seed'] - seed} of SEED {seed} in config.json)")
    return probs
