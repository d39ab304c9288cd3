#!/usr/bin/env python3
"""One local run (all processes on 127.0.0.1): `python run_local.py --help`."""
import sys

from testbed.cli.run import main

if __name__ == "__main__":
    sys.exit(main())
