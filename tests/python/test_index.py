"""The results page (testbed/analysis/index.py, results/index.html) over fake run folders: every run listed with
relative links that resolve (also after the folder is moved), a failed run's reason shown, every text escaped, the
missing pieces said, nothing written for an empty folder; a sweep's end and `genFigure.py --index` write it; and
headless Chromium (Debian's package) renders it from the file system: a screenshot that is not blank, every figure
loaded."""
import html
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from testbed.analysis import claims, faultfig, figures, index, runs_table
from testbed.sweeps import runner

from conftest import REPO, seal_run
from test_faultfig import fault_run, stalled_then_back, steady
from test_figures import make_run, manifest
from test_runs_table import fake_sweep  # noqa: F401 (a fixture: a sweep of exp 1 with one failed point)

HOSTILE = '<script>alert("pwned")</script> & <img src=x onerror=alert(1)>'
FAILED_REASON = "server s0.0.1 exited with code 6: " + HOSTILE
ODD_LOG = 'odd <&> "name".log'   # a file name that needs escaping and percent-encoding


class Page(HTMLParser):
    """Every href and src, every id, every img, and the text of a page."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.links, self.ids, self.imgs, self.tags, self.text = [], set(), [], [], []
        self.in_style = False
        self.feed(text)

    def handle_starttag(self, name, attrs):
        a = dict(attrs)
        self.tags.append(name)
        self.in_style = name == "style"
        if "id" in a:
            self.ids.add(a["id"])
        for k in ("href", "src"):
            if k in a:
                self.links.append(a[k])
        if name == "img":
            self.imgs.append(a["src"])

    def handle_endtag(self, name):
        self.in_style = False

    def handle_data(self, data):
        if not self.in_style:
            self.text.append(data)

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


class Body(HTMLParser):
    """The data-imgs attribute of a dumped DOM's body (PROBE)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.imgs = None
        self.feed(text)

    def handle_starttag(self, name, attrs):
        if name == "body":
            self.imgs = dict(attrs).get("data-imgs")


def broken_links(root: Path, page: Page) -> list[str]:
    """Every href/src of the page that does not resolve: a fragment to no id, an absolute or networked URL, a path
    to nothing below root."""
    bad = []
    for ref in page.links:
        u = urlsplit(ref)
        if u.scheme or u.netloc or ref.startswith("/"):
            bad.append(f"{ref}: not relative")
        elif not u.path:
            if unquote(u.fragment) not in page.ids:
                bad.append(f"{ref}: no such id")
        else:
            target = (root / unquote(u.path)).resolve()
            if root.resolve() not in (target, *target.parents) or not target.exists():
                bad.append(f"{ref}: no such file below {root}")
    return bad


def build_results(root: Path) -> Path:
    """A results folder as sweeps leave it: exp 1 (DAST and Janus at two points, a failed one with a hostile reason,
    a run of an older configuration, its figure, claims.md), exp 6 (its figure and effect table), a run of no
    experiment, runs.parquet; its page written."""
    manifest(root, "n_clients", [("k1", "dast", 2), ("k2", "dast", 4), ("k3", "janus", 2), ("k4", "janus", 4)],
             systems={"dast": "run", "janus": "run"})
    make_run(root, system="dast", x=2, key="k1", busy=41.2, tput=120)
    d = make_run(root, system="dast", x=4, key="k2", status="failed", error=FAILED_REASON + "\nTraceback ...",
                 start="2024-01-01T00:00:02")
    make_run(root, system="janus", x=2, key="k3", busy=55.0, tput=80, start="2024-01-01T00:00:03")
    ok = make_run(root, system="janus", x=4, key="k4", busy=77.0, tput=90, start="2024-01-01T00:00:04")
    make_run(root, system="janus", x=4, key="old", start="2023-12-01T00:00:00")   # an earlier configuration
    (ok / "logs").mkdir()
    (ok / "logs" / "shard0.0.log").write_text("hello\n")
    (ok / ODD_LOG).write_text("a log beside the records\n")
    seal_run(ok)   # as a run ends: its logs are raw files too
    (d / "logs").mkdir()
    (d / "logs" / "shard0.0.log").write_text("s0.0.1 exited with code 6\n")
    seal_run(d)
    figures.draw("n_clients", root=root)
    claims.write(root)
    fault_run(root, "dast", 0, "none", {"c0.0.0": steady(0, 10, 50, 10)}, "f1")
    fault_run(root, "janus", 1, "partition", {"c0.0.0": stalled_then_back()}, "f2", region=1)
    fault_run(root, "janus", 2, "pause", {}, "f3", status="failed", error="RunError: replica s0.0.1 died")
    manifest(root, "faults", [("f1", "dast", 0), ("f2", "janus", 1), ("f3", "janus", 2)],
             systems={"dast": "run", "janus": "run"})
    faultfig.draw(root)
    make_run(root, exp="adhoc", system="dast", key="a1", run_id="20240101-000000-adhoc")   # run_local.py's kind
    runs_table.write(root)
    assert index.write(root) == root / index.FILE
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return build_results(tmp_path_factory.mktemp("results"))


