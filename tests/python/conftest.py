import os
import re
import subprocess
import sys
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
    """Builds the image exactly as a user would (docker/build_image.sh; cached layers make reruns quick)."""
    p = subprocess.run(["bash", str(REPO / "docker" / "build_image.sh"), IMAGE], cwd=REPO, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(p.stdout[-3000:])
    assert p.returncode == 0, p.stdout[-3000:]
    assert "build_image: built" in p.stdout
    return IMAGE


# `make test` runs the tests in parallel workers (pytest-xdist, `-n auto`). The Docker tests share the one daemon,
# swarm and image (and some a deployment), so every test of a *_docker.py file goes to one worker, one after the
# other, in file order; being the largest group (about 6 of the suite's 13 serial minutes) they are handed out first.
# A file with a module-scoped fixture is a unit too. Every other test is a unit of its own: it shares nothing (its
# own tmp_path; ports reserved machine-wide, testbed/core/deploy.py allocate_ports). (xdist's own `--dist loadgroup`
# does not group under pytest 9: it renames item._nodeid, which pytest 9 no longer reads.)
DOCKER_FILES = "_docker.py"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """The Docker tests as one unit; a file with a module-scoped fixture (a VM booted, a run made once for all its
    tests) as one unit, so that the fixture is made once, not in every worker; every other test a unit of its own."""
    from xdist.scheduler import LoadScopeScheduling
    here = Path(__file__).parent
    shared = {f"{here.relative_to(config.rootpath)}/{f.name}" for f in here.glob("test_*.py")
              if re.search(r"fixture\(scope=.module", f.read_text())}

    class SharingTestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return "docker" if path.endswith(DOCKER_FILES) else path if path in shared else nodeid
    return SharingTestsTogether(config, log)


def pytest_collection_modifyitems(config, items):
    """A Docker test outside a *_docker.py file would run beside the others in parallel: refused by name."""
    stray = [i.nodeid for i in items if i.get_closest_marker("docker") and not i.path.name.endswith(DOCKER_FILES)]
    if stray:
        raise pytest.UsageError(f"marked docker but not in a *{DOCKER_FILES} file (tests/python/conftest.py): "
                                + ", ".join(stray[:5]))

# the signals a test sends its child job: the child starts with each at its default action, as from a terminal,
# whatever this pytest inherited (`nohup make test`: SIGHUP ignored; `make test &` from a script: SIGINT and SIGQUIT
# ignored), so the test sets up the signal state it tests instead of inheriting it. Use as Popen(preexec_fn=...).
TERMINAL_SIGNALS = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM")


def signals_as_from_a_terminal() -> None:
    import signal
    for name in TERMINAL_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


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
