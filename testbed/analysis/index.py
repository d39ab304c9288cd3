"""results/index.html: a results folder on one static page, to open from the file system (no server, no network, no
script).

    write(root="results") -> Path of root/index.html (None, and no page, when root has no run and no figure)
    refresh(root) -> one line saying where the page is (a sweep's end; a failure to write it is a warning line)

The page, from the same data the figures, results/claims.md and results/runs.parquet are made of:
  - a header: when it was written, the code versions (meta.json `git_sha`) of the runs the figures draw, links to
    claims.md, runs.csv and runs.parquet, and every experiment (present or not yet run);
  - per experiment, in the order of their numbers: its figure (data-<name>.png, linked to its PDF, its CSV beside
    it), the sweep (sweep.json), per point and protocol the figure's numbers (claims.points: throughput, IRT and CRT
    median and tail, the host's busy share, the counter that explains the tail), the checker's verdicts of its runs,
    its status and why a point failed; DAST's tails beside each baseline's (claims.comparisons); exp 6 (faults): its
    effect table (data-faults.csv) instead, with each run's verdict and host busy share;
  - per experiment, every run the figure draws (runs_table.runs: the same status and reason as the figures) with
    links to its folder, summary.json, check.json, meta.json, ... and its logs; the runs of earlier sweeps folded
    below them;
  - run folders that belong to no experiment (run_local.py's, a nested results folder such as results/smoke/,
    whose own index.html is linked).
Every link is relative to root, so the folder can be moved or copied whole; every text is escaped. What is missing
(no figure yet, no run of the current sweep, no claims) is said where it would be.
"""
from __future__ import annotations

import html
import math
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from testbed.analysis import claims, figures, runs_table
from testbed.analysis.rundirs import read_json
from testbed.core import experiments, files, variants

FILE = "index.html"
FAULTS = "faults"
# a run folder's files the page links, as (file, label), when they exist; then its logs
RUN_FILES = (("summary.json", "summary"), ("check.json", "check"), ("meta.json", "meta"), ("config.json", "config"),
             ("deploy.yml", "deploy"), ("faults.json", "faults"), ("timeseries.csv", "series"))

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1b1b1b;
       background: #fff; margin: 0 auto; max-width: 1500px; padding: 0 1.2em 3em; }
