#!/usr/bin/env python3
"""`make rehearsal`: a multi-host cluster rehearsed on one machine (testbed/sweeps/rehearse.py; --help)."""
import sys

from testbed.sweeps.rehearse import main

if __name__ == "__main__":
    sys.exit(main())
