"""drawFig(name): results/data-<name>.pdf (+ .png and .csv beside it) from the run folders in results/<name>/.

    python genFigure.py n_clients [--results results] [--tail 95]
    python genFigure.py --claims        # results/claims.md: every experiment's numbers beside the paper's claims
    python genFigure.py --index         # results/index.html: every figure, table and run on one page
    python -c 'import genFigure; genFigure.drawFig("n_clients")'
Names: n_clients, crt_ratio, tpca, scalability, robust, faults (or exp1..exp6).
"""
import argparse
import sys

from testbed.core import experiments, files, options
from testbed.analysis import claims, drawing, index, runs_table


def drawFig(name, results="results", tail=None, config=None):
    """Aggregate results/<name>/ and write results/data-<name>.{pdf,png,csv}; returns the PDF path.
    tail: tail percentile (default: the sweep's TAIL_PERCENTILE, else exp_config.py's).
    ValueError for an unknown name, figures.NoRuns (a ValueError) when there is no run to draw."""
    return drawing.draw(name, root=results, tail=tail, config=config).pdf


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="experiment names: " + ", ".join(experiments.EXPERIMENTS))
    ap.add_argument("--claims", action="store_true",
                    help="also write results/claims.md: every experiment's numbers beside the paper's claims")
    ap.add_argument("--index", action="store_true",
                    help="also write results/index.html: every figure, table and run on one page, to open in a "
                         "browser (after the figures, claims and tables named here)")
    options.add_results_root(ap, "--results")
    ap.add_argument("--tail", type=float, default=None, help="tail percentile (default: TAIL_PERCENTILE)")
    options.add_config(ap)
    a = ap.parse_args(argv)
    if not a.names and not a.claims and not a.index:
        ap.error("name an experiment, --claims or --index")
    try:
        names = [experiments.get(n).name for n in a.names]   # every name checked before anything is drawn
        if a.tail is not None and a.tail != 99 and "faults" in names:
            raise ValueError(f"--tail {a.tail:g}: exp 6 (faults) draws p99 over time, no other tail; draw it apart "
                             "from the experiments --tail is for")
        for n in names:
            fig = drawing.draw(n, root=a.results, tail=a.tail, config=a.config)
            print(drawing.point_table(fig))
            print(f"figure: {fig.pdf}")
        if a.claims:
            path = claims.write(a.results)
            print(f"claims: {path}" if path else f"claims: no experiment has runs under {a.results}/")
    except ValueError as e:
        print(f"genFigure: error: {e}", file=sys.stderr)
        return 2
    except files.DiskFull as e:   # one line: the path and the space left; the figure before it is untouched
        print(f"genFigure: error: {e}", file=sys.stderr)
        return 1
    line = runs_table.refresh(a.results)   # the table follows the folders the figures were drawn from
    print(line, file=sys.stderr if line.startswith("warning:") else sys.stdout)
    if a.index:   # last: the page links the figures and tables above
        try:
            page = index.write(a.results)
        except (OSError, ValueError) as e:   # a full disk is one line (files.DiskFull); the last page stands
            print(f"genFigure: error: {e if isinstance(e, files.DiskFull) else f'{a.results}/{index.FILE}: {e}'}",
                  file=sys.stderr)
            return 1
        print(f"index: {page}" if page else f"index: no run folder or figure under {a.results}/: no page written")
    return 0

