#!/usr/bin/env python3
"""Exp 4: TPC-C, number of regions swept (SCALABILITY_N_REGIONS; the first k regions).
Writes results/scalability/<run-id>/ per run and results/data-scalability.pdf; `--help` for the options."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testbed.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("scalability"))
