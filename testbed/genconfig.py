"""The deployment file for a swarm deployment (genConfig.py): exp_config + containers.yml -> config/deploy.yml.

Every process of shard (region r, shard s) runs in that shard's container (10.55.<r+1>.<s+1>), each on its own port:
replicas 20000 + replica, clients 20200 + k. Region r's manager runs in the region's first shard container, port
20100. SLOG's global-order group (3 replicas of the global log) goes to regions spread evenly over all R, so it
works for any R >= 3 and no region holds two of them.
"""
from __future__ import annotations

from . import deploy as deploylib
from .swarm import CLIENT_PORT, MANAGER_PORT, REPLICA_PORT


def slog_order_regions(regions: int) -> list[int]:
    """3 distinct regions (from 0) spread over 0..regions-1: 0, ~R/3, ~2R/3."""
    if regions < 3:
        raise ValueError(f"regions={regions}: SLOG's global-order group needs at least 3 regions")
    return [(i * regions) // 3 for i in range(3)]


def placer(state: dict):
    """place(nodes) for deploy.build_deployment: host = the shard container's IP, port by role."""
    ips = {(c["region"], c["shard"]): c["ip"] for c in state["containers"] if c.get("role") == "shard"}

    def ip_of(region0: int, shard0: int) -> str:
        try:
            return ips[(region0 + 1, shard0 + 1)]
        except KeyError:
            raise ValueError(f"containers.yml has no container for region {region0 + 1} shard {shard0 + 1}; "
                             "bring the deployment up with at least this many regions and shards") from None

    def place(nodes: list[dict]) -> None:
        for n in nodes:
            if n["kind"] == "replica":
                n.update(host=ip_of(n["region"], n["shard"]), port=REPLICA_PORT + n["replica"])
            elif n["kind"] == "manager":
                n.update(host=ip_of(n["region"], 0), port=MANAGER_PORT)
            else:
                k = int(n["name"].rsplit(".", 1)[1])
                n.update(host=ip_of(n["region"], n["shard"]), port=CLIENT_PORT + k)
    return place


def deployment(state: dict, **knobs) -> dict:
    """A deployment on the containers of containers.yml (state) for deploy knobs; the link mechanism is the one
    chosen at bring-up (netem: the transport adds nothing)."""
    R = int(knobs.get("regions", deploylib.DEFAULTS["regions"]))
    N = int(knobs.get("shards", deploylib.DEFAULTS["shards"]))
    if R > state["regions"] or N > state["shards_per_region"]:
        raise ValueError(f"regions={R} x shards={N}: the containers are {state['regions']} x "
                         f"{state['shards_per_region']}; raise REGIONS/SHARDS_PER_REGION and rerun start_containers.py")
    d = deploylib.build_deployment(place=placer(state), **{**knobs, "mechanism": state["mechanism"]})
    if d["mode"] == "slog":
        d["slog"] = {"order_regions": slog_order_regions(R)}
    return d
