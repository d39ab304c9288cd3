#!/usr/bin/env python3
"""Exp 3: TPC-A, zipf coefficient of the keys swept (ZIPFS).
Writes results/tpca/<run-id>/ per run and results/data-tpca.pdf; `--help` for the options."""
import sys

from testbed.sweeps.runner import main

if __name__ == "__main__":
    sys.exit(main("tpca"))
