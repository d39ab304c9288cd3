"""`make rehearsal`: a cluster rehearsed on one machine (docs/multi-host.md). Extra Docker daemons in network
namespaces join this machine's swarm (testbed/cluster/rehearsal.py); then, exactly as a user with a cluster would:
start_containers.py spreads the shards over the hosts by `cpus` and self-tests the RTT matrix, run_local.py
--backend swarm runs every built protocol once from the driver, one host is lost in the middle of a run (which must
fail, saying why, and leave nothing running), and --down must leave nothing on any host. A summary table at the end.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import docker
from tenacity import stop_after_delay

from testbed.cluster import rehearsal, swarm
from testbed.cluster.cluster import Cluster
from testbed.cluster.swarm import LABEL
from testbed.core import knobs, polling, protocols
from testbed.core.paths import REPO


def _config(deployment: str, image: str, folder: Path, subnet_b: int) -> Path:
    """An experiment config for the rehearsal's deployment, inside the checkout (the driver sees only it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "exp_config.py"
    path.write_text((REPO / "exp_config.py").read_text() + "\n# ---- the rehearsal's own deployment\n"
                    f"DEPLOYMENT = {deployment!r}\nNETWORK_NAME = {deployment + '_txn'!r}\n"
                    f"IMAGE_NAME = {image!r}\nSUBNET = '10.{subnet_b}.0.0/16'\nDRIVER_IP = '10.{subnet_b}.0.240'\n"
                    f"CONTAINER_CPUS = None\nMAX_REGIONS = REGIONS\nSCALABILITY_N_REGIONS = [REGIONS]\n")
    return path


