"""A full disk (issue 50): one line naming the path and the space left, figures and tables written whole or not at
all (the last good one kept), and a run's recorded reason carrying the engine's own error line."""
import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import genFigure
from conftest import REPO
from test_figures import make_run
from testbed.analysis import rundirs
from testbed.core import deploy, files
from testbed.core.runtypes import RunError

ENGINE = Path(os.environ.get("TXN_SERVER") or REPO / "build" / "txn-server")


def _full(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_file_written_on_a_full_disk_keeps_the_old_one_and_says_where_and_how_much_room(tmp_path):
    path = tmp_path / "data-n_clients.csv"
    path.write_text("the last good table\n")
    with pytest.raises(files.DiskFull) as e:
        with files.replacing(path) as tmp:
            tmp.write_text("half of a new one")
            _full()
    line = str(e.value)
    assert line.startswith(f"cannot write {path}: no space left on device (") and " free of " in line, line
    assert f" on {tmp_path.resolve()})" in line and "\n" not in line
    assert path.read_text() == "the last good table\n"
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "no temporary file left behind"
    files.write_text(path, "a new one\n")
    assert path.read_text() == "a new one\n"


def test_a_figure_drawn_on_a_full_disk_keeps_the_last_one_in_one_line(tmp_path, monkeypatch, capsys):
    from matplotlib.figure import Figure
    make_run(tmp_path, x=2, key="a")
    assert genFigure.main(["n_clients", "--results", str(tmp_path)]) == 0
    pdf, csv = tmp_path / "data-n_clients.pdf", tmp_path / "data-n_clients.csv"
    before = pdf.read_bytes(), csv.read_bytes()
    assert before[0].startswith(b"%PDF")
    capsys.readouterr()
    monkeypatch.setattr(Figure, "savefig", _full)
    assert genFigure.main(["n_clients", "--results", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"genFigure: error: cannot write {pdf}: no space left on device ("), err
    assert (pdf.read_bytes(), csv.read_bytes()) == before, "the last figure and table are untouched"
    assert not list(tmp_path.glob(".*.tmp*"))


@pytest.fixture
def small_disk(tmp_path):
    """A 600 KiB tmpfs (root only; skipped where mounting is not allowed): room for a run's start, not its end."""
    where = tmp_path / "small"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.slow
@pytest.mark.skipif(not ENGINE.exists(), reason="txn-server not built")
def test_a_run_that_fills_its_disk_records_the_engines_own_error_line(small_disk):
    from testbed.runs.local import LocalRunner
    d = deploy.build_deployment(regions=3, shards=2, duration=4, warmup=1, cooldown=1, base_port=27600)
    with pytest.raises(RunError) as e:
        LocalRunner(build_dir=ENGINE.parent, progress=False).run(d, "full", out_root=small_disk)
    reason = str(e.value)
    assert "\n" not in reason
    assert ": txn-server: error: cannot write " in reason or ": txn-client: error: cannot write " in reason, reason
    assert " free of 600.0 KiB on " in reason, reason
    status, recorded = rundirs.run_outcome(e.value.run_dir)
    assert status == "failed" and recorded == reason, recorded
    assert shutil.disk_usage(small_disk).free < 64 * 1024
