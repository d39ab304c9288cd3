"""Core: the knobs (exp_config.py), protocols' registry, deployment files, run types, interrupts, the deployment lock, RTT matrices, text tables, polling. Imports nothing else of testbed."""
