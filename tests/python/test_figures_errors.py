"""genFigure / figures.draw on an unknown experiment or one without runs: one line, non-zero exit, no file
written; a sweep whose runs all failed is still drawn."""
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import genFigure
from testbed.analysis import figures
from test_figures import make_run, manifest

REPO = Path(__file__).resolve().parents[2]
NAMES = "n_clients, crt_ratio, tpca, scalability, robust, faults (or exp1..exp6)"


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("data-*"))


def genfigure(root: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "genFigure.py"), *args], cwd=root, capture_output=True,
                          text=True, timeout=120)


def test_unknown_experiment_one_line_no_pdf(tmp_path):
    (tmp_path / "results").mkdir()
    p = genfigure(tmp_path, "nosuch")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [f"genFigure: error: experiment 'nosuch': must be one of {NAMES}"]
    assert written(tmp_path) == []
    with pytest.raises(ValueError, match="experiment 'nosuch': must be one of"):
        genFigure.drawFig("nosuch", results=tmp_path)
    with pytest.raises(ValueError) as e:
        figures.draw("nosuch", root=tmp_path)
    assert not isinstance(e.value, figures.NoRuns)   # the sweep runner can tell the two apart
    assert written(tmp_path) == []


def test_a_bad_name_among_good_ones_draws_nothing(tmp_path):
    make_run(tmp_path / "results", exp="n_clients", x=2, key="a")
    p = genfigure(tmp_path, "n_clients", "exp9")
    assert p.returncode == 2 and p.stderr.splitlines() == [f"genFigure: error: experiment 'exp9': must be one of {NAMES}"]
    assert written(tmp_path) == []


@pytest.mark.parametrize("make_folder", [False, True], ids=["no-folder", "empty-folder"])
def test_experiment_without_runs_one_line_no_pdf(tmp_path, make_folder):
    if make_folder:   # e.g. a sweep interrupted before its first run ended: sweep.json and nothing else
        manifest(tmp_path / "results", "n_clients", [("k1", "dast", 2)])
    p = genfigure(tmp_path, "exp1")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == ["genFigure: error: no runs of n_clients under results/n_clients/ "
                                     "(run experiments/exp1_n_clients.py first)"]
    assert written(tmp_path) == []


def test_only_runs_of_another_configuration_is_no_runs(tmp_path):
    manifest(tmp_path, "n_clients", [("new", "dast", 2)])
    make_run(tmp_path, x=2, key="old")
    with pytest.raises(figures.NoRuns) as e:
        figures.draw("n_clients", root=tmp_path)
    assert isinstance(e.value, ValueError)   # entry points print ValueErrors as one line
    assert str(e.value) == (f"no runs of n_clients under {tmp_path}/n_clients/ belong to its current sweep "
                            "(sweep.json; the 1 run there is of another configuration); run experiments/exp1_n_clients.py")
    assert written(tmp_path) == []


def test_a_sweep_whose_runs_all_failed_is_drawn_as_failures(tmp_path):
    manifest(tmp_path / "results", "n_clients", [("k1", "dast", 2), ("k2", "dast", 4)])
    make_run(tmp_path / "results", x=2, key="k1", status="failed", error="container edge_r2_s2 exited (137)")
    make_run(tmp_path / "results", x=4, key="k2", check_code=1)
    p = genfigure(tmp_path, "n_clients")
    assert p.returncode == 0, p.stderr
    assert written(tmp_path) == ["results/data-n_clients.csv", "results/data-n_clients.pdf",
                                 "results/data-n_clients.png"]
    csv = pd.read_csv(tmp_path / "results" / "data-n_clients.csv")
    assert set(csv.status) == {"failed"} and csv["median"].isna().all()
    assert "container edge_r2_s2 exited (137)" in p.stdout



def test_a_tail_exp6_does_not_draw_is_refused(tmp_path):
    (tmp_path / "results").mkdir()
    p = genfigure(tmp_path, "faults", "--tail", "95")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == ["genFigure: error: --tail 95: exp 6 (faults) draws p99 over time, no other "
                                     "tail; draw it apart from the experiments --tail is for"]
