"""Reading and writing run folders (results/<name>/<run-id>/): the one place that says what a run's outcome is.

The sweep runner (to decide what to reuse) and the figures (to decide what to draw) both ask run_outcome(), which
trusts nothing it has not checked: a folder whose files are missing, truncated or disagree with each other, or
whose summary, verdict or identity are not what its raw files give or are bound to (testbed/analysis/validate.py,
derived.py), is a failed run with that reason, whatever its meta.json says, so resume runs it again.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from testbed.analysis import validate
from testbed.core import files


def read_json(path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path, data) -> Path:
    """Write atomically (a reader sees the old or the new file, never half of one)."""
    return files.write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def verdict(check: dict, summary: dict) -> tuple[str, str]:
    """("ok", "") or ("failed", reason) of a finished run from its checker verdict and summary."""
    if check.get("exit_code") == 1:
        return "failed", f"inconsistent: {check.get('verdict')}"
    if check.get("exit_code") != 0:
        return "failed", f"checker could not read the run: {check.get('error', check.get('verdict'))}"
    if not summary.get("classes", {}).get("all", {}).get("committed"):
        return "failed", "no commits in the measurement window"
    return "ok", ""


def run_outcome(run_dir, meta: dict | None = None, check_files: bool = True) -> tuple[str, str]:
    """(status, reason) of a run folder: ok, failed or interrupted. check_files: also validate its files."""
    run_dir = Path(run_dir)
    meta = read_json(run_dir / "meta.json") if meta is None else meta
    if not meta:
        return "failed", "no meta.json (the run was cut off)"
    status = meta.get("status")
    if isinstance(meta.get("outcome"), dict):  # folders written before the lifecycle recorded its own verdict
        status, reason = meta["outcome"].get("status", "failed"), meta["outcome"].get("reason", "")
        if status != "ok":
            return ("interrupted" if str(reason).startswith("interrupted") else "failed"), reason
    elif status == "running":
        return "failed", "cut off: its job ended without recording an outcome (killed, or still running)"
    elif status != "ok":
        reason = meta.get("reason") or str(meta.get("error") or f"status {status}").splitlines()[0]
        return ("interrupted" if status == "interrupted" else "failed"), reason
    if check_files:  # a damaged folder says so first: its summary or verdict cannot be trusted
        problems = validate.validate_run(run_dir)
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            return "failed", f"invalid run folder: {problems[0]}{more}"
    return verdict(read_json(run_dir / "check.json") or {}, read_json(run_dir / "summary.json") or {})


def run_start(meta: dict, run_dir: Path) -> tuple:
    """Sort key: when the run started (the runner's sub-second stamp, else meta's start_time; ties: run id)."""
    t = meta.get("runner_start_unix")
    if not isinstance(t, (int, float)):
        try:
            t = datetime.fromisoformat(str(meta.get("start_time"))).timestamp()
        except ValueError:
            t = 0.0
    return (float(t), run_dir.name)


def scan_runs(exp_dir) -> list[tuple[Path, dict]]:
    """(run_dir, meta) of every sweep run under results/<name>/, oldest first."""
    out = []
    for m in sorted(Path(exp_dir).glob("*/meta.json")):
        meta = read_json(m)
        if meta and "point_key" in meta and "system" in meta and "x" in meta:
            out.append((m.parent, meta))
    out.sort(key=lambda rm: run_start(rm[1], rm[0]))
    return out
