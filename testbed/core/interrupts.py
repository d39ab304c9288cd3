"""Stopping a job cleanly on Ctrl-C (SIGINT), SIGTERM and SIGHUP.

The handlers only record the request. The run lifecycle and the sweep runner look at it at safe points (every
poll of a running run, before each run of a sweep) and unwind through their cleanup, so a signal can never cut
cleanup or record-keeping in half. Every blocking step of a run is bounded, so a stop takes effect within a few
seconds.

    with stop_on_signals() as stop:     # nests: an inner block reuses the outer one's Stop
        ...
        stop.check()                    # raises runtypes.Interrupted once a stop was requested
        stop.sleep(0.2)                 # sleeps, checking

A job the host launcher started in the driver container (testbed/runs/driverexec.py, which sets
EDGE_TXN_STDIN_STOP=1) is also told to stop through its standard input (watch_stdin_if_asked): the host writes
`STOP <SIGNAME>` there when it is interrupted, and end-of-file means the host side went away. A job started by
hand (`docker exec -i ... < /dev/null`, as nohup, cron or CI would) has no such input protocol: its stdin may
close at once, and it runs to its end unless it gets a signal.

SIGHUP already ignored when a job starts (`nohup make main > main.log 2>&1 &`) stays ignored: a closed terminal
then does not stop it; SIGINT and SIGTERM still do (`kill -INT <pid>`).
"""
from __future__ import annotations

import ctypes
import os
import signal
import stat
import sys
import threading
from contextlib import contextmanager

from testbed.core.runtypes import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ENV_STDIN_STOP = "EDGE_TXN_STDIN_STOP"  # "1": the host launcher holds our stdin and stops us through it
PR_SET_PDEATHSIG = 1

try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # not Linux: no parent-death signal; the other cleanups still apply
    _libc = None


def die_with_parent() -> None:
    """preexec_fn for child processes: the kernel SIGKILLs the child when the process that started it dies, however
    it dies (Linux prctl PR_SET_PDEATHSIG; one libc call, nothing else runs between fork and exec)."""
    if _libc is not None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Stop:
    """A stop request: the first signal (and why) wins; later ones only say that a stop is under way."""

    def __init__(self, say=None):
        self.signum: int | None = None
        self.why = ""
        self.count = 0
        self._say = say or _stderr
        self._event = threading.Event()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int, why: str = "") -> None:
        self.count += 1
        if self.signum is None:
            self.signum, self.why = signum, why
            self._event.set()
        elif self.count == 2:
            self._say(f"already stopping ({signal.Signals(self.signum).name}): cleaning up, this takes a few "
                      "seconds")

    def check(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum, self.why)

    def sleep(self, seconds: float) -> None:
        """Sleep up to `seconds`, returning early (by raising) when a stop is requested."""
        if self._event.wait(seconds):
            self.check()

    def exit_code(self) -> int:
        return 128 + self.signum if self.signum else 0


def _stderr(msg: str) -> None:
    try:
        print(msg, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # the terminal is gone (SIGHUP): nowhere to say it
        pass


_active: Stop | None = None
_NEVER = Stop()  # what current() returns outside stop_on_signals(): never requested


def current() -> Stop:
    return _active or _NEVER


@contextmanager
def stop_on_signals(say=None):
    """Record SIGINT/SIGTERM/SIGHUP as a stop request for the duration of the block (main thread only; in other
    threads, and inside an enclosing block, the enclosing Stop is used). A SIGHUP ignored when the block starts
    (nohup) is left ignored."""
    global _active
    if _active is not None:
        yield _active
        return
    stop = Stop(say)
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    old = {s: signal.signal(s, lambda signum, _frame: stop.request(signum)) for s in STOP_SIGNALS
           if not (s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN)}
    _active = stop
    try:
        yield stop
    finally:
        _active = None
        for s, h in old.items():
            signal.signal(s, h)


def stdin_is_attached_pipe() -> bool:
    """True when fd 0 is a pipe or socket (docker exec -i attaches one; without -i it is /dev/null)."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def watch_stdin_if_asked(stop: Stop) -> threading.Thread | None:
    """watch_stdin when the host launcher asked for it (ENV_STDIN_STOP=1, with a pipe on stdin). The variable is
    taken out of the environment: a child of this job does not share the protocol (nor read its stdin)."""
    asked = os.environ.pop(ENV_STDIN_STOP, "") == "1"
    return watch_stdin(stop) if asked and stdin_is_attached_pipe() else None


def watch_stdin(stop: Stop, fd: int = 0) -> threading.Thread:
    """A daemon thread that turns `STOP <SIGNAME>` lines on fd into stop requests, and end-of-file into a
    SIGHUP-like stop (the host job that holds our stdin went away)."""
    def loop():
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                stop.request(signal.SIGHUP, "the host job that started this job went away (its stdin closed)")
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                words = line.decode(errors="replace").split()
                if len(words) == 2 and words[0] == "STOP" and words[1] in signal.Signals.__members__:
                    stop.request(int(signal.Signals[words[1]]), "forwarded by the host")
                    return  # the end-of-file that follows is part of the same stop

    t = threading.Thread(target=loop, name="stdin-watch", daemon=True)
    t.start()
    return t
