#!/usr/bin/env python3
"""Exp 3: TPC-A, zipf coefficient of the keys swept (ZIPFS).
Writes results/tpca/<run-id>/ per run and results/data-tpca.pdf; `--help` for the options."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testbed.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("tpca"))
