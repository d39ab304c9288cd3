#!/usr/bin/env python3
"""Bring the swarm deployment up (or --down), per exp_config.py and hosts.yml: `python start_containers.py --help`."""
import sys

from testbed.cli.swarm import main

if __name__ == "__main__":
    sys.exit(main())
