#!/usr/bin/env python3
"""Exp 4: TPC-C, number of regions swept (SCALABILITY_N_REGIONS; the first k regions).
Writes results/scalability/<run-id>/ per run and results/data-scalability.pdf; `--help` for the options."""
import sys

from testbed.sweeps.runner import main

if __name__ == "__main__":
    sys.exit(main("scalability"))
