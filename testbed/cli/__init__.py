"""Command lines (the top-level scripts are thin wrappers around these). The top layer: nothing imports it."""
