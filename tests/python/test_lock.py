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
