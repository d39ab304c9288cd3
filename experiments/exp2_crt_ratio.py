#!/usr/bin/env python3
"""Exp 2: TPC-C 100 % Payment, share of cross-region Payments swept (CRT_RATIOS).
Writes results/crt_ratio/<run-id>/ per run and results/data-crt_ratio.pdf; `--help` for the options."""
import sys

from testbed.sweeps.runner import main

if __name__ == "__main__":
    sys.exit(main("crt_ratio"))
