"""`make test` runs pytest in workers (pytest-xdist): a Docker test file's tests run in one worker, one after the
other, the files at the same time, except the swarm's owners, which run alone; a file with a
module-scoped fixture must make it once, and everything else must spread (tests/python/conftest.py)."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

from conftest import REPO

DOCKER_TEST = """
import os, time, pytest
pytestmark = pytest.mark.docker
@pytest.mark.parametrize("i", range(3))
def test_d(i):
    t0 = time.time()
    time.sleep(0.4)
    with open(os.environ["TIMES"], "a") as f:
        f.write(f"{os.path.basename(__file__)} {t0} {time.time()}\\n")
"""
SHARED_TEST = """
import time, pytest
@pytest.fixture(scope="module")
def booted():
    return 1
@pytest.mark.parametrize("i", range(4))
def test_s(i, booted):
    time.sleep(0.05)
"""
PLAIN_TEST = """
import time, pytest
@pytest.mark.parametrize("i", range(12))
def test_p(i):
    time.sleep(0.1)
"""


def _suite(tmp_path, files: dict) -> None:
    d = tmp_path / "tests" / "python"
    d.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "python" / "conftest.py", d)
    for name, text in files.items():
        (d / name).write_text(textwrap.dedent(text))
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests/python\nmarkers =\n    docker: d\n")


def _run(tmp_path, *args):
    # no Docker daemon for the suite's own (so no swarm is made or left), and a swarm lock of its own
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "TIMES": str(tmp_path / "times"),
           "EDGE_TXN_TESTS_SWARM_LOCK": str(tmp_path / "swarm.lock")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)


def test_docker_files_run_at_once_but_not_with_the_swarms_owners_a_module_fixture_is_made_once_the_rest_spreads(
        tmp_path):
    # the rehearsal and the swarm tests own the swarm (conftest.py SWARM_OWNERS): one unit, alone, first
    owners = {"test_rehearsal_docker.py": DOCKER_TEST, "test_swarm_docker.py": DOCKER_TEST.replace("test_d", "test_o")}
    _suite(tmp_path, {**owners, "test_a_docker.py": DOCKER_TEST, "test_b_docker.py": DOCKER_TEST.replace("test_d", "test_e"),
                      "test_shared.py": SHARED_TEST, "test_plain.py": PLAIN_TEST})
    p = _run(tmp_path, "-n", "auto", "-v")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert f"created: {os.cpu_count() + 3}/{os.cpu_count() + 3} workers" in p.stdout   # a core each, 3 Docker units
    where = {}   # file -> the workers that ran its tests
    for worker, path in re.findall(r"\[(gw\d)\] .*?PASSED (\S+?)::", p.stdout):
        where.setdefault(path.rsplit("/", 1)[-1], set()).add(worker)
    assert set(where) == {*owners, "test_a_docker.py", "test_b_docker.py", "test_shared.py", "test_plain.py"}
    assert len(where["test_rehearsal_docker.py"] | where["test_swarm_docker.py"]) == 1, where
    assert len(where["test_a_docker.py"]) == len(where["test_b_docker.py"]) == 1, where
    assert where["test_a_docker.py"] != where["test_b_docker.py"], where
    assert len(where["test_shared.py"]) == 1, where
    assert len(where["test_plain.py"]) > 1, where
    spans = {}   # file -> (first start, last end)
    for line in (tmp_path / "times").read_text().splitlines():
        f, t0, t1 = line.split()
        a, b = spans.get(f, (float("inf"), 0))
        spans[f] = (min(a, float(t0)), max(b, float(t1)))
    owned = (min(spans[f][0] for f in owners), max(spans[f][1] for f in owners))
    a, b = spans["test_a_docker.py"], spans["test_b_docker.py"]
    for f in (a, b):   # nothing else on Docker while the owners run (who starts first is the lock's race)
        assert f[1] <= owned[0] or f[0] >= owned[1], spans
    assert a[0] < b[1] and b[0] < a[1], spans         # the other Docker files at the same time


def test_a_docker_test_outside_a_docker_file_is_refused_by_name(tmp_path):
    _suite(tmp_path, {"test_stray.py": DOCKER_TEST})
    p = _run(tmp_path, "-q")
    assert p.returncode == 4, p.stdout[-2000:] + p.stderr[-2000:]
    assert "marked docker but not in a *_docker.py file" in p.stdout + p.stderr
    assert "test_stray.py::test_d[0]" in p.stdout + p.stderr
