#!/usr/bin/env python3
"""Exp 1: TPC-C, clients per region swept (CLIENT_PROCESS_PER_SHARD x SHARDS_PER_REGION x CONCURRENCY_LEVELS).
Writes results/n_clients/<run-id>/ per run and results/data-n_clients.pdf; `--help` for the options."""
import sys

from testbed.sweeps.runner import main

if __name__ == "__main__":
    sys.exit(main("n_clients"))
