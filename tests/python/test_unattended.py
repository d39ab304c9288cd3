"""Jobs that run unattended and jobs that die without a word (issue 29, finding 5 and its minor items), without
Docker: a job in the driver takes stop requests through its stdin only when the host launcher asked for it; a
SIGHUP ignored at start (nohup) stays ignored; the code version recorded where there is no git; the host records
the runs a killed job left `running`; a recent pass of the RTT self-test is reused."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.runs import driverexec, selftest
from testbed.sweeps import mainjob

from conftest import NESTED_SUITE_ENV, REPO, signals_as_from_a_terminal

# ---------------------------------------------------------------- the stdin protocol only when the host asks for it

STDIN_STOP = "EDGE_TXN_STDIN_STOP"   # what the host launcher sets (testbed/core/interrupts.py)

JOB = """
import sys, time
from testbed.runs import jobs
jobs.inside_driver = lambda: True              # as in the driver container
with jobs.job("local", out_root=sys.argv[1]) as stop:
    print("started", flush=True)
    for _ in range(30):
        if stop.requested:
            break
        time.sleep(0.1)
    print(f"stopped: {stop.why}" if stop.requested else "ran to its end", flush=True)
"""


def job_in_driver(tmp_path, env_extra: dict, stdin_text: str | None) -> str:
    """The job above with a pipe on stdin (as `docker exec -i` gives it) that says stdin_text and closes."""
    env = {k: v for k, v in os.environ.items() if k != STDIN_STOP}
    p = subprocess.Popen([sys.executable, "-c", JOB, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env={**env, **env_extra}, cwd=REPO)
    assert p.stdout.readline().strip() == "started"
    if stdin_text:
        p.stdin.write(stdin_text)
        p.stdin.flush()
    p.stdin.close()
    with p.stdout:
        out = p.stdout.read()
    p.wait(timeout=30)
    return out.strip()


def test_a_job_started_by_hand_with_a_closed_stdin_runs_to_its_end(tmp_path):
    # `docker exec -i <driver> python -m testbed.cli ... < /dev/null`: end-of-file at once, from nobody
    assert job_in_driver(tmp_path, {}, None) == "ran to its end"


def test_a_job_the_host_started_stops_on_its_stop_line_and_when_the_host_goes_away(tmp_path):
    asked = {STDIN_STOP: "1"}
    assert job_in_driver(tmp_path, asked, "STOP SIGTERM\n") == "stopped: forwarded by the host"
    assert job_in_driver(tmp_path, asked, None).startswith("stopped: the host job that started this job went away")


def test_exec_in_driver_asks_for_the_stdin_protocol(monkeypatch):
    seen = {}

    class FakePopen:
        def __init__(self, cmd, **kw):
            seen["cmd"] = cmd
            self.stdout, self.stdin = iter([]), None

        def wait(self):
            return 0
    monkeypatch.setattr(driverexec.subprocess, "Popen", FakePopen)
    assert driverexec.exec_in_driver("d", ["true"], {"A": "1"}) == 0
    assert f"{STDIN_STOP}=1" in seen["cmd"] and "A=1" in seen["cmd"]


# ---------------------------------------------------------------- nohup: SIGHUP ignored at start stays ignored

def test_a_host_job_under_nohup_survives_a_closed_terminal_and_stops_on_sigint(fake_bin, tmp_path):
    p = subprocess.Popen(["nohup", sys.executable, "run_local.py", "--build-dir", str(fake_bin), "--out",
                          str(tmp_path), "--regions", "2", "--shards", "1", "--duration", "30", "--warmup", "1",
                          "--cooldown", "1", "--base-port", "24300", "--processes", "split"], cwd=REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                         preexec_fn=signals_as_from_a_terminal)   # then nohup ignores SIGHUP itself
    t0 = time.monotonic()
    while len(list(tmp_path.glob("local/*/logs/c*.log"))) < 2 and time.monotonic() - t0 < 30:
        time.sleep(0.1)
    run = next(tmp_path.glob("local/*"))
    time.sleep(0.5)
    os.killpg(p.pid, signal.SIGHUP)              # the terminal closes
    time.sleep(2)
    assert p.poll() is None, p.communicate()[0]
    os.killpg(p.pid, signal.SIGINT)              # kill -INT -- -<pid>
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 130, out
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "interrupted" and meta["reason"] == "interrupted by SIGINT"


# ---------------------------------------------------------------- the code version where there is no git

def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "checkout"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "f.txt").write_text("one\n")
    git(r, "add", "f.txt")
    git(r, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return r


def test_the_commit_is_read_from_git_files_loose_packed_detached_and_in_a_worktree(repo, tmp_path):
    from testbed.core import gitinfo
    sha = git(repo, "rev-parse", "HEAD")
    assert gitinfo.read_head(repo) == sha                     # refs/heads/main, a loose ref
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git/refs/heads/main").exists() and gitinfo.read_head(repo) == sha
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "wt"))
    assert (tmp_path / "wt" / ".git").is_file() and gitinfo.read_head(tmp_path / "wt") == sha
    git(repo, "checkout", "-q", "--detach")
    assert gitinfo.read_head(repo) == sha
    assert gitinfo.read_head(tmp_path) is None                # not a checkout


def test_without_git_the_dirty_mark_comes_only_from_the_host_job_of_this_checkout(repo, tmp_path, monkeypatch):
    from testbed.core import gitinfo
    sha = git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(gitinfo, "_git", lambda *a: None)    # the driver container: no git
    monkeypatch.delenv(gitinfo.ENV_SHA, raising=False)
    assert gitinfo.code_version(repo) == sha + "-changes-unknown"   # by hand: the commit, the rest unknown
    monkeypatch.setenv(gitinfo.ENV_SHA, sha + "-dirty")
    monkeypatch.setenv(gitinfo.ENV_CHECKOUT, gitinfo.checkout_id(repo))
    assert gitinfo.code_version(repo) == sha + "-dirty"             # the host job of this very checkout
    monkeypatch.setenv(gitinfo.ENV_CHECKOUT, gitinfo.checkout_id(tmp_path))
    assert gitinfo.code_version(repo) == sha + "-changes-unknown"   # a host job of another checkout
    monkeypatch.setenv(gitinfo.ENV_CHECKOUT, gitinfo.checkout_id(repo))
    monkeypatch.setenv(gitinfo.ENV_SHA, "0" * 40)
    assert gitinfo.code_version(repo) == sha + "-changes-unknown"   # ... or of another commit


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="this checkout has no .git (an exported tree)")
def test_a_run_where_there_is_no_git_records_the_commit_of_the_code_that_runs():
    """As in the driver container (no git on PATH), with the host's version of some other checkout in the
    environment: the run records this checkout's commit, never null and never the other one."""
    head = git(REPO, "rev-parse", "HEAD")
    env = {**os.environ, "PATH": "/nonexistent", "EDGE_TXN_GIT_SHA": "f" * 40, "EDGE_TXN_GIT_CHECKOUT": "1:2"}
    out = subprocess.run([sys.executable, "-c", "from testbed.runs.lifecycle import git_sha; print(git_sha())"],
                         env=env, cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    assert out == head + "-changes-unknown"


# ---------------------------------------------------------------- a job that died without a word

def run_folder(root: Path, name: str, **meta) -> Path:
    d = root / "exp" / name
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"run_id": name, **meta}))
    return d