def read(root: Path) -> tuple[str, Page]:
    text = (root / index.FILE).read_text()
    return text, Page(text)


def test_the_page_lists_every_run_with_links_that_resolve(site):
    text, page = read(site)
    assert broken_links(site, page) == []
    hrefs = {unquote(urlsplit(h).path) for h in page.links}
    for run_dir in runs_table.run_dirs(site):
        rel = run_dir.relative_to(site).as_posix()
        assert f"{rel}/" in hrefs, rel                          # the folder
        for f in ("summary.json", "check.json", "meta.json"):    # and its files, where it has them
            assert (f"{rel}/{f}" in hrefs) == (run_dir / f).is_file(), (rel, f)
        assert (f"{rel}/logs/" in hrefs) == (run_dir / "logs").is_dir(), rel
    ok = next(d for d in (site / "n_clients").iterdir() if d.name.endswith("janus-k4-0"))
    assert f"n_clients/{ok.name}/{ODD_LOG}" in hrefs                # a log file beside the records, by its name
    # the figures (linked to their PDFs), the effect table, the tables of every run, the other folder
    assert page.imgs == ["data-n_clients.png", "data-faults.png"]   # exp 1 before exp 6
    for f in ("data-n_clients.pdf", "data-faults.pdf", "data-faults.csv", "claims.md", "runs.csv", "runs.parquet",
              "adhoc/"):
        assert f in hrefs, f
    assert "script" not in page.tags and "<script" not in text.lower()   # no script, nothing from the network
    assert "http://" not in text and "https://" not in text


def test_the_page_shows_the_numbers_verdicts_and_why_a_point_failed(site):
    _, page = read(site)
    words = page.words
    assert FAILED_REASON in words                     # the failed run's reason, as text (escaped in the HTML)
    assert "Traceback" not in words                   # its one line only
    assert "CONSISTENT" in words and "host busy %" in words and "IRT p99" in words
    assert "DAST's p99 lower than each baseline's" in words        # claims.comparisons
    assert " 41 " in words and " 77 " in words        # each point's host busy share
    assert "1 run(s) of earlier sweeps or superseded repeats" in words
    assert "What each fault did" in words and "RunError: replica s0.0.1 died" in words
    for n in (2, 3, 4, 5):                            # the experiments with nothing yet are said
        assert f"no run or figure yet (experiments/exp{n}_" in words
    assert "Other run folders" in words and "adhoc/" in words


def test_every_text_is_escaped(site):
    text, page = read(site)
    assert HOSTILE not in text and "<img src=x" not in text
    assert html_escaped(HOSTILE) in text
    assert page.tags.count("img") == 2                # only the two figures: nothing the strings brought in
    assert sum(HOSTILE in t for t in page.text) >= 2  # in the point's table and in the run's row


def html_escaped(s: str) -> str:
    return html.escape(s, quote=True)


def test_the_links_still_resolve_after_the_folder_is_moved(site, tmp_path):
    moved = tmp_path / "elsewhere" / "copied-results"
    shutil.copytree(site, moved)
    _, page = read(moved)
    assert broken_links(moved, page) == []


def test_missing_pieces_are_said_and_an_empty_folder_gets_no_page(tmp_path):
    assert index.write(tmp_path) is None and not (tmp_path / index.FILE).exists()
    assert index.write(tmp_path / "nowhere") is None and not (tmp_path / "nowhere").exists()
    manifest(tmp_path, "n_clients", [("k1", "dast", 2), ("k2", "dast", 4)])
    make_run(tmp_path, x=2, key="k1")
    assert index.write(tmp_path) == tmp_path / index.FILE        # runs, no figure, no claims, no tables yet
    _, page = read(tmp_path)
    words = page.words
    assert "no figure yet (data-n_clients.png)" in words and page.imgs == []
    assert "claims.md: not written yet" in words and "runs.csv: not written yet" in words
    assert "not run" in words                                       # the declared point without a run
    assert broken_links(tmp_path, page) == []
    shutil.rmtree(tmp_path / "n_clients")                           # the runs gone: no page left linking them
    assert index.write(tmp_path) is None and not (tmp_path / index.FILE).exists()


def test_a_sweep_writes_the_page_at_its_end(tmp_path, fake_sweep, capsys):  # noqa: F811 (the fixture)
    assert runner.run_experiments(["n_clients"], fake_sweep, [], "run_experiments.py") == 1   # one run failed
    res = tmp_path / "res"
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == ("every figure, table and run on one page (open it in a browser): "
                                             f"{res / index.FILE}")
    _, page = read(res)
    assert page.imgs == ["data-n_clients.png"] and broken_links(res, page) == []
    assert "server s0.0.1 exited with code 6" in page.words


