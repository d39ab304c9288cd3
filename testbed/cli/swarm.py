"""Command lines of start_containers.py and genConfig.py."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from testbed.cluster import genconfig, swarm
from testbed.cluster.hosts import load_hosts
from testbed.core import deploy as deploylib, interrupts, lock, options, protocols
from testbed.core.config import load_exp_config
from testbed.core.runtypes import RunError
from testbed.runs.backend import base_knobs
from testbed.runs.selftest import swarm_self_test


def _load(config, hosts_file):
    cfg = load_exp_config(config)
    hosts = load_hosts(hosts_file) if hosts_file else load_hosts()
    return cfg, hosts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Start (or with --down remove) the containers of the deployment: "
                                 "one per shard (and one per follower with CONTAINERS='replica') plus the "
                                 "driver, on the hosts of hosts.yml, in a Docker Swarm. "
                                 "Idempotent. Writes containers.yml.")
    ap.add_argument("--down", action="store_true", help="remove every container, the network, the key pair "
                    "and the swarm if this tool created it")
    options.add_config(ap)
    ap.add_argument("--hosts", default=None, help="hosts file (default hosts.yml)")
    ap.add_argument("--self-test", action="store_true", help="after bring-up, measure the RTT matrix "
                    "from inside the containers and compare it with the configured one")
    ap.add_argument("--wait", action="store_true", help="wait for a job that holds the deployment (a sweep, a run) "
                    "instead of refusing at once")
    ap.add_argument("--take-over", action="store_true", help="bring up (or with --down remove) the deployment even "
                    "when another checkout brought it up (refused otherwise: its jobs would write there)")
    ap.add_argument("--check-owner", action="store_true", help="only check that the deployment is not another "
                    "checkout's (exit 2 naming it); `make up` does this before it builds the image")
    a = ap.parse_args(argv)
    prog = "start_containers"
    try:
        cfg, hosts = _load(a.config, a.hosts)
        if a.check_owner:
            if not a.take_over:
                try:
                    swarm.ensure_owner(cfg, hosts)
                except swarm.NotOwner:
                    raise
                except swarm.SwarmError:
                    pass   # Docker not answering: the bring-up says so in its own words
            return 0
        with interrupts.stop_on_signals() as stop, \
                lock.JobLock(lock.swarm_lock_name(cfg.deployment)).acquire(a.wait) as held:
            t0 = time.monotonic()
            if a.down:
                r = swarm.down(cfg, hosts, log=print, take_over=a.take_over)
                print(f"{prog}: removed {r['containers_removed']} containers, the network and the key pair"
                      + (", left the swarm it had created" if r["swarm_left"] else "")
                      + f" in {time.monotonic() - t0:.1f}s")
                return 0
            state = swarm.up(cfg, hosts, log=print, take_over=a.take_over)
            print(f"{prog}: {len(state['containers'])} containers up in {time.monotonic() - t0:.1f}s "
                  f"(shaping {state['mechanism']}); wrote {swarm.state_paths(cfg.deployment)[1].name}")
            stop.check()
            if a.self_test:
                if not swarm_self_test(cfg, state, log=print, env=held.env()):
                    return stop.exit_code() or 1
            return 0
    except (ValueError, swarm.SwarmError, lock.Busy) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except RunError as e:  # interrupted between steps
        print(f"{prog}: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)


def genconfig_main(argv=None) -> int:
    d = deploylib.DEFAULTS
    ap = argparse.ArgumentParser(description="Write the deployment file the engine reads for the containers "
                                 "in containers.yml (see docs/deploy-schema.md).")
    options.add_mode(ap)
    options.add_load(ap, d)
    ap.add_argument("--regions", type=int, default=None, help="use the first k regions (default REGIONS)")
    options.add_config(ap)
    ap.add_argument("--containers", default=None,
                    help="containers.yml of the deployment (default: the one of DEPLOYMENT in exp_config.py)")
    ap.add_argument("--out", default="config/deploy.yml", help="the deployment file to write (default %(default)s)")
    a = ap.parse_args(argv)
    try:
        cfg = load_exp_config(a.config)
        path = Path(a.containers) if a.containers else swarm.state_paths(cfg.deployment)[1]
        state = swarm.load_state(path)
        if state is None:
            raise ValueError(f"{path}: not found; run start_containers.py first")
        knobs = base_knobs(cfg, regions=a.regions)
        dep = genconfig.deployment(state, mode=a.mode, workload=a.workload, clients_per_shard=a.clients_per_shard,
                                   concurrency=a.concurrency, **knobs)
        path = deploylib.write_yaml(dep, a.out)
    except (ValueError, protocols.RegistryError, swarm.SwarmError) as e:
        print(f"genConfig: error: {e}", file=sys.stderr)
        return 2
    print(f"genConfig: wrote {path} ({len(dep['nodes'])} processes, mode {dep['mode']}, "
          f"link {dep['link']['mechanism']})")
    return 0
