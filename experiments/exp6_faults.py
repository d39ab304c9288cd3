#!/usr/bin/env python3
"""Exp 6: TPC-C at exp 2-5's fixed load while a fault (FAULT_KINDS: a region partitioned, a follower paused, a
follower crashed for good, a region's clock skewed, a cross-region delay spike) hits one region for FAULT_FOR_S
seconds (a crash: from FAULT_AT_S on), second by second.
Writes results/faults/<run-id>/ per run (with timeseries.csv) and results/data-faults.pdf; `--help` for the options."""
import sys

from testbed.sweeps.runner import main

if __name__ == "__main__":
    sys.exit(main("faults"))