def test_a_page_that_cannot_be_written_is_one_warning_line(tmp_path, monkeypatch):
    make_run(tmp_path, x=2, key="k1")

    def full(path, text):
        from testbed.core import files
        raise files.disk_full(path, OSError(28, "No space left on device"))
    monkeypatch.setattr(index.files, "write_text", full)
    line = index.refresh(tmp_path)
    assert line.startswith(f"warning: {index.FILE} not written: cannot write {tmp_path / index.FILE}: no space left")
    assert len(line.splitlines()) == 1 and not (tmp_path / index.FILE).exists()


def test_genfigure_index_writes_the_page(tmp_path):
    manifest(tmp_path, "n_clients", [("k1", "dast", 2)])
    make_run(tmp_path, x=2, key="k1")
    p = subprocess.run([sys.executable, "genFigure.py", "n_clients", "--index", "--results", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert f"index: {tmp_path / index.FILE}" in p.stdout.splitlines()
    _, page = read(tmp_path)
    assert page.imgs == ["data-n_clients.png"] and broken_links(tmp_path, page) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    p = subprocess.run([sys.executable, "genFigure.py", "--index", "--results", str(empty)], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "index: no run folder or figure under" in p.stdout, p.stdout + p.stderr
    assert not (empty / index.FILE).exists()


# ---------------------------------------------------------------- in a browser: headless Chromium

CHROMIUM = shutil.which("chromium")
# nothing from the network: no first-run, sync, component or extension traffic, every host name unresolvable (and
# where it can, no network at all: offline())
NO_NETWORK = ["--no-first-run", "--no-default-browser-check", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-default-apps",
              "--host-resolver-rules=MAP * ~NOTFOUND"]
# the tail of each figure's image loading, read back from the DOM Chromium rendered (a copy of the page with this
# script; the page itself has none)
PROBE = ("<script>window.addEventListener('load', () => { document.body.setAttribute('data-imgs', JSON.stringify("
         "[...document.images].map(i => [i.getAttribute('src'), i.complete, i.naturalWidth, i.naturalHeight]))); "
         "});</script>")


def offline() -> list[str]:
    """`unshare -n`: a network namespace of its own with no interface up, where this user may make one (root), so
    that not even the probes Chromium makes at start (its IPv6 reachability check) leave the machine; else []."""
    if not shutil.which("unshare"):
        return []
    ok = subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    return ["unshare", "-n"] if ok else []


def chromium(tmp_path: Path, *args) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    env = {**os.environ, "HOME": str(tmp_path)}   # its caches and settings in the test's folder
    return subprocess.run([*offline(), CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={profile}", *NO_NETWORK, *args], capture_output=True, text=True,
                          timeout=180, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: chromium; scripts/setup.sh installs it "
                                             "for the tests)")
def test_chromium_renders_the_page_from_the_file_system(site, tmp_path):
    import numpy as np
    from PIL import Image

    shot = tmp_path / "index.png"
    p = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", (site / index.FILE).as_uri())
    assert p.returncode == 0 and shot.is_file(), p.stdout[-2000:] + p.stderr[-2000:]
    img = np.asarray(Image.open(shot).convert("RGB"))
    print(f"screenshot {shot}: {img.shape[1]}x{img.shape[0]}")
    assert img.shape[1] >= 1280 and img.shape[0] >= 2000
    colours = len(np.unique(img.reshape(-1, 3), axis=0))
    ink = (img.min(axis=2) < 235).mean()               # the share of pixels that are not white or near it
    assert colours > 50 and ink > 0.05, (colours, ink)
    # exp 1's figure is on the first screen: DAST's red (matplotlib's tab:red, 214, 39, 40) is drawn
    red = (np.abs(img.astype(int) - (214, 39, 40)).sum(axis=2) < 40).sum()
    assert red > 200, red

    # every figure loaded, as the rendered DOM says (a copy of the page with a probe, beside it so that its links
    # resolve the same), and every figure a PNG
    probe = site / "probe-index.html"
    probe.write_text((site / index.FILE).read_text().replace("</body>", PROBE + "</body>"))
    try:
        p = chromium(tmp_path, "--dump-dom", "--virtual-time-budget=10000", probe.as_uri())
    finally:
        probe.unlink()
    assert p.returncode == 0, p.stderr[-2000:]
    imgs = json.loads(Body(p.stdout).imgs or "null")
    assert [i[0] for i in imgs] == ["data-n_clients.png", "data-faults.png"]
    for src, complete, w, h in imgs:
        assert complete and w > 100 and h > 100, (src, complete, w, h)   # 0 x 0: not an image
        with Image.open(site / src) as f:   # and whole: a cut PNG still has its size in its header
            assert f.format == "PNG" and f.size == (w, h)
            f.load()


def test_the_heading_names_the_folder_unless_it_is_the_default(tmp_path):
    assert index._title(tmp_path / "results") == "Edge transaction testbed: results"
    assert index._title(tmp_path / "faults-jitter") == "Edge transaction testbed: results in faults-jitter/"
    text, _ = read(build_results(tmp_path / "mine"))
    assert "<title>Edge transaction testbed: results in mine/</title>" in text
    assert "<h1>Edge transaction testbed: results in mine/</h1>" in text
