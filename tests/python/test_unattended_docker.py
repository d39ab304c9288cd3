"""Unattended jobs and jobs that die without a word, on the swarm (issue 29, finding 5 and its minor items), on a
deployment of the tests' own (tstunat, beside the lifecycle tests' tstlife; tests/python/one_node_deployment.py):
the README's by-hand job with a closed stdin runs to its end and records the commit of the mounted checkout; it
stops on the command a second job's busy message prints; kill -9 of the job in the driver is named on the host and its run recorded as failed; a run the host starts
records the host checkout's version; a recent pass of the RTT self-test is reused, said so."""
import re
import shutil
import subprocess
import time

import pytest

from testbed.cluster import swarm
from testbed.runs import selftest

from conftest import REPO
from one_node_deployment import DOCKER, OneNodeDeployment, finish, meta_of

pytestmark = [pytest.mark.docker, pytest.mark.skipif(
    DOCKER is None, reason="no Docker daemon answers at DOCKER_HOST or unix:///var/run/docker.sock")]

D = OneNodeDeployment("tstunat", 234)
DEPLOYMENT, DRIVER, OUT = D.name, D.driver, D.out
in_container, engines_left, host_run, wait_clients_running, by_hand = (
    D.in_container, D.engines_left, D.host_run, D.wait_clients_running, D.by_hand)


@pytest.fixture(scope="module")
def dep(image):
    yield from D.brought_up()


def git(*args) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout.strip()


def newest_run(name: str):
    return max((OUT / name).glob("*/meta.json"), key=lambda m: m.stat().st_mtime).parent


def selftest_folders() -> set:
    d = REPO / "results" / "selftest"
    return {x for x in d.iterdir() if x.is_dir()} if d.is_dir() else set()


def test_a_by_hand_job_with_a_closed_stdin_runs_to_its_end_and_records_the_mounted_commit(dep):
    # as nohup, cron or CI would run it: `docker exec -i ... < /dev/null`
    p = subprocess.Popen(by_hand("byhand", duration=6), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    rc, out, took = finish(p, within=180)
    assert rc == 0 and "checker: CONSISTENT" in out and took > 6, out
    meta = meta_of(newest_run("byhand"))
    assert meta["status"] == "ok" and meta["git_sha"].startswith(git("rev-parse", "HEAD")), meta["git_sha"]
    assert engines_left() == {}


def test_a_run_the_host_starts_records_the_version_of_its_checkout(dep):
    rc, out, _ = finish(host_run("version", duration=3), within=180)
    assert rc == 0, out
    dirty = git("status", "--porcelain", "--untracked-files=no")
    assert meta_of(newest_run("version"))["git_sha"] == git("rev-parse", "HEAD") + ("-dirty" if dirty else "")


def test_a_by_hand_job_stops_on_the_command_the_busy_message_prints(dep):
    p = subprocess.Popen(by_hand("hand", duration=30), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    run = wait_clients_running("hand", p=p)
    rc, out, _ = finish(host_run("second", duration=3), within=60)
    stop = re.search(rf"`(docker exec {DRIVER} kill -INT \d+)`", out)
    assert rc == 2 and "is busy" in out and stop, out
    subprocess.run(stop.group(1).split(), check=True)
    rc, out, took = finish(p, within=30)
    assert rc == 130 and took < 10, out
    meta = meta_of(run)
    assert meta["status"] == "interrupted" and meta["reason"].startswith("interrupted by SIGINT"), meta
    assert engines_left() == {}


def test_kill_9_of_the_job_in_the_driver_is_named_and_its_run_recorded_failed(dep):
    p = host_run("k9")
    run = wait_clients_running("k9", p=p)
    in_container(DRIVER, "pkill -9 -f 'testbed[.]cli'")
    rc, out, took = finish(p, within=60)
    cause = f"the job in {DRIVER} was killed (SIGKILL, exit 137: kill -9, or the kernel's OOM killer)"
    assert rc == 137 and f"{cause}: its run {run.relative_to(REPO)} recorded as failed" in out, out
    meta = meta_of(run)
    assert meta["status"] == "failed" and meta["reason"] == f"cut off: {cause}", meta
    assert engines_left() == {}


def test_a_recent_self_test_pass_of_the_deployment_is_reused_and_said(dep):
    state = swarm.load_state(swarm.state_paths(DEPLOYMENT)[1])
    before, existed = selftest_folders(), (REPO / "results" / "selftest").is_dir()
    try:
        assert selftest.swarm_self_test(dep, state, log=print, reuse=False)   # measured: a folder of its own
        made = selftest_folders() - before
        assert len(made) == 1
        said, t0 = [], time.monotonic()
        assert selftest.swarm_self_test(dep, state, log=said.append, reuse=True)
        assert time.monotonic() - t0 < 2 and len(said) == 1, said
        folder = next(iter(made)).relative_to(REPO)
        assert re.fullmatch(rf"RTT self-test: reusing the pass of [-0-9]+ [:0-9]+ \({folder}\); --fresh measures "
                            "again", said[0]), said
        assert selftest_folders() - before == made   # no new folder
    finally:
        selftest.pass_record(state).unlink(missing_ok=True)
        for d in selftest_folders() - before:
            shutil.rmtree(d, ignore_errors=True)
        if not existed:
            (REPO / "results" / "selftest").rmdir()
