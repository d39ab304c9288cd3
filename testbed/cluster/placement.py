"""Where each container runs and which address it gets (pure; start_containers.py acts on the plan).

One container per shard, named <DEPLOYMENT>_r<region>_s<shard>, at <a.b>.<region>.<shard>; regions and shards are
counted from 1 in names and addresses (so a.b.0.0/24 stays free for the driver and control). The deployment
file counts from 0: deploy region = Container.region - 1, shard-in-region = Container.shard - 1.
With CONTAINERS='replica' each follower (replica k = 1, 2) has a container of its own besides the shard's (which
keeps replica 0 and the clients): <DEPLOYMENT>_r<region>_s<shard>_f<k> at <a.b>.<region>.<128 + 2 (shard - 1) + k - 1>,
role `follower`, inside its region's /24 (the tc plans shape by destination /24), so a region holds at most 63 shards.
Hosts: round-robin over hosts.yml in (region, shard, replica) order, or, when every host gives `cpus`, a smooth
weighted round-robin so each host gets containers in proportion to its cpus (with enough hosts a shard's containers
land on different ones). The driver goes on the first host.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from testbed.core.config import ExpConfig, check_containers
from testbed.cluster.hosts import Host

@dataclass(frozen=True)
class Container:
    name: str
    ip: str
    host: Host
    region: int  # from 1; 0 for the driver
    shard: int   # from 1; 0 for the driver
    role: str = "shard"  # shard | follower | driver
    replica: int | None = None   # a follower's container: the replica it runs (1 or 2)


def host_sequence(hosts, n: int) -> list[Host]:
    """n host picks: round-robin, or weighted by cpus when every host has cpus (ties -> earlier host)."""
    hosts = list(hosts)
    if not hosts:
        raise ValueError("hosts: at least one host is needed")
    if not all(h.cpus for h in hosts):
        return [hosts[i % len(hosts)] for i in range(n)]
    total, current, out = sum(h.cpus for h in hosts), [0] * len(hosts), []
    for _ in range(n):
        current = [c + h.cpus for c, h in zip(current, hosts)]
        best = max(range(len(hosts)), key=lambda i: (current[i], -i))
        current[best] -= total
        out.append(hosts[best])
    return out


def plan(cfg: ExpConfig, hosts) -> list[Container]:
    """Containers for the regions deployed (cfg.max_regions) x cfg.shards_per_region shards (with CONTAINERS='replica'
    each shard's container followed by its followers'), then the driver at cfg.driver_ip."""
    net = ipaddress.IPv4Network(cfg.subnet)
    R, N = cfg.max_regions, cfg.shards_per_region
    followers = range(1, cfg.replicas) if check_containers(cfg.containers, N) == "replica" else ()
    driver = ipaddress.IPv4Address(cfg.driver_ip)
    slots = [(r, s, k) for r in range(1, R + 1) for s in range(1, N + 1) for k in (0, *followers)]
    out = []
    for (r, s, k), host in zip(slots, host_sequence(hosts, len(slots))):
        ip = cfg.container_ip(r, s, k)
        if r > 255 or s > 254 or ipaddress.IPv4Address(ip) not in net:
            raise ValueError(f"SUBNET={cfg.subnet}: too small for {R} regions (MAX_REGIONS) x SHARDS_PER_REGION={N} "
                             f"({ip} falls outside); use a /16")
        if ipaddress.IPv4Address(ip) == driver:
            raise ValueError(f"DRIVER_IP={cfg.driver_ip}: collides with shard container "
                             f"{cfg.container_name(r, s, k)}")
        out.append(Container(cfg.container_name(r, s, k), ip, host, r, s, "follower" if k else "shard",
                             k if k else None))
    if driver not in net:
        raise ValueError(f"DRIVER_IP={cfg.driver_ip}: outside SUBNET={cfg.subnet}")
    out.append(Container(cfg.driver_name, str(driver), list(hosts)[0], 0, 0, "driver"))
    return out
