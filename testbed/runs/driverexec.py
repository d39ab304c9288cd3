"""Running a job inside the driver container from the host, so that stopping the host side stops it too.

`docker exec` alone does not forward signals: Ctrl-C on it ends the client and leaves the job running in the
container. Here the job runs under `docker exec -i` with EDGE_TXN_STDIN_STOP=1, with the host holding its standard
input (a job started by hand has no such variable and ignores its stdin, so `< /dev/null` does not stop it):
- Ctrl-C, SIGTERM or SIGHUP on the host writes `STOP <SIGNAME>` to that input (testbed/core/interrupts.py
  watch_stdin in the job turns it into the same stop request the signal would have made) and closes it;
- if the host job dies in any way, its `docker exec` client dies with it (parent-death signal), the job's input
  reaches end-of-file, and the job stops as if it had got SIGHUP;
- the client runs in its own session, so a Ctrl-C in the terminal reaches only the host job, which forwards it,
  and the job's last lines (the interrupted run, the figure) still come through.
When the exec ends badly, the driver container's own state is looked at (testbed/sweeps/mainjob.py): a driver that
was stopped or killed mid-job is named (`driver container edge_driver exited (137)`), so is a job killed in a running
driver (exit 137: kill -9 or the OOM killer), whatever engine processes it left in the shard containers are
stopped, and the runs it left `running` are recorded as failed with that cause (record_cut_off: the driver writes
into this checkout, and every run records the id of the host job that started it, EDGE_TXN_JOB).
"""
from __future__ import annotations

import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from testbed.analysis.rundirs import read_json, write_json
from testbed.core import interrupts

STOP_GRACE_S = 30.0   # after forwarding a stop: how long the job may take to record its run and exit
REPO_IN_DRIVER = "/work/edge-txn"
ENV_JOB = "EDGE_TXN_JOB"   # the id of the host job that started a job in the driver (meta.json `job` of its runs)


def new_job_id() -> str:
    return f"{os.uname().nodename}-{os.getpid()}-{secrets.token_hex(4)}"


def job_runs(out_root, job_id: str, since_unix: float = 0.0) -> list[tuple[Path, dict]]:
    """(run folder, meta) of the runs under out_root (<out_root>/<name>/<run-id>/) that the host job job_id started
    in the driver; only meta.json files written since since_unix are read."""
    out = []
    for path in sorted(Path(out_root).glob("*/*/meta.json")):
        try:
            if path.stat().st_mtime < since_unix:
                continue
        except OSError:
            continue
        meta = read_json(path)
        if meta and meta.get("job") == job_id:
            out.append((path.parent, meta))
    return out


def record_cut_off(out_root, job_id: str, cause: str, since_unix: float = 0.0) -> list[Path]:
    """The runs the job left `running` (it died before recording an outcome), rewritten as failed with the cause
    (atomically); returns their folders."""
    out = []
    for run_dir, meta in job_runs(out_root, job_id, since_unix):
        if meta.get("status") != "running":
            continue
        meta.update(status="failed", reason=cause, error=cause, end_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    recorded_by="the host job")
        try:
            write_json(run_dir / "meta.json", meta)
        except OSError:  # e.g. a folder this user may not write
            continue
        out.append(run_dir)
    return out


def relay_paths(repo: str):
    """A line filter that turns paths in the driver (the mounted checkout) into paths of this checkout."""
    def f(line: str) -> str:
        return line.replace(REPO_IN_DRIVER + "/", "").replace(REPO_IN_DRIVER, repo)
    return f


class LogWriter:
    """A file-like `out` for exec_in_driver that hands each line to a log function."""

    def __init__(self, log):
        self.log = log

    def write(self, text: str) -> None:
        for line in text.splitlines():
            self.log(line)

    def flush(self) -> None:
        pass


def exec_in_driver(driver: str, argv: list[str], env: dict | None = None, out=None, line_filter=None,
                   stop: interrupts.Stop | None = None, grace_s: float = STOP_GRACE_S,
                   timeout_s: float | None = None) -> int:
    """Run argv in the driver container and relay its output (stdout and stderr, in order) to `out`.
    Returns the job's exit code (after a forwarded stop the job's own code says whether it was cut short: 128 +
    signal, or its normal code when it had just finished); 128 + the signal when it had to be killed after grace_s.
    timeout_s: a job still running after this long is stopped like a SIGTERM (exit code 124)."""
    out = out or sys.stdout
    stop = stop or interrupts.current()
    env = {**(env or {}), interrupts.ENV_STDIN_STOP: "1"}
    flags = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
    cmd = ["docker", "exec", "-i", "-e", "PYTHONUNBUFFERED=1", *flags, driver, *argv]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         bufsize=1, start_new_session=True, preexec_fn=interrupts.die_with_parent)
    lines: queue.Queue = queue.Queue()

    def reader():
        for line in p.stdout:
            lines.put(line)
        lines.put(None)
    threading.Thread(target=reader, daemon=True).start()

    forwarded_at, t0, timed_out, killed = None, time.monotonic(), False, False
    while True:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            line = ""
        if line is None:
            break
        if line:
            try:
                out.write(line_filter(line) if line_filter else line)
                out.flush()
            except (OSError, ValueError):  # our terminal is gone (SIGHUP): keep stopping the job regardless
                pass
        if timeout_s is not None and not timed_out and time.monotonic() - t0 > timeout_s:
            timed_out = True
            _say(out, f"no end of the job in {driver} within {timeout_s:g}s")
        if (stop.requested or timed_out) and forwarded_at is None:
            forwarded_at = time.monotonic()
            sig = _signame(stop.signum) if stop.requested else "SIGTERM"
            _say(out, f"stopping the job in {driver} ({sig} forwarded) ...")
            try:
                p.stdin.write(f"STOP {sig}\n")
                p.stdin.flush()
                p.stdin.close()
            except (OSError, ValueError):
                pass
        if forwarded_at is not None and time.monotonic() - forwarded_at > grace_s:
            _say(out, f"the job in {driver} did not stop within {grace_s:g}s; killing it")
            p.kill()
            killed = True
            break
    rc = p.wait()
    if timed_out:
        return 124
    return 128 + stop.signum if killed and stop.requested else rc


def _signame(signum) -> str:
    return signal.Signals(signum).name


def _say(out, msg: str) -> None:
    try:
        out.write(msg + "\n")
        out.flush()
    except (OSError, ValueError):
        pass


def container_state(name: str) -> str | None:
    """`running`, or `exited (137)` / `is restarting` / `does not exist` for a container of this host."""
    try:
        r = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return "does not exist" if "No such" in r.stderr else None
    status, _, code = r.stdout.strip().partition(" ")
    if status == "running":
        return "running"
    return f"exited ({code})" if status in ("exited", "dead") else f"is {status}"