def _py(*args, timeout=600) -> tuple[int, str, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


def _left_on(url: str, deployment: str) -> list[str]:
    c = docker.DockerClient(base_url=url, timeout=60)
    try:
        label = f"{LABEL}={deployment}"
        return ([f"container {x.name}" for x in c.containers.list(all=True, filters={"label": label})]
                + [f"network {n.name}" for n in c.networks.list() if (n.attrs.get("Labels") or {}).get(LABEL)
                   == deployment])
    finally:
        c.close()


def left_after_down(urls: list[str], deployment: str, timeout_s: float = 30, sleep=time.sleep) -> list[str]:
    """What of the deployment is still on the hosts after its teardown, asked until nothing is or timeout_s has
    passed: a worker of the swarm lists a removed overlay network for a few seconds more (seen on the host that
    was cut off and mended), so one look right after the teardown can see it."""
    def ask() -> list[str]:
        left = []
        for url in urls:
            try:
                left += [f"{url}: {x}" for x in _left_on(url, deployment)]
            except docker.errors.DockerException:
                pass
        return left
    return polling.poll(ask, stop_after_delay(timeout_s), every_s=1, done=lambda left: not left, sleep=sleep)


def rehearse(n_hosts: int = 2, modes=None, duration: float = 15, deployment: str = "rehearsal",
             image: str = knobs.default("IMAGE_NAME"), subnet_b: int = 57, lose_host: bool = True, log=print) -> dict:
    """The whole rehearsal; returns its facts (and raises nothing for a failed step: the summary says it)."""
    folder = REPO / "results" / deployment
    cfg = _config(deployment, image, folder, subnet_b)
    hosts_file = folder / "hosts.yml"
    out = {"hosts": n_hosts + 1, "runs": {}, "steps": {}}
    modes = modes or protocols.load().names()
    try:
        t0 = time.monotonic()
        hosts = rehearsal.up(n_hosts, image=image, hosts_file=hosts_file, log=log)
        out["steps"]["hosts_up_s"] = round(time.monotonic() - t0, 1)
        rc, text, dt = _py("start_containers.py", "--config", cfg, "--hosts", hosts_file, "--self-test")
        log(text.rstrip())
        out["steps"]["bring_up"] = {"rc": rc, "s": round(dt, 1), "self_test": "PASS" in text}
        table = re.search(r"RTT ms, measured.*?\n((?:\s+r\d.*\n?)+)", text + "\n", re.S)
        out["steps"]["rtt_table"] = table.group(0).rstrip() if table else None
        m = re.search(r"(\d+) containers up in ([\d.]+)s", text)
        out["steps"]["containers"] = int(m.group(1)) if m else None
        state = swarm.load_state(swarm.state_paths(deployment)[1])
        if state:
            out["steps"]["containers_per_host"] = dict(Counter(m.host for m in Cluster(state).members))
        if rc != 0:
            return out
        for mode in modes:
            rc, text, dt = _py("run_local.py", "--backend", "swarm", "--config", cfg, "--mode", mode,
                               "--duration", duration, "--name", deployment)
            verdict = re.search(r"checker: (\w+)", text)
            out["runs"][mode] = {"rc": rc, "verdict": verdict.group(1) if verdict else None, "s": round(dt, 1)}
            log(f"rehearsal: {mode}: rc {rc}, checker {out['runs'][mode]['verdict']}, {dt:.0f}s")
        if lose_host:
            victim = hosts[-1]
            timer = threading.Timer(10, rehearsal.cut, args=(victim,))
            timer.start()
            try:
                rc, text, dt = _py("run_local.py", "--backend", "swarm", "--config", cfg, "--mode", modes[0],
                                   "--duration", 40, "--name", deployment)
            finally:
                timer.cancel()
                rehearsal.mend(victim)
            reason = re.search(r"run failed: (.*)", text)
            out["steps"]["host_loss"] = {"host": victim.address, "rc": rc, "s": round(dt, 1),
                                         "reason": reason.group(1) if reason else None}
            log(f"rehearsal: {victim.address} lost 10 s into a run: rc {rc} after {dt:.0f}s: "
                f"{reason.group(1) if reason else text.strip().splitlines()[-1:]}")
    finally:
        rc, text, dt = _py("start_containers.py", "--config", cfg, "--hosts", hosts_file, "--down") \
            if hosts_file.exists() else (0, "", 0)
        left = []
        if hosts_file.exists():
            urls = ["unix:///var/run/docker.sock"] + [rehearsal.FakeHost(k).url for k in range(2, n_hosts + 2)]
            left = left_after_down(urls, deployment)
        out["steps"]["down"] = {"rc": rc, "s": round(dt, 1), "left": left}
        out["steps"]["rehearsal_down_left"] = rehearsal.down(log=log)
    return out


def summary(facts: dict) -> str:
    s = facts["steps"]
    lines = [f"hosts: {facts['hosts']} (this machine and {facts['hosts'] - 1} daemons in namespaces), up in "
             f"{s.get('hosts_up_s')} s",
             f"bring-up: rc {s.get('bring_up', {}).get('rc')}, {s.get('containers')} containers "
             f"{s.get('containers_per_host')}, {s.get('bring_up', {}).get('s')} s, self-test "
             f"{'PASS' if s.get('bring_up', {}).get('self_test') else 'FAIL'}"]
    if s.get("rtt_table"):
        lines.append(s["rtt_table"])
    for mode, r in facts["runs"].items():
        lines.append(f"run {mode}: rc {r['rc']}, checker {r['verdict']}, {r['s']} s")
    if "host_loss" in s:
        h = s["host_loss"]
        lines.append(f"host {h['host']} lost mid-run: rc {h['rc']} after {h['s']} s: {h['reason']}")
    lines.append(f"down: rc {s.get('down', {}).get('rc')}, left: {s.get('down', {}).get('left') or 'nothing'}; "
                 f"rehearsal hosts left: {s.get('rehearsal_down_left') or 'nothing'}")
    return "\n".join(lines)


def ok(facts: dict) -> bool:
    s = facts["steps"]
    return (s.get("bring_up", {}).get("rc") == 0 and s["bring_up"]["self_test"]
            and facts["runs"] and all(r["rc"] == 0 and r["verdict"] == "CONSISTENT" for r in facts["runs"].values())
            and s.get("host_loss", {"rc": 1}).get("rc") == 1 and not s["down"]["left"]
            and not s["rehearsal_down_left"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Rehearse a multi-host cluster on this machine (docs/multi-host.md).")
    ap.add_argument("--hosts", type=int, default=2, help="extra hosts, each a Docker daemon in a network namespace "
                                                         "(default 2)")
    ap.add_argument("--protocols", default="", help="comma-separated modes (default: every built protocol)")
    ap.add_argument("--duration", type=float, default=15, help="seconds per run (default 15)")
    ap.add_argument("--down", action="store_true", help="only take down a rehearsal a crash left up")
    a = ap.parse_args(argv)
    if a.down:
        left = rehearsal.down()
        print("\n".join(left) or "nothing left")
        return 1 if left else 0
    try:
        facts = rehearse(a.hosts, [m for m in a.protocols.split(",") if m] or None, a.duration)
    except rehearsal.RehearsalError as e:
        print(f"rehearsal: error: {e}", file=sys.stderr)
        rehearsal.down()
        return 2
    print(summary(facts))
    (REPO / "results" / "rehearsal" / "rehearsal.json").write_text(json.dumps(facts, indent=1))
    return 0 if ok(facts) else 1
