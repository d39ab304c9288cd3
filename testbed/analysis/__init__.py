"""Analysis: a run's results, its transaction histories and the consistency checker, run folders, figures. Imports only testbed.core."""
