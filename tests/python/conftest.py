import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def procs_mentioning(text: str) -> list[str]:
    """Command lines of live processes whose argv mentions text (e.g. a run folder)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and text.encode() in raw:
            out.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return out


@pytest.fixture
def fake_bin(tmp_path):
    """A build dir whose txn-server/txn-client are the Python fake (tests/python/fake_txn.py)."""
    d = tmp_path / "bin"
    d.mkdir()
    fake = Path(__file__).with_name("fake_txn.py")
    for role in ("server", "client"):
        p = d / f"txn-{role}"
        p.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{fake}" {role} "$@"\n')
        p.chmod(0o755)
    return d


FAKE_REGISTRY = {
    "format": 1,
    "protocols": [
        {"name": "alpha", "summary": "a protocol with a manager per region", "min_regions": 1,
         "roles": [{"name": "manager", "prefix": "m", "placement": "per_region", "size": 1, "help": "per region"}],
         "options": [
             {"name": "defer_commutative", "type": "bool", "default": True, "help": "an option a knob aliases"},
             {"name": "count", "type": "int", "default": 2, "min": 1, "max": 5, "help": "an int"},
             {"name": "ratio", "type": "double", "default": 0.5, "min": 0.0, "max": 1.0, "help": "a double"},
             {"name": "flavour", "type": "string", "default": "plain", "choices": ["plain", "spicy"],
              "help": "a string"}]},
        {"name": "ordered", "summary": "a protocol with a 3-member ordering group", "min_regions": 3,
         "roles": [{"name": "order", "prefix": "o", "placement": "group", "size": 3, "help": "the group"}],
         "options": []},
    ],
}


@pytest.fixture
def fake_registry(tmp_path, monkeypatch):
    """$TXN_SERVER -> a script that prints FAKE_REGISTRY for `--list-modes --json` and counts its calls in
    <script>.calls. Returns the script's path."""
    import json
    d = tmp_path / "registry"
    d.mkdir()
    (d / "registry.json").write_text(json.dumps(FAKE_REGISTRY))
    script = d / "txn-server"
    script.write_text(f'#!/bin/sh\necho x >> "{script}.calls"\ncat "{d / "registry.json"}"\n')
    script.chmod(0o755)
    monkeypatch.setenv("TXN_SERVER", str(script))
    return script
