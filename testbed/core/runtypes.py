"""What every backend's runs have in common: the result of a run and the ways a run can end without one.

A run ends in one of three ways, recorded in its meta.json `status` with a one-line `reason`:
  ok           the run finished, every process exited cleanly, and its results passed every check;
  failed       the run finished but a check failed (e.g. the checker found it inconsistent), or it could not
               finish (a process died, a container stopped answering, a timeout) -- RunError;
  interrupted  Ctrl-C, SIGTERM or SIGHUP stopped it -- Interrupted (exit code 128 + signal number).
"""
from __future__ import annotations

import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

STATUSES = ("ok", "failed", "interrupted")


class RunError(RuntimeError):
    """A run that could not finish; run_dir is its folder once one was started."""

    def __init__(self, msg: str, run_dir: Path | None = None):
        super().__init__(msg)
        self.run_dir = run_dir

    interrupted = False


class Interrupted(RunError):
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP stopped the job; exit_code is 128 + the signal's number."""
    interrupted = True

    def __init__(self, signum: int, why: str = "", run_dir: Path | None = None):
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}" + (f" ({why})" if why else ""), run_dir)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass
class RunResult:
    """A finished run: status ok or failed (with reason), its summary and checker verdict (empty for probe runs),
    and for RTT self-test runs the measured matrix (testbed/core/rtt.py)."""
    run_dir: Path
    status: str = "ok"
    reason: str = ""
    summary: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)
    probe: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def consistent(self) -> bool:
        return self.check.get("exit_code") == 0


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def new_run_dir(parent) -> Path:
    """A new run folder under parent, created here and by no one else: two runs started in the same second
    (sweeps of fast fake runs, two jobs on one results folder) could draw the same id's 4 random hex digits."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    while True:
        d = Path(parent) / new_run_id()
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