h1 { margin: .7em 0 .2em; font-size: 1.7em; }
h2 { margin-top: 2.2em; padding-bottom: .2em; border-bottom: 2px solid #d9dde3; }
h3 { margin: 1.4em 0 .3em; font-size: 1.08em; }
a { color: #0b57b0; }
.sub { color: #555; }
nav ol { margin: .3em 0; padding-left: 1.4em; }
nav li.none { color: #777; }
figure { margin: .8em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #d9dde3; }
figcaption { color: #555; font-size: .9em; }
.missing { color: #6b4a00; background: #fff8e6; border-left: 4px solid #e0a800; padding: .35em .7em; }
div.scroll { overflow-x: auto; margin: .5em 0 1em; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #d0d4da; padding: 3px 7px; text-align: right; vertical-align: top; }
td { white-space: nowrap; }
th { background: #eef1f5; }
th.t, td.t { text-align: left; }
td.reason, td.wrap { text-align: left; white-space: normal; }
td.reason { min-width: 12em; max-width: 38em; }
td.wrap { min-width: 15em; }
tr.failed td, tr.interrupted td { background: #fdeaea; }
tr.partial td { background: #fff4dc; }
tr.notrun td { color: #777; background: #f7f7f7; }
.ok { color: #11702c; font-weight: 600; }
.bad { color: #b3261e; font-weight: 600; }
.warn { color: #8a5a00; font-weight: 600; }
.files a { margin-right: .5em; white-space: nowrap; }
details { margin: .4em 0 1em; }
summary { cursor: pointer; color: #0b57b0; }
""".strip()


# ---------------------------------------------------------------- HTML pieces (every text escaped once)

class Html(str):
    """Text that is HTML already (built here from escaped parts): esc() leaves it as it is. Only another Html can be
    added to it (a plain text is join()ed, which escapes it): `+` never lets an unescaped text in, nor escapes HTML."""

    def __add__(self, other):
        return Html(str.__add__(self, other)) if isinstance(other, Html) else NotImplemented

    def __radd__(self, other):
        return Html(str.__add__(other, self)) if isinstance(other, Html) else NotImplemented


def esc(v) -> Html:
    return v if isinstance(v, Html) else Html(html.escape("" if _missing(v) else str(v), quote=True))


def url(rel: str) -> str:
    """A relative URL of a path below root (posix), each part percent-encoded; a '#fragment' is kept."""
    path, hash_, frag = rel.partition("#")
    return quote(path, safe="/") + (hash_ + quote(frag, safe="") if hash_ else "")


def link(rel: str, text, title: str | None = None) -> Html:
    t = f' title="{esc(title)}"' if title else ""
    return Html(f'<a href="{esc(url(rel))}"{t}>{esc(text)}</a>')


def tag(name: str, content, cls: str | None = None, **attrs) -> Html:
    a = (f' class="{esc(cls)}"' if cls else "") + "".join(f' {k}="{esc(v)}"' for k, v in attrs.items())
    return Html(f"<{name}{a}>{esc(content)}</{name}>")


def join(parts, sep="") -> Html:
    return Html(esc(sep).join(esc(p) for p in parts))


def table(headers, rows, left=(), row_classes=None, row_ids=None, cell_classes=None) -> Html:
    """An HTML table: headers (text), rows of cells (text or Html); `left`: the columns aligned left."""
    def cls(i, extra=None):
        c = " ".join(x for x in ("t" if i in left else "", extra or "") if x)
        return f' class="{c}"' if c else ""
    head = "".join(f"<th{cls(i)}>{esc(h)}</th>" for i, h in enumerate(headers))
    out = ['<div class="scroll"><table>', f"<thead><tr>{head}</tr></thead>", "<tbody>"]
    for k, row in enumerate(rows):
        rc = row_classes[k] if row_classes else ""
        rid = row_ids[k] if row_ids else ""
        attrs = (f' class="{esc(rc)}"' if rc else "") + (f' id="{esc(rid)}"' if rid else "")
        out.append(f"<tr{attrs}>" + "".join(
            f"<td{cls(i, (cell_classes or {}).get(i))}>{esc(c)}</td>" for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table></div>")
    return Html("\n".join(out))


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def num(v, nd=1) -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(v) else f"{v:,.{nd}f}"


def text(v) -> str:
    return "" if _missing(v) else str(v)


def status_cell(status: str) -> Html:
    cls = {"ok": "ok", "partial": "warn", "not run": "warn"}.get(status, "bad")
    return tag("span", status, cls)


def row_class(status: str) -> str:
    return {"ok": "", "not run": "notrun"}.get(status, status)


def anchor(run_dir: str) -> str:
    return "run-" + re.sub(r"[^A-Za-z0-9_.-]", "-", run_dir)


def missing(what: str) -> Html:
    return tag("p", what, "missing")


# ---------------------------------------------------------------- the page's parts

def _figure(root: Path, name: str, title: str) -> Html:
    png, pdf, csv = (root / f"data-{name}.{ext}" for ext in ("png", "pdf", "csv"))
    if not png.is_file():
        what = f"no figure yet (data-{name}.png): `genFigure.py {name}` draws it from the run folders"
        if pdf.is_file():
            return tag("p", join([what, "; its PDF is there: ", link(pdf.name, pdf.name)]), "missing")
        return missing(what)
    img = Html(f'<img src="{esc(url(png.name))}" alt="{esc(title)}">')
    pic = Html(f'<a href="{esc(url(pdf.name))}">{img}</a>') if pdf.is_file() else img
    also = join([link(p.name, p.name) for p in (pdf, png, csv) if p.is_file()], " · ")
    note = " (click the figure for its PDF)" if pdf.is_file() else ""
    return join([Html("<figure>"), pic, tag("figcaption", join(["files: ", also, note])), Html("</figure>")])


def _sweep_line(root: Path, name: str) -> Html:
    m = read_json(root / name / figures.MANIFEST)
    if not m:
        return tag("p", f"no {figures.MANIFEST}: the figure draws the newest configuration of each point", "sub")
    systems = m.get("systems") or {}
    said = ", ".join(f"{figures.line_name(s)}" + ("" if v == "run" else f" ({v})") for s, v in systems.items())
    parts = [f"current sweep ({figures.MANIFEST})" + (f" written {m['written']}" if m.get("written") else ""),
             f"{len(m.get('points') or [])} points", f"{m.get('n_repeat', 1)} repeat(s)"]
    parts += [f"{said} {m[k]}" for k, said in (("backend", "backend"), ("mechanism", "shaping")) if m.get(k)]
    if m.get("quick"):
        parts.append("--quick preset")
    if said:
        parts.append(f"protocols: {said}")
    return tag("p", "; ".join(parts), "sub")


def _run_link(runs_in_page: set, name: str, run_id: str) -> Html:
    rd = f"{name}/{run_id}"
    return link(f"#{anchor(rd)}", run_id) if rd in runs_in_page else link(rd + "/", run_id)


def _verdicts(runs: pd.DataFrame) -> str:
    """'CONSISTENT x3' of a point's runs (their check.json verdicts), 'no check.json' for those without one."""
    said = Counter("no check.json" if _missing(v) else str(v) for v in runs.verdict)
    return ", ".join(f"{v}" + (f" x{n}" if n > 1 else "") for v, n in said.items()) or "-"


def _points(root: Path, name: str, runs: pd.DataFrame, in_page: set) -> Html:
    """The figure's numbers per point and protocol (claims.points), with verdicts, and DAST against the baselines."""
    try:
        got = claims.points(root, name)
    except (OSError, ValueError, KeyError) as e:
        return missing(f"the points could not be read: {type(e).__name__}: {e}".splitlines()[0])
    if got is None:
        return missing("no run of its current sweep yet: no numbers")
    agg, tail = got
    t = f"p{tail:g}"
    current = runs[runs.current] if len(runs) else runs
    rows, classes = [], []
    for r in agg.sort_values(["x"], kind="stable").itertuples():
        protocol = variants.protocol_of(r.system)
        why = "-" if _missing(r.why) else f"{num(r.why, 2 if protocol == 'tapir' else 1)} " \
                                          f"{claims.WHY_TEXT.get(protocol, '')}"
        mine = current[current.point_key == r.point_key] if len(current) else current
        ids = [i for i in str(r.run_ids or "").split() if i]
        rows.append([figures._xfmt(r.x), r.line, status_cell(r.status), f"{r.repeats_ok}/{r.repeats_failed}",
                     num(r.throughput_tps_median), num(r.irt_p50_ms_median), num(r.irt_tail_ms_median),
                     num(r.crt_p50_ms_median), num(r.crt_tail_ms_median), num(r.busy_pct_max, 0), why,
                     _verdicts(mine) if len(mine) else "-", join([_run_link(in_page, name, i) for i in ids], " "),
                     text(r.reasons)])
        classes.append(row_class(r.status))
    out = [tag("h3", f"Per point and protocol (medians over the ok repeats; latencies in ms; host busy: the busiest "
                     "repeat)"),
           table(["x", "protocol", "status", "ok/failed", "txn/s", "IRT p50", f"IRT {t}", "CRT p50", f"CRT {t}",
                  "host busy %", "why (counter)", "verdicts", "runs", "why it failed"], rows,
                 left=(1, 2, 10, 11, 12, 13), row_classes=classes, cell_classes={13: "reason"})]
    unkept = figures.unkept_points(agg)
    if unkept:
        out.append(tag("p", "Open load NOT kept up with (the share of arrivals shed or never sent; the latencies are "
                            "of what was run): " + ", ".join(unkept) + ".", "warn"))
    hot = figures.hot_points(agg)
    if hot:
        out.append(tag("p", f"Host CPU more than {figures.CPU_BUSY_WARN_PCT} % busy (tails there include waiting "
                            "for a core): " + ", ".join(hot) + ".", "warn"))
    cmp = claims.comparisons(agg)
    if cmp:
        xs = sorted({c["x"] for c in cmp})
        crows = []
        for b in claims.baselines(agg):
            mine = {c["x"]: c for c in cmp if c["baseline"] == b}
            if mine:
                crows.append([next(iter(mine.values()))["line"]] + [
                    f"{num(mine[x]['irt'])} / {num(mine[x]['crt'])}" if x in mine else "-" for x in xs])
        out += [tag("h3", f"DAST's {t} lower than each baseline's by (%, IRT / CRT; negative: higher). The DAST paper: "
                          f"IRT {claims.PAPER['irt'][0]}-{claims.PAPER['irt'][1]} %, CRT {claims.PAPER['crt'][0]}-"
                          f"{claims.PAPER['crt'][1]} %"),
                table(["baseline"] + [f"x = {figures._xfmt(x)}" for x in xs], crows, left=(0,))]
    return join(out, "\n")


def _fault_table(root: Path, runs: pd.DataFrame, in_page: set) -> Html:
    """Exp 6's effect table (data-faults.csv) with each run's verdict and host busy share."""
    csv = root / f"data-{FAULTS}.csv"
    if not csv.is_file():
        return missing(f"no effect table yet ({csv.name}): `genFigure.py {FAULTS}` writes it with the figure")
    try:
        t = pd.read_csv(csv, dtype={"run_id": str, "reason": str, "fault": str, "system": str, "status": str})
    except (OSError, ValueError) as e:
        return missing(f"{csv.name} could not be read: {type(e).__name__}: {e}".splitlines()[0])
    by_id = {r.run_id: r for r in runs.itertuples()} if len(runs) else {}
    rows, classes = [], []
    for r in t.itertuples():
        run = by_id.get(text(getattr(r, "run_id", "")))
        recovery = getattr(r, "recovery_s", math.nan)
        if r.status == "ok" and not _missing(getattr(r, "window_start_s", math.nan)) and _missing(recovery):
            back = "not within the run"
        else:
            back = num(recovery)
        rows.append([text(r.fault), figures.line_name(text(r.system)), status_cell(text(r.status)),
                     f"{num(r.tput_before, 0)} / {num(r.tput_during, 0)} / {num(r.tput_after, 0)}",
                     f"{num(r.irt_p99_before_ms)} / {num(r.irt_p99_during_ms)} / {num(r.irt_p99_after_ms)}",
                     f"{num(r.crt_p99_before_ms)} / {num(r.crt_p99_during_ms)} / {num(r.crt_p99_after_ms)}",
                     num(r.stalled_s, 0), back, num(getattr(r, "caught_up_after_s", math.nan), 2),
                     num(run.busy_pct, 0) if run is not None else "-",
                     (text(run.verdict) or "no check.json") if run is not None else "-",
                     _run_link(in_page, FAULTS, text(r.run_id)) if text(r.run_id) else "-", text(r.reason)])
        classes.append(row_class(text(r.status)))
    return join([tag("h3", f"What each fault did, in the regions it did not touch ({csv.name}; before / during / "
                           "after the fault window; latencies in ms)"),
                 table(["fault", "protocol", "status", "txn/s", "IRT p99", "CRT p99", "nothing committed (s)",
                        "back after the heal (s)", "restarted replica caught up after (s)", "host busy %", "verdict",
                        "run", "why it failed"], rows, left=(0, 1, 2, 10, 11, 12), row_classes=classes,
                       cell_classes={12: "reason"})], "\n")


def _run_files(root: Path, run_dir: str) -> Html:
    d = root / run_dir
    out = [link(f"{run_dir}/", "folder")]
    out += [link(f"{run_dir}/{f}", label) for f, label in RUN_FILES if (d / f).is_file()]
    logs = sorted((d / "logs").glob("*.log")) if (d / "logs").is_dir() else []
    if (d / "logs").is_dir():
        out.append(link(f"{run_dir}/logs/", f"logs ({len(logs)})", title=", ".join(p.name for p in logs)))
    out += [link(f"{run_dir}/{p.name}", p.name) for p in sorted(d.glob("*.log"))]
    absent = [f for f in ("summary.json", "check.json") if not (d / f).is_file()]
    if absent:
        out.append(tag("span", f"no {', '.join(absent)}", "sub"))
    return Html(f'<span class="files">{join(out, " ")}</span>')


def _runs_table(root: Path, runs: pd.DataFrame) -> Html:
    rows, classes, ids = [], [], []
    for r in runs.itertuples():
        series = text(r.series)
        point = text(r.point_label) or (f"{r.x:g} {text(r.x_unit)}".strip() if not _missing(r.x) else "-")
        started = f"started {text(r.start_time)}" if text(r.start_time) else None
        rows.append([link(f"{r.run_dir}/", r.run_id, title=started), figures.line_name(text(r.system) or "?", series)
                     if text(r.system) else "-", point, "-" if _missing(r.repeat) else f"{int(r.repeat)}",
                     status_cell(text(r.status)), text(r.verdict) or "-", num(r.all_throughput_tps),
                     num(r.irt_p99_ms), num(r.crt_p99_ms), num(r.busy_pct, 0), _run_files(root, r.run_dir),
                     text(r.reason)])
        classes.append(row_class(text(r.status)))
        ids.append(anchor(r.run_dir))
    return table(["run", "protocol", "point", "repeat", "status", "verdict", "txn/s", "IRT p99", "CRT p99",
                  "host busy %", "files", "why it failed"], rows, left=(0, 1, 2, 4, 5, 10, 11), row_classes=classes,
                 row_ids=ids, cell_classes={10: "wrap", 11: "reason"})


def _runs(root: Path, runs: pd.DataFrame, what: str) -> Html:
    """The runs the figure draws, then the earlier ones folded."""
    if runs.empty:
        return missing(f"no run folder of {what} yet")
    cur, old = runs[runs.current], runs[~runs.current]
    out = [tag("h3", f"The runs its figure draws ({len(cur)}; each run's summary.json: nearest-rank over the "
                     "measurement window, latencies in ms; txn/s: all classes)")]
    out.append(_runs_table(root, cur) if len(cur) else missing("none of its run folders is of the current sweep"))
    if len(old):
        out.append(Html(f"<details><summary>{esc(f'{len(old)} run(s) of earlier sweeps or superseded repeats')}"
                        f"</summary>\n{_runs_table(root, old)}\n</details>"))
    return join(out, "\n")


def _experiment(root: Path, exp: experiments.Experiment, runs: pd.DataFrame) -> Html:
    in_page = set(runs.run_dir) if len(runs) else set()
    out = [Html(f'<section id="exp-{esc(exp.name)}">'),
           tag("h2", f"{exp.title}"),
           tag("p", join([f"{exp.script()}; x = {exp.x_label.replace('{inter}', 'the mean')}; run folders: ",
                          link(f"{exp.name}/", f"{exp.name}/")]), "sub"),
           _figure(root, exp.name, exp.title), _sweep_line(root, exp.name)]
    out.append(_fault_table(root, runs, in_page) if exp.name == FAULTS else _points(root, exp.name, runs, in_page))
    out.append(_runs(root, runs, exp.title))
    out.append(Html("</section>"))
    return join(out, "\n")


def _others(root: Path, runs: pd.DataFrame) -> Html:
    """Run folders of no experiment: grouped by their folder; a nested results folder's own page linked."""
    out = [Html('<section id="other-runs">'), tag("h2", "Other run folders")]
    for name, g in runs.groupby("name", sort=True):
        top = name.split("/")[0]
        nested = root / top / FILE
        head = [tag("h3", join([link(f"{name}/", f"{name}/"), f": {len(g)} run(s)"]))]
        if nested.is_file():
            head.append(tag("p", join([f"{top}/ has a page of its own: ", link(f"{top}/{FILE}", f"{top}/{FILE}")])))
        out += head + [Html(f"<details><summary>{esc(f'{len(g)} run(s)')}</summary>\n"
                            f"{_runs_table(root, g.assign(current=True))}\n</details>")]
    out.append(Html("</section>"))
    return join(out, "\n")


def _title(root: Path) -> str:
    """The page's heading: the results folder's name, unless it is the default's ("Results: results" says nothing)."""
    name = root.resolve().name or str(root)
    return "Edge transaction testbed: results" if name == "results" else f"Edge transaction testbed: results in {name}/"


def _header(root: Path, runs: pd.DataFrame, present: list) -> Html:
    now = datetime.now().astimezone().isoformat(timespec="seconds")
    out = [tag("h1", _title(root)),
           tag("p", f"Written {now} from the run folders of this results folder (testbed/analysis/index.py; "
                    "`genFigure.py --index` writes it again). Every link is relative: the folder can be moved or "
                    "copied whole.", "sub")]
    shas = Counter(text(s) for s in (runs[runs.current].git_sha if len(runs) else []) if text(s))
    if shas:
        out.append(tag("p", "Code version of the runs the figures draw: " + ", ".join(
            f"{s[:12]}{s[40:]} ({n} run{'s' if n != 1 else ''})" for s, n in shas.most_common())))
    tables = []
    for f, what in ((claims.FILE, "every experiment's numbers beside the paper's claims"),
                    (runs_table.CSV, "every run as one table"), (runs_table.PARQUET, "the same, for pandas")):
        tables.append(join([link(f, f), f" ({what})"]) if (root / f).is_file() else f"{f}: not written yet")
    out.append(tag("p", join(["Tables: "] + [join(tables, "; ")])))
    items = []
    for exp in sorted(experiments.EXPERIMENTS.values(), key=lambda e: e.number):
        if exp.name in present:
            items.append(tag("li", link(f"#exp-{exp.name}", exp.title)))
        else:
            items.append(tag("li", f"{exp.title}: no run or figure yet ({exp.script()})", "none"))
    out.append(Html(f"<nav><ol>{join(items)}</ol></nav>"))
    return join(out, "\n")


def render(root="results") -> str | None:
    """The page (see the module doc); None when root has no run folder and no figure."""
    root = Path(root)
    if not root.is_dir():
        return None
    runs = runs_table.runs(root)
    names = set(runs.name) if len(runs) else set()
    exps = sorted(experiments.EXPERIMENTS.values(), key=lambda e: e.number)
    present = [e.name for e in exps if e.name in names or any(
        (root / f"data-{e.name}.{ext}").is_file() for ext in ("png", "pdf"))]
    others = runs[~runs.name.isin(experiments.EXPERIMENTS)] if len(runs) else runs
    if not present and others.empty:
        return None
    body = [_header(root, runs, present)]
    for exp in exps:
        if exp.name in present:
            body.append(_experiment(root, exp, runs[runs.name == exp.name] if len(runs) else runs))
    if len(others):
        body.append(_others(root, others))
    title = _title(root)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{esc(title)}</title>\n'
            f"<style>\n{CSS}\n</style>\n</head>\n<body>\n{join(body, chr(10))}\n</body>\n</html>\n")


def write(root="results") -> Path | None:
    """root/index.html (render()); None when root has no run folder and no figure, and then a page left from
    earlier runs is removed (it would link folders that are gone). Whole or not at all (files.write_text; a full disk
    is DiskFull, one line)."""
    root = Path(root)
    page = render(root)
    if page is None:
        if root.is_dir():
            (root / FILE).unlink(missing_ok=True)
        return None
    return files.write_text(root / FILE, page)


def refresh(root="results") -> str:
    """write() at a sweep's end, said in one line; a page that cannot be written is one warning line, never a failed
    sweep (the figures and tables stand without it)."""
    try:
        path = write(root)
    except Exception as e:  # noqa: BLE001 - the figures and tables are written already
        return f"warning: {FILE} not written: {e if isinstance(e, files.DiskFull) else f'{type(e).__name__}: {e}'}" \
            .splitlines()[0]
    if path is None:
        return f"no run folder or figure in {root}: no {FILE}"
    return f"every figure, table and run on one page (open it in a browser): {path}"
