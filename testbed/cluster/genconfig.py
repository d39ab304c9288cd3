"""The deployment file for a swarm deployment (genConfig.py): exp_config + containers.yml -> config/deploy.yml.

Every process of shard (region r, shard s) runs in that shard's container (10.55.<r+1>.<s+1>), each on its own port:
replicas 20000 + replica, clients 20200 + k. The processes of a protocol's roles (a manager per region, the members
of a group; testbed/core/protocols.py says which and in which region) run in their region's first shard container, on
ports 20100, 20101, ... in the order of the deployment's node list. A follower that has a container of its own
(CONTAINERS='replica', testbed/cluster/placement.py) runs there, on the same port, and in an engine process of its own
whatever the deployment's process layout (testbed/core/deploy.py assign_processes).
"""
from __future__ import annotations

from testbed.cluster.cluster import Cluster
from testbed.core import deploy as deploylib

# The ports of a shard container's nodes (the deployment's business, not the bring-up's: containers publish none)
REPLICA_PORT, MANAGER_PORT, CLIENT_PORT = 20000, 20100, 20200


def placer(state: dict):
    """place(nodes) for deploy.build_deployment: host = the shard container's IP (a follower's own container's, where
    it has one), port by role; it returns the names of the followers placed in containers of their own."""
    cluster = Cluster(state)
    ips = cluster.shard_ips()

    def ip_of(region0: int, shard0: int) -> str:
        try:
            return ips[(region0 + 1, shard0 + 1)]
        except KeyError:
            raise ValueError(f"containers.yml has no container for region {region0 + 1} shard {shard0 + 1}; "
                             "bring the deployment up with at least this many regions and shards") from None

    def place(nodes: list[dict]) -> set[str]:
        role_ports: dict[int, int] = {}   # region -> next port for a role process in its first container
        alone = set()
        for n in nodes:
            if n["kind"] == "replica":
                own = cluster.replica_container(n["region"] + 1, n["shard"] + 1, n["replica"])
                if own is not None and own.role == "follower":   # a container of its own
                    alone.add(n["name"])
                n.update(host=own.ip if n["name"] in alone else ip_of(n["region"], n["shard"]),
                         port=REPLICA_PORT + n["replica"])
            elif n["kind"] == "client":
                k = int(n["name"].rsplit(".", 1)[1])
                n.update(host=ip_of(n["region"], n["shard"]), port=CLIENT_PORT + k)
            else:
                port = role_ports.get(n["region"], MANAGER_PORT)
                if port >= CLIENT_PORT:
                    raise ValueError(f"region {n['region'] + 1}: more than {CLIENT_PORT - MANAGER_PORT} role "
                                     "processes in one container")
                role_ports[n["region"]] = port + 1
                n.update(host=ip_of(n["region"], 0), port=port)
        return alone
    return place


def deployment(state: dict, **knobs) -> dict:
    """A deployment on the containers of containers.yml (state) for deploy knobs; the link mechanism is the one
    chosen at bring-up (netem: the transport adds nothing)."""
    R = int(knobs.get("regions", deploylib.DEFAULTS["regions"]))
    N = int(knobs.get("shards", deploylib.DEFAULTS["shards"]))
    if R > state["regions"] or N > state["shards_per_region"]:
        raise ValueError(f"regions={R} x shards={N}: the containers are {state['regions']} x "
                         f"{state['shards_per_region']}; raise REGIONS/SHARDS_PER_REGION and rerun start_containers.py")
    return deploylib.build_deployment(place=placer(state), **{**knobs, "mechanism": state["mechanism"]})
