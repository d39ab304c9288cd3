#!/usr/bin/env python3
"""Write config/deploy.yml for the running swarm deployment: `python genConfig.py --help`."""
import sys

from testbed.cli.swarm import genconfig_main

if __name__ == "__main__":
    sys.exit(genconfig_main())
