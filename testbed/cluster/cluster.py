"""A running deployment as objects: what containers.yml (testbed/cluster/swarm.py: up()) records, read once here
instead of re-parsed wherever a container, its role or its host is needed. The dict stays the file's format."""
from __future__ import annotations

from dataclasses import dataclass

from testbed.core import knobs


@dataclass(frozen=True)
class Member:
    """One container of the deployment."""
    name: str
    ip: str
    host: str | None      # the hosts.yml address it runs on
    role: str             # shard | follower (CONTAINERS='replica') | driver
    region: int | None    # shards and followers: from 1
    shard: int | None     # shards and followers: from 1, within the region
    id: str | None = None
    replica: int | None = None   # a follower's container: the replica of its shard it runs


class Cluster:
    def __init__(self, state: dict):
        self.state = state
        self.members = tuple(Member(c["name"], c["ip"], c.get("host"), c.get("role", "shard"), c.get("region"),
                                    c.get("shard"), c.get("id"), c.get("replica")) for c in state["containers"])

    @property
    def deployment(self) -> str:
        return str(self.state.get("deployment") or knobs.default("DEPLOYMENT"))

    @property
    def driver(self) -> Member:
        for m in self.members:
            if m.role == "driver":
                return m
        raise ValueError(f"deployment {self.deployment}: no driver container in its containers.yml")

    @property
    def shards(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.role == "shard")

    @property
    def engines(self) -> tuple[Member, ...]:
        """The containers that run engine processes: the shards' and the followers' (CONTAINERS='replica')."""
        return tuple(m for m in self.members if m.role in ("shard", "follower"))

    def replica_container(self, region: int, shard: int, replica: int) -> Member | None:
        """The container that runs a replica (region and shard from 1, replica from 0): its own when it is a
        follower with one, else its shard's; None when the deployment has neither."""
        own = [m for m in self.members if m.role == "follower" and (m.region, m.shard, m.replica) ==
               (region, shard, replica)]
        return own[0] if own else next((m for m in self.shards if (m.region, m.shard) == (region, shard)), None)

    def by_ip(self) -> dict[str, Member]:
        return {m.ip: m for m in self.members}

    def shard_ips(self) -> dict[tuple[int, int], str]:
        """(region, shard), both from 1 -> the shard container's address."""
        return {(m.region, m.shard): m.ip for m in self.shards}
