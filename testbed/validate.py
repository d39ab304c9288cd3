"""Run-folder validation (placeholder until the full module lands): manifest of raw files, and its check."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

DERIVED = ("meta.json", "summary.json", "check.json", "files.json")


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(run_dir) -> None:
    run_dir = Path(run_dir)
    files = {str(p.relative_to(run_dir)): {"bytes": p.stat().st_size, "sha256": _sha(p)}
             for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name not in DERIVED
             and not p.name.startswith(".")}
    (run_dir / "files.json").write_text(json.dumps({"files": files}, indent=1) + "\n")


def validate_run(run_dir) -> list[str]:
    run_dir = Path(run_dir)
    try:
        files = json.loads((run_dir / "files.json").read_text())["files"]
    except (OSError, ValueError, KeyError):
        return ["files.json missing or unreadable"]
    out = []
    for rel, want in files.items():
        p = run_dir / rel
        if not p.is_file():
            out.append(f"{rel} missing")
        elif p.stat().st_size != want["bytes"] or _sha(p) != want["sha256"]:
            out.append(f"{rel} changed since the run")
    return out
