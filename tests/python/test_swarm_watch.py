"""The swarm driver's status watchers (testbed/runs/swarm_backend.py): the container-side loop (WATCH_SH, run here by
bash on a scratch run folder) and the driver-side reader (Watch, on a fake channel)."""
import os
import subprocess
import time

import pytest

from testbed.runs import swarm_backend as sb


class FakeChan:
    def __init__(self):
        self.chunks, self.closed, self.ended = [], False, False

    def recv_ready(self):
        return bool(self.chunks)

    def recv(self, n):
        return self.chunks.pop(0)

    def exit_status_ready(self):
        return self.ended

    def close(self):
        self.closed = True


def test_read_returns_the_newest_complete_status_across_split_chunks():
    ch = FakeChan()
    w = sb.Watch(ch, now=0.0)
    assert w.read(0.1) is None
    ch.chunks += [b"UP s0 12\nREA", b"DY s0\nEND\nRC s0 0\n"]
    assert w.read(0.2) == ["UP s0 12", "READY s0"]
    ch.chunks += [b"READY s0\nEND\n", b"RC s0 0\nREADY s0\nEND\nUP"]   # two statuses in one round: the newer
    assert w.read(0.3) == ["RC s0 0", "READY s0"]
    ch.chunks += [b" x 1\nEND\n"]
    assert w.read(0.4) == ["UP x 1"]


def test_an_empty_status_is_a_status():
    ch = FakeChan()
    w = sb.Watch(ch, now=0.0)
    ch.chunks.append(b"\nEND\n")
    assert w.read(0.1) == []


def test_a_watcher_that_ended_or_fell_silent_is_an_error():
    ch = FakeChan()
    w = sb.Watch(ch, now=0.0)
    ch.chunks.append(b"UP a 1\nEND\n")
    ch.ended = True
    assert w.read(0.1) == ["UP a 1"]       # what it sent before ending still counts
    with pytest.raises(sb.SshError, match="ended"):
        w.read(0.2)
    quiet = sb.Watch(FakeChan(), now=0.0)
    assert quiet.read(sb.SILENT_S - 0.5) is None
    with pytest.raises(sb.SshError, match="no status for"):
        quiet.read(sb.SILENT_S + 0.5)
    quiet.close()


def _watch(tmp_path, interval=0.05, beat=3, life=20):
    rdir = tmp_path / "run"
    (rdir / "logs").mkdir(parents=True)
    (rdir / "watch.sh").write_text(sb.WATCH_SH.format(rdir=rdir, beat=beat, interval=interval))
    return rdir, subprocess.Popen(["timeout", str(life), "bash", str(rdir / "watch.sh")], stdout=subprocess.PIPE,
                                  text=True)


def _blocks(p, n):
    out, block = [], []
    for line in p.stdout:
        line = line.rstrip("\n")
        if line == "END":
            out.append(block)
            block = []
            if len(out) == n:
                return out
        elif line:
            block.append(line)
    return out


def test_the_container_loop_sends_changes_and_heartbeats_and_ends_with_the_run_folder(tmp_path):
    rdir, p = _watch(tmp_path)
    try:
        logs = rdir / "logs"
        first = _blocks(p, 1)
        assert first == [[]]                      # nothing started yet: an empty status
        (logs / "s0.wpid").write_text(str(os.getpid()))   # a live wrapper
        (logs / "s0.pid").write_text("1")
        (logs / "s0.log").write_text("READY s0\n")
        t0 = time.monotonic()
        got = _blocks(p, 1)[0]
        assert "UP s0 1" in got and "READY s0" in got
        (logs / "s0.rc").write_text("0")
        assert "RC s0 0" in _blocks(p, 1)[0]
        beat = _blocks(p, 1)[0]                   # unchanged: repeated as a heartbeat after `beat` rounds
        assert "RC s0 0" in beat and time.monotonic() - t0 < 5
        for f in logs.iterdir():
            f.unlink()
        logs.rmdir()
        assert p.wait(timeout=5) == 0             # the run folder's logs gone (teardown): the loop ends
    finally:
        p.kill()
        p.wait()


def test_the_container_loop_ends_at_its_life_limit(tmp_path):
    _, p = _watch(tmp_path, life=1)
    try:
        assert p.wait(timeout=10) == 124          # timeout's code: nothing outlives the run's life limit
    finally:
        p.kill()
        p.wait()


