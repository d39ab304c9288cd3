#!/usr/bin/env python3
"""drawFig(name): results/data-<name>.pdf (+ .png and .csv beside it) from the run folders in results/<name>/
(testbed/cli/figures.py; --help).

    python genFigure.py n_clients [--results results] [--tail 95]
    python -c 'import genFigure; genFigure.drawFig("n_clients")'
"""
import sys

from testbed.cli.figures import drawFig, main  # noqa: F401  (drawFig: this script's documented API)

if __name__ == "__main__":
    sys.exit(main())
