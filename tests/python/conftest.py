import fcntl
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("EDGE_TXN_TEST_IMAGE", "edge-txn:latest")


def docker_client():
    """A docker-py client when a Docker daemon answers, else None."""
    try:
        import docker
        c = docker.from_env(timeout=10)
        c.ping()
        return c
    except Exception:  # noqa: BLE001 -- any failure means: no usable daemon here
        return None


@pytest.fixture(scope="session")
def image():
    """Builds the image exactly as a user would (docker/build_image.sh; cached layers make reruns quick). One build
    at a time on this machine: the Docker units' workers ask at once, and the first builds what the others reuse."""
    with open(Path(tempfile.gettempdir()) / "edge-txn-tests-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        p = subprocess.run(["bash", str(REPO / "docker" / "build_image.sh"), IMAGE], cwd=REPO, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(p.stdout[-3000:])
    assert p.returncode == 0, p.stdout[-3000:]
    assert "build_image: built" in p.stdout
    return IMAGE


# `make test` runs the tests in parallel workers (pytest-xdist, `-n auto`). A Docker test file (*_docker.py) is a unit:
# one worker runs its tests one after the other, in file order. Files that would share a deployment, or that make and
# leave this machine's swarm and assert on it, are one unit together (DOCKER_UNITS). The Docker units run at the same
# time, each on a deployment of its own (own name, network and subnet) in one swarm, except the swarm's owners
# (SWARM_OWNERS: the multi-host rehearsal needs this machine out of any swarm), which run alone: they hold SWARM_LOCK
# exclusively while the others hold it shared (pytest_runtest_protocol below). Whichever comes first, the Docker
# tests take the owners' time plus the longest other unit's. The Docker units are handed out first. A file with a
# module-scoped fixture (a VM booted, a run made once for all its tests) is a unit too; every other test is a unit of
# its own: it shares nothing (its own tmp_path; ports reserved machine-wide, testbed/core/deploy.py allocate_ports).
# (xdist's own `--dist loadgroup` does not group under pytest 9: it renames item._nodeid, which pytest 9 no longer
# reads.)
DOCKER_FILES = "_docker.py"
DOCKER_UNITS = {"test_swarm_docker.py": "test_rehearsal_docker.py"}   # both owners: one unit, one hold
SWARM_OWNERS = {"test_rehearsal_docker.py", "test_swarm_docker.py"}
# machine-wide, as the swarm is (tests/python/test_parallel.py's own suites name one of their own)
SWARM_LOCK = Path(os.environ.get("EDGE_TXN_TESTS_SWARM_LOCK",
                                Path(tempfile.gettempdir()) / "edge-txn-tests-swarm.lock"))
SWARM_MADE = SWARM_LOCK.with_suffix(".json")   # the swarm the shared units made: its node id; docker_gwbridge before


def _docker_unit(name: str) -> str | None:
    return DOCKER_UNITS.get(name, name) if name.endswith(DOCKER_FILES) else None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per core, plus one per Docker unit (they mostly wait on Docker and on their runs'
    fixed lengths, so the rest of the suite keeps every core)."""
    units = {_docker_unit(f.name) for f in Path(__file__).parent.glob(f"test_*{DOCKER_FILES}")}
    return (os.cpu_count() or 1) + len(units)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """A unit per Docker unit; a file with a module-scoped fixture as one unit, so that the fixture is made once,
    not in every worker; every other test a unit of its own. Units in collection order (see the next hook)."""
    from xdist.scheduler import LoadScopeScheduling
    here = Path(__file__).parent
    shared = {f"{here.relative_to(config.rootpath)}/{f.name}" for f in here.glob("test_*.py")
              if re.search(r"fixture\(scope=.module", f.read_text())}
    config.option.loadscopereorder = False

    class SharingTestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            unit = _docker_unit(Path(path).name)
            return f"docker:{unit}" if unit else path if path in shared else nodeid
    return SharingTestsTogether(config, log)


def pytest_collection_modifyitems(config, items):
    """A Docker test outside a *_docker.py file would run beside the others in parallel: refused by name. The swarm's
    owners first, then the other Docker units (the longest units), then the rest, each in its own order."""
    stray = [i.nodeid for i in items if i.get_closest_marker("docker") and not i.path.name.endswith(DOCKER_FILES)]
    if stray:
        raise pytest.UsageError(f"marked docker but not in a *{DOCKER_FILES} file (tests/python/conftest.py): "
                                + ", ".join(stray[:5]))
    rank = {i: 0 if i.path.name in SWARM_OWNERS else 1 if _docker_unit(i.path.name) else 2 for i in items}
    items.sort(key=rank.__getitem__)


_swarm_hold = {}   # this process's hold of SWARM_LOCK: {"kind": "owner" | "shared", "fd": int}


def _swarm_kind(item) -> str | None:
    if item is None or not item.get_closest_marker("docker") or not item.path.name.endswith(DOCKER_FILES):
        return None
    return "owner" if item.path.name in SWARM_OWNERS else "shared"


def _leave_the_tests_swarm() -> None:
    """With SWARM_LOCK held exclusively: the swarm the shared units made (if any) is left, so that the machine's swarm
    is as before the tests (and an owner finds it so)."""
    if not SWARM_MADE.exists():
        return
    import json

    from testbed.cluster import swarm
    made = json.loads(SWARM_MADE.read_text())
    c = docker_client()
    if c is not None:
        try:
            if (c.info().get("Swarm") or {}).get("NodeID") == made["node"]:
                c.swarm.leave(force=True)
                if not made["gwbridge_before"]:
                    swarm._remove_gwbridge(c)
        finally:
            c.close()
    SWARM_MADE.unlink()


def _make_the_tests_swarm() -> None:
    """With SWARM_LOCK held shared: a one-node swarm when there is none, as a lone host's bring-up makes it, recorded
    in SWARM_MADE so that the last shared unit leaves it. Made here, not by the units' own bring-ups: a deployment
    that made the swarm leaves it when it goes down, under the others' feet."""
    import json

    from testbed.cluster import swarm
    from testbed.cluster.hosts import Host
    c = docker_client()
    if c is None:
        return
    with open(SWARM_LOCK.with_suffix(".init"), "w") as f:   # one shared unit at a time makes it
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            if (c.info().get("Swarm") or {}).get("LocalNodeState") != "active":
                gwbridge_before = swarm.has_gwbridge(c)
                swarm.ensure_swarm({"localhost": c}, [Host("localhost")], log=print)
                SWARM_MADE.write_text(json.dumps({"node": c.info()["Swarm"]["NodeID"],
                                                  "gwbridge_before": gwbridge_before}))
        finally:
            c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A Docker unit holds SWARM_LOCK from its first test's set-up to its last test's teardown: exclusively for the
    swarm's owners, shared for the others (the last to leave takes down the swarm they made)."""
    kind = _swarm_kind(item)
    if kind and not _swarm_hold:
        fd = os.open(SWARM_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if kind == "owner" else fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            whom = "the other Docker tests" if kind == "owner" else "the swarm owners"
            print(f"\n{item.path.name}: waiting for {whom} ({SWARM_LOCK})", flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX if kind == "owner" else fcntl.LOCK_SH)
        _swarm_hold.update(kind=kind, fd=fd)
        (_leave_the_tests_swarm if kind == "owner" else _make_the_tests_swarm)()
    yield
    if _swarm_hold and _swarm_kind(nextitem) != _swarm_hold["kind"]:
        fd = _swarm_hold.pop("fd")
        kind = _swarm_hold.pop("kind")
        fcntl.flock(fd, fcntl.LOCK_UN)
        if kind == "shared":
            try:   # the last shared unit out (nobody holds the lock now) leaves the swarm they made
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _leave_the_tests_swarm()
            except BlockingIOError:
                pass
        os.close(fd)


_SWARM_BEFORE = pytest.StashKey()   # the controller's (node state, node id, docker_gwbridge there) at the start


def _swarm_membership():
    c = docker_client()
    if c is None:
        return None
    try:
        from testbed.cluster import swarm
        sw = c.info().get("Swarm") or {}
        return sw.get("LocalNodeState"), sw.get("NodeID") or None, swarm.has_gwbridge(c)
    finally:
        c.close()


# Set by a test that runs a few tests in a pytest of its own: that session does not judge the machine's swarm, which
# the enclosing suite's other workers may be changing meanwhile (the enclosing session judges it, at its end).
NESTED_SUITE_ENV = "EDGE_TXN_NESTED_SUITE"


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput") and not os.environ.get(NESTED_SUITE_ENV):   # the controller
        session.config.stash[_SWARM_BEFORE] = _swarm_membership()


def pytest_sessionfinish(session, exitstatus):
    """This machine's swarm is as before the suite (none, or the same node of the same swarm; docker_gwbridge there
    or not): the Docker units leave the swarm they made, the owners the one they make."""
    before = session.config.stash.get(_SWARM_BEFORE, None)
    if before is not None and not hasattr(session.config, "workerinput") and exitstatus != pytest.ExitCode.INTERRUPTED:
        after = _swarm_membership()
        if after != before:
            print(f"\nconftest: the test suite changed this machine's swarm: before {before}, after {after}",
                  file=sys.stderr)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


# the signals a test sends its child job: the child starts with each at its default action, as from a terminal,
# whatever this pytest inherited (`nohup make test`: SIGHUP ignored; `make test &` from a script: SIGINT and SIGQUIT
# ignored), so the test sets up the signal state it tests instead of inheriting it. Use as Popen(preexec_fn=...).
TERMINAL_SIGNALS = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM")


def signals_as_from_a_terminal() -> None:
    import signal
    for name in TERMINAL_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def built_modes() -> list[str]:
    """Every protocol built into txn-server (the end-to-end runs cover each); dast when it cannot be asked (not
    built: the modules that use it are skipped anyway)."""
    from testbed.core import protocols
    try:
        return protocols.load().names()
    except Exception:  # noqa: BLE001
        return ["dast"]


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
        # argv[0] stays the engine's name, as it is for the real binaries (the launcher finds leftovers by it);
        # Python then cannot tell it runs from the venv (it finds its prefix from argv[0]), hence PYTHONPATH
        p.write_text(f'#!/bin/bash\nPYTHONPATH="{REPO}" exec -a "$0" "{sys.executable}" "{fake}" {role} "$@"\n')
        p.chmod(0o755)
    return d


# ---------------------------------------------------------------- the user's deployment is not the tests' business
TEST_DEPLOYMENT_PREFIX = "tst"   # every deployment the tests bring up is named tst...; anything else is a user's


def _user_deployments():
    """(containers, networks) of every edge-txn deployment not made by the tests, as comparable tuples; None when
    no Docker daemon answers."""
    c = docker_client()
    if c is None:
        return None
    try:
        label = "edge-txn.deployment"
        cts = sorted((ct.name, ct.id, ct.status, ct.attrs["State"].get("StartedAt"), ct.labels.get("edge-txn.spec"))
                     for ct in c.containers.list(all=True, filters={"label": label})
                     if not ct.labels.get(label, "").startswith(TEST_DEPLOYMENT_PREFIX))
        nets = sorted((n.name, n.id) for n in c.networks.list()
                      if label in (n.attrs.get("Labels") or {})
                      and not n.attrs["Labels"][label].startswith(TEST_DEPLOYMENT_PREFIX))
        return cts, nets
    finally:
        c.close()


@pytest.fixture(scope="session", autouse=True)
def user_deployment_untouched():
    """A deployment the user has up (e.g. after `make main`) is exactly as it was after the whole suite: same
    containers (ids, state, start time, spec), same networks. Fails the session otherwise."""
    before = _user_deployments()
    yield
    if before is not None:
        after = _user_deployments()
        assert after == before, f"the test suite changed a user's deployment: before {before}, after {after}"


def seal_run(run_dir) -> None:
    """Complete a synthetic run folder the way a real run leaves one, so that it validates (testbed/analysis/validate.py):
    a state dump per replica of its deploy.yml, a records CSV (header only if missing) and a summary with
    n_records per client, summary.json's records total (when there is a summary), and files.json."""
    import json

    import yaml

    from testbed.analysis import results, validate
    run_dir = Path(run_dir)
    nodes = yaml.safe_load((run_dir / "deploy.yml").read_text())["nodes"]
    (run_dir / "servers").mkdir(exist_ok=True)
    (run_dir / "clients").mkdir(exist_ok=True)
    total = 0
    for n in nodes:
        if n["kind"] == "replica":
            dump = run_dir / "servers" / f"{n['name']}.state.json"
            if not dump.exists():
                dump.write_text(json.dumps({"node": n["name"], "shard": 0, "digest": "d", "workload": "tpcc"}))
        elif n["kind"] == "client":
            csv = run_dir / "clients" / f"{n['name']}.records.csv"
            if not csv.exists():
                csv.write_text(",".join(results.COLUMNS) + "\n")
            rows = len(csv.read_text().splitlines()) - 1
            total += rows
            summ = run_dir / "clients" / f"{n['name']}.summary.json"
            kept = json.loads(summ.read_text()) if summ.exists() else {}   # a test's own (open_loop, ...)
            summ.write_text(json.dumps({**kept, "n_records": rows}))
    summary = run_dir / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        data["records"] = total
        summary.write_text(json.dumps(data))
    validate.write_manifest(run_dir)


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