@pytest.fixture
def folders(tmp_path):
    root = tmp_path / "results"
    return root, {"cut": run_folder(root, "cut", status="running", job="J"),
                  "done": run_folder(root, "done", status="ok", job="J"),
                  "other": run_folder(root, "other", status="running", job="K")}


@pytest.mark.parametrize("where, rc, cause", [
    ("exited (137)", 137, "the driver container tst_driver exited (137) during the job"),
    ("running", 137, "the job in tst_driver was killed (SIGKILL, exit 137: kill -9, or the kernel's OOM killer)"),
])
def test_the_cause_is_said_and_the_runs_the_job_left_running_are_recorded_failed(monkeypatch, folders, where, rc,
                                                                                 cause):
    root, runs = folders
    monkeypatch.setattr(mainjob, "container_state", lambda name: where)
    monkeypatch.setattr(mainjob.swarm, "stop_engines", lambda hosts, state: {})
    said = []
    mainjob._after_bad_exit("tst_driver", [], {}, said.append, rc, (root, "J", time.time() - 60), settle_s=0)
    assert len(said) == 1 and said[0].startswith(f"{cause}: its run ") and "recorded as failed" in said[0], said
    meta = json.loads((runs["cut"] / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["reason"] == f"cut off: {cause}"
    assert json.loads((runs["done"] / "meta.json").read_text())["status"] == "ok"
    assert json.loads((runs["other"] / "meta.json").read_text())["status"] == "running"   # another job's


def test_a_job_that_ended_with_its_own_failure_is_left_as_it_recorded_itself(monkeypatch, folders):
    root, runs = folders
    monkeypatch.setattr(mainjob, "container_state", lambda name: "running")
    monkeypatch.setattr(mainjob.swarm, "stop_engines", lambda hosts, state: {})
    said = []
    mainjob._after_bad_exit("tst_driver", [], {}, said.append, 1, (root, "J", time.time() - 60), settle_s=0)
    assert said == [] and json.loads((runs["cut"] / "meta.json").read_text())["status"] == "running"


def test_the_results_folder_of_a_job_is_its_out_option_or_the_checkouts(tmp_path):
    assert mainjob.out_root(["--quick"], tmp_path) == tmp_path / "results"
    assert mainjob.out_root(["--out", "x/r"], tmp_path, cwd=tmp_path) == tmp_path / "x/r"
    assert mainjob.out_root(["--out=x/r"], tmp_path, cwd=tmp_path) == tmp_path / "x/r"


# ---------------------------------------------------------------- a recent pass of the RTT self-test is reused

STATE = {"deployment": "tst", "mechanism": "app", "rtt_ms": [[5, 100], [100, 5]], "jitter_ms": 0,
         "containers": [{"name": "tst_r1_s1", "ip": "10.9.1.1", "role": "shard", "region": 1, "shard": 1,
                         "id": "aaa"},
                        {"name": "tst_driver", "ip": "10.9.0.240", "role": "driver", "id": "ddd"}]}


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """exec_in_driver replaced by a self-test that leaves its run folder as the real one does and exits with
    fake["rc"]; fake["codes"] lists the exit codes of the self-tests run."""
    fake = {"rc": 0, "codes": []}

    def exec_in_driver(driver, argv, env, out=None, timeout_s=None):
        d = tmp_path / "results" / "selftest" / f"run{len(fake['codes'])}"
        d.mkdir(parents=True)
        (d / "meta.json").write_text(json.dumps({"status": "ok", "probe": 20, "job": env[driverexec.ENV_JOB]}))
        fake["codes"].append(fake["rc"])
        return fake["rc"]
    monkeypatch.setattr(selftest, "exec_in_driver", exec_in_driver)
    return fake


def quiet(msg):
    pass


def test_a_recent_pass_of_the_same_deployment_is_reused_and_said(measured, tmp_path):
    said = []
    assert selftest.swarm_self_test(None, STATE, log=said.append, reuse=True, repo=tmp_path)
    assert selftest.swarm_self_test(None, STATE, log=said.append, reuse=True, repo=tmp_path)
    assert measured["codes"] == [0] and said[-1].startswith("RTT self-test: reusing the pass of ")
    assert said[-1].endswith("(results/selftest/run0); --fresh measures again"), said
    assert len(list((tmp_path / "results" / "selftest").glob("*/meta.json"))) == 1   # no new folder


def test_a_pass_is_not_reused_when_forced_old_or_of_other_containers(measured, tmp_path):
    selftest.swarm_self_test(None, STATE, log=quiet, reuse=True, repo=tmp_path)
    selftest.swarm_self_test(None, STATE, log=quiet, reuse=False, repo=tmp_path)          # forced (--fresh, make up)
    assert len(measured["codes"]) == 2
    replaced = {**STATE, "containers": [{**STATE["containers"][0], "id": "bbb"}, STATE["containers"][1]]}
    selftest.swarm_self_test(None, replaced, log=quiet, reuse=True, repo=tmp_path)         # a container replaced
    assert len(measured["codes"]) == 3
    record = selftest.pass_record(replaced, tmp_path)
    record.write_text(json.dumps({**json.loads(record.read_text()),
                                  "unix": time.time() - selftest.SELFTEST_REUSE_S - 1}))
    selftest.swarm_self_test(None, replaced, log=quiet, reuse=True, repo=tmp_path)         # too old
    assert len(measured["codes"]) == 4


def test_a_failed_self_test_is_never_reused(measured, tmp_path):
    selftest.swarm_self_test(None, STATE, log=quiet, reuse=True, repo=tmp_path)
    measured["rc"] = 1
    assert not selftest.swarm_self_test(None, STATE, log=quiet, reuse=False, repo=tmp_path)
    measured["rc"] = 0
    selftest.swarm_self_test(None, STATE, log=quiet, reuse=True, repo=tmp_path)
    assert measured["codes"] == [0, 1, 0]


# ---------------------------------------------------------------- `nohup make test` and `make test` agree

def test_the_signal_tests_pass_when_pytest_itself_runs_with_hup_and_int_ignored():
    """`nohup make test` (SIGHUP ignored) or `make test &` from a script (SIGINT ignored): the tests that signal a
    job set their child's dispositions themselves (conftest.signals_as_from_a_terminal), so they pass there too."""
    import signal as sig

    def ignored():
        for s in (sig.SIGHUP, sig.SIGINT, sig.SIGQUIT):
            sig.signal(s, sig.SIG_IGN)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/python/test_local_fake.py::test_a_signal_to_run_local_stops_the_run_and_leaves_no_process"],
                       cwd=REPO, capture_output=True, text=True, timeout=240, preexec_fn=ignored,
                       env={**os.environ, NESTED_SUITE_ENV: "1"})
    assert p.returncode == 0 and "3 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
