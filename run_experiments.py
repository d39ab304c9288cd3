#!/usr/bin/env python3
"""The main job: run experiments and print where their figures are (testbed/cli/experiments.py; --help)."""
import sys

from testbed.cli.experiments import main

if __name__ == "__main__":
    sys.exit(main())
