"""Choosing a backend: open_backend("auto" | "local" | "swarm", cfg) -> a testbed.runs.backend.Backend."""
from __future__ import annotations

from testbed.runs.backend import Backend, LocalBackend
from testbed.core.config import ExpConfig
from testbed.runs.swarm_backend import SwarmBackend, inside_driver

from testbed.core.options import BACKENDS


def open_backend(kind: str, cfg: ExpConfig, **opts) -> Backend:
    """kind: local | swarm | auto (swarm when this process runs in the driver container of a deployment
    brought up by start_containers.py, i.e. /etc/edge-txn/containers.yml exists; else local)."""
    if kind not in BACKENDS:
        raise ValueError(f"backend={kind!r}: must be one of {', '.join(BACKENDS)}")
    if kind == "auto":
        kind = "swarm" if inside_driver() else "local"
    if kind == "local":
        return LocalBackend(**opts)
    return SwarmBackend(cfg, **opts)
