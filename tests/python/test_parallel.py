"""`make test` runs pytest in workers (pytest-xdist): the Docker tests must stay together in one worker, a file with
a module-scoped fixture must make it once, and everything else must spread (tests/python/conftest.py)."""
import re
import shutil
import subprocess
import sys
import textwrap

from conftest import REPO

DOCKER_TEST = """
import os, time, pytest
pytestmark = pytest.mark.docker
@pytest.mark.parametrize("i", range(4))
def test_d(i):
    time.sleep(0.05)
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
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_docker_tests_share_one_worker_a_module_fixture_is_made_once_and_the_rest_spreads(tmp_path):
    _suite(tmp_path, {"test_a_docker.py": DOCKER_TEST, "test_b_docker.py": DOCKER_TEST.replace("test_d", "test_e"),
                      "test_shared.py": SHARED_TEST, "test_plain.py": PLAIN_TEST})
    p = _run(tmp_path, "-n", "2", "-v")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    where = {}   # file -> the workers that ran its tests
    for worker, path in re.findall(r"\[(gw\d)\] .*?PASSED (\S+?)::", p.stdout):
        where.setdefault(path.rsplit("/", 1)[-1], set()).add(worker)
    assert set(where) == {"test_a_docker.py", "test_b_docker.py", "test_shared.py", "test_plain.py"}, p.stdout
    assert len(where["test_a_docker.py"] | where["test_b_docker.py"]) == 1, where
    assert len(where["test_shared.py"]) == 1, where
    assert where["test_plain.py"] == {"gw0", "gw1"}, where


def test_a_docker_test_outside_a_docker_file_is_refused_by_name(tmp_path):
    _suite(tmp_path, {"test_stray.py": DOCKER_TEST})
    p = _run(tmp_path, "-q")
    assert p.returncode == 4, p.stdout[-2000:] + p.stderr[-2000:]
    assert "marked docker but not in a *_docker.py file" in p.stdout + p.stderr
    assert "test_stray.py::test_d[0]" in p.stdout + p.stderr
