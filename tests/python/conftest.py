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
