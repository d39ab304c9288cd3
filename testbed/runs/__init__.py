"""Runs: one run's lifecycle on a backend (local processes or the swarm), the driver's jobs, the RTT self-test. Imports testbed.core, .analysis, .cluster."""
