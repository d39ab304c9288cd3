#!/usr/bin/env python3
"""Exp 5: TPC-C, cross-region RTT std-dev X swept, RTT = INTER_RTT_MS +- X (ROBUST_RTT_VAR).
Writes results/robust/<run-id>/ per run and results/data-robust.pdf; `--help` for the options."""
import sys

from testbed.sweeps.runner import main

if __name__ == "__main__":
    sys.exit(main("robust"))
