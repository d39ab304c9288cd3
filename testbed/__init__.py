"""Python side of the edge transaction testbed: deployment files, launchers, results, checker."""