def test_a_wrapper_pid_file_being_written_is_not_a_lost_process(tmp_path):
    """An empty .wpid (created, not yet written) is skipped until it holds the wrapper's pid: read as "the wrapper is
    gone" it failed a run of 100 containers (the wrappers now write it aside and rename it, too)."""
    rdir, p = _watch(tmp_path)
    try:
        logs = rdir / "logs"
        assert _blocks(p, 1) == [[]]
        (logs / "s0.wpid").write_text("")
        (logs / "s1.wpid").write_text(str(os.getpid()))
        got = _blocks(p, 1)[0]
        assert got == ["UP s1 0"], got
        (logs / "s0.wpid").write_text(str(os.getpid()))
        assert sorted(_blocks(p, 1)[0]) == ["UP s0 0", "UP s1 0"]
    finally:
        p.kill()
        p.wait()


def test_a_wrapper_that_ends_between_the_looks_is_done_not_lost(tmp_path):
    """The watcher looks for a process's exit status, then whether its wrapper lives: a wrapper that writes its status
    and ends between the two looks was reported lost, and its run failed ("its wrapper shell is gone ... the process
    is gone too", make main on 2026-11-27). Here `kill -0` on the wrapper plays that: the status appears as it
    answers that the wrapper is gone."""
    rdir = tmp_path / "run"
    logs = rdir / "logs"
    env_file = tmp_path / "kill.sh"
    env_file.write_text('kill() { if [ "$1" = -0 ] && [ "$2" = 999999 ]; then echo 0 > s0.rc.tmp; mv s0.rc.tmp s0.rc; '
                        'return 1; fi; builtin kill "$@"; }\n')
    logs.mkdir(parents=True)
    (logs / "s0.wpid").write_text("999999")   # the wrapper (no such process: kill is the function above)
    (logs / "s0.pid").write_text("999998")    # its engine, gone too
    (rdir / "watch.sh").write_text(sb.WATCH_SH.format(rdir=rdir, beat=3, interval=0.05))
    p = subprocess.Popen(["timeout", "20", "bash", str(rdir / "watch.sh")], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "BASH_ENV": str(env_file)})
    try:
        assert _blocks(p, 1)[0] == ["RC s0 0"]
    finally:
        p.kill()
        p.wait()


class FakeConn:
    def __init__(self, ip, log, fail_copy=False):
        self.ip, self.log, self.fail_copy, self.sessions = ip, log, fail_copy, 0

    def sh(self, cmd, timeout=None):
        self.log.append((self.ip, "kill" if "kill -9" in cmd else "", "rm" if "rm -rf" in cmd else ""))
        return 0, ""

    def get_tree(self, remote, local, timeout=60):
        self.log.append((self.ip, "copy", remote))
        if self.fail_copy:
            raise sb.SshError("copying results from x: EOFError", "EOFError")
        (local / "logs").mkdir(parents=True, exist_ok=True)
        (local / "logs" / f"{self.ip}.log").write_text("server log\n")
        return 1

    def close(self):
        pass


def _runner(log, ips, fail=()):
    r = sb.SwarmRunner.__new__(sb.SwarmRunner)
    r.progress, r.names, r.rdir, r._gone, r.watches, r._dropped_sessions = False, {}, "/edge-run/x", set(), {}, 0
    r.conns = {ip: FakeConn(ip, log, ip in fail) for ip in ips}
    return r


def test_teardown_of_a_failed_run_copies_what_its_processes_left_before_removing_it(tmp_path):
    log = []
    r = _runner(log, ["10.0.0.1", "10.0.0.2"], fail={"10.0.0.2"})
    r._collected = False      # it failed before its results were copied
    notes = r.teardown(tmp_path, [])
    assert (tmp_path / "logs" / "10.0.0.1.log").read_text() == "server log\n"
    assert notes == ["10.0.0.2: the failed run's files not copied (EOFError)"]
    for ip in ("10.0.0.1", "10.0.0.2"):   # per container: the processes killed, then the copy, then the removal
        assert [e[1:] for e in log if e[0] == ip] == [("kill", ""), ("copy", "/edge-run/x"), ("", "rm")]

    log.clear()
    r = _runner(log, ["10.0.0.1"])
    r._collected = True       # an ordinary end: one command, nothing copied again
    assert r.teardown(tmp_path / "ok", []) == []
    assert log == [("10.0.0.1", "kill", "rm")]
