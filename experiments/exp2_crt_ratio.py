#!/usr/bin/env python3
"""Exp 2: TPC-C 100 % Payment, share of cross-region Payments swept (CRT_RATIOS).
Writes results/crt_ratio/<run-id>/ per run and results/data-crt_ratio.pdf; `--help` for the options."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testbed.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("crt_ratio"))
