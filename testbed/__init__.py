"""Python side of the edge transaction testbed: deployment files, launchers, results, checker.

The package is in layers; a module imports only from its own layer or the layers before it in LAYERS
(tests/python/test_layering.py enforces it, function-level imports included). ARCHITECTURE.md walks through them.
"""

# lowest first
LAYERS = ("core", "analysis", "cluster", "runs", "sweeps", "cli")
