"""`python -m testbed.cli`: one run (testbed.cli.run)."""
import sys

from testbed.cli.run import main

sys.argv[0] = "python -m testbed.cli"
sys.exit(main())
