"""One job per deployment (testbed/core/lock.py): a second job refuses at once naming the holder, or waits with
--wait; the lock dies with its holder; a child job inherits it through the environment."""
import json
import os
import subprocess
import sys
import time

import pytest

from testbed.core import lock


HOLD = """
import sys, time
from testbed.core import lock
with lock.JobLock("swarm-tst", "make main").acquire():
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


@pytest.fixture
def lockdir(tmp_path, monkeypatch):
    monkeypatch.setenv(lock.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(lock.ENV_TOKEN, raising=False)
    return tmp_path


def ended(p: subprocess.Popen) -> None:
    p.kill()
    p.wait()
    p.stdout.close()


def holder(seconds: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(seconds)], stdout=subprocess.PIPE,
                         text=True, env=os.environ.copy())
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_job_refuses_at_once_naming_the_holder(lockdir):
    p = holder(30)
    try:
        t0 = time.monotonic()
        with pytest.raises(lock.Busy) as e:
            lock.JobLock("swarm-tst").acquire()
        assert time.monotonic() - t0 < 1
        msg = str(e.value)
        assert msg.startswith("deployment 'tst' is busy: `make main` (pid ") and f"pid {p.pid} " in msg
        assert "since " in msg and "--wait" in msg and "\n" not in msg
    finally:
        p.kill()
        p.wait()


def test_wait_waits_and_the_lock_dies_with_its_holder(lockdir):
    p = holder(2)
    said = []
    t0 = time.monotonic()
    with lock.JobLock("swarm-tst").acquire(wait=True, say=said.append) as held:
        assert time.monotonic() - t0 > 1 and said and said[0].startswith("waiting for `make main`")
        assert json.loads(held.path.read_text())["pid"] == os.getpid()
    p.wait()
    killed = holder(60)
    killed.kill()                      # SIGKILL: no cleanup ran, the kernel dropped the flock
    killed.wait()
    with lock.JobLock("swarm-tst").acquire():
        pass


def test_a_child_job_inherits_the_lock_through_the_environment(lockdir, monkeypatch):
    with lock.JobLock("swarm-tst").acquire() as held:
        monkeypatch.setenv(lock.ENV_TOKEN, held.token)
        child = lock.JobLock("swarm-tst").acquire()      # would refuse without the token
        assert child.inherited
        child.release()                                 # an inheritor never releases the holder's lock
        monkeypatch.setenv(lock.ENV_TOKEN, "not-the-token")
        with pytest.raises(lock.Busy):
            lock.JobLock("swarm-tst").acquire()


def test_locks_of_different_deployments_and_results_folders_are_independent(lockdir, tmp_path):
    with lock.JobLock(lock.swarm_lock_name("a")).acquire(), lock.JobLock(lock.swarm_lock_name("b")).acquire():
        pass
    assert lock.local_lock_name(tmp_path / "x") != lock.local_lock_name(tmp_path / "y")
    assert lock.local_lock_name("results") == lock.local_lock_name(os.path.abspath("results"))
    assert lock.what_is_locked(lock.local_lock_name("results")) == "this results folder"


HOLD_IN_DRIVER = """
import sys, time
from pathlib import Path
from testbed.core import lock
lock.DRIVER_STATE = Path(sys.argv[2])          # as in the driver container (its containers.yml is there)
with lock.JobLock("swarm-tst", "python -m testbed.cli").acquire():
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


def test_the_busy_message_says_how_to_stop_a_holder_in_the_driver_from_the_host(lockdir, tmp_path, monkeypatch):
    state = tmp_path / "containers.yml"
    state.write_text("deployment: tst\n")
    p = subprocess.Popen([sys.executable, "-c", HOLD_IN_DRIVER, "30", str(state)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "EDGE_TXN_NAME": "tst_driver"})
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(lock.Busy) as e:            # from the host: its pid means nothing here
            lock.JobLock("swarm-tst").acquire()
        assert f"(pid {p.pid} in the driver container tst_driver, " in str(e.value)
        assert f"stop it (Ctrl-C there, or `docker exec tst_driver kill -INT {p.pid}`)" in str(e.value)
        monkeypatch.setattr(lock, "DRIVER_STATE", state)   # from the same driver container: the pid as it is
        monkeypatch.setenv("EDGE_TXN_NAME", "tst_driver")
        with pytest.raises(lock.Busy) as e:
            lock.JobLock("swarm-tst").acquire()
        assert f"stop it (Ctrl-C there, or `kill -INT {p.pid}`)" in str(e.value)
    finally:
        ended(p)


def test_the_busy_message_in_the_driver_names_the_host_of_a_holder_there(lockdir, tmp_path, monkeypatch):
    import platform
    p = holder(30)
    try:
        state = tmp_path / "containers.yml"
        state.write_text("deployment: tst\n")
        monkeypatch.setattr(lock, "DRIVER_STATE", state)
        with pytest.raises(lock.Busy) as e:
            lock.JobLock("swarm-tst").acquire()
        assert f"stop it (Ctrl-C there, or `kill -INT {p.pid}` on host {platform.node()})" in str(e.value)
    finally:
        ended(p)
