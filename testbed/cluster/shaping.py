"""Traffic shaping: the tc command plan for one container (pure), its application, and the netem probe.

tc_plan() returns argv lists, each starting with 'tc' or 'ip'. The only commands allowed to fail are the
idempotent root deletions (`tc qdisc del dev X root`: there may be nothing to delete); may_fail(argv) says
which, and apply()/to_shell() honour it. Re-applying a plan gives the same tree (a restarted container
re-runs it from its entrypoint).

Tree per device, for a container in region m:
  prio root, bands 3 + K, default priomap -> bands 1..3: unmatched traffic (driver, DNS, swarm) is not delayed
  one netem per distinct (one-way delay, jitter) class k: parent 1:<4+k>, delay = RTT/2, jitter per side =
      jitter_ms/sqrt(2) with an explicit distribution (cross-region classes only), explicit limit
  u32 filters, prio 1: control ports (sport and dport) -> 1:1;  prio 2: <prefix>.<r>.0/24 -> its class band
  lo gets the same structure with one class, the own region's intra-region delay, for co-located processes
  (replicas and clients of one shard share a container; lo delays both directions, so one-way = RTT/2).
Classes are ordered by (delay, jitter), so the own region (smallest delay) usually gets band 4.
"""
from __future__ import annotations

import shlex
import subprocess
import sys

from testbed.core import rtt as rttlib
from testbed.core.config import rtt_matrix

PRIOMAP = "1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1".split()  # Linux default: bands 1..3 only
MAX_BANDS = 16
TXQUEUELEN = 1000


def _ms(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") + "ms"


def may_fail(argv) -> bool:
    """True for the idempotent deletions whose failure (nothing to delete) is ignored."""
    return list(argv[:3]) == ["tc", "qdisc", "del"]


def _device(dev, classes, filters, exempt_ports, limit, distribution, txqueuelen):
    """classes: list of (delay_ms, jitter_ms); filters: list of (match args, class index)."""
    bands = 3 + len(classes)
    if bands > MAX_BANDS:
        raise ValueError(f"{dev}: {len(classes)} delay classes; the prio qdisc allows at most {MAX_BANDS - 3}")
    cmds = [["tc", "qdisc", "del", "dev", dev, "root"]]
    if txqueuelen:
        cmds.append(["ip", "link", "set", "dev", dev, "txqueuelen", str(txqueuelen)])
    cmds.append(["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "prio", "bands", str(bands),
                 "priomap", *PRIOMAP])
    for k, (delay, jitter) in enumerate(classes):
        band = 4 + k
        netem = ["netem", "delay", _ms(delay)]
        if jitter > 0:
            netem += [_ms(jitter), "distribution", distribution]
        cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", f"1:{band}", "handle", f"{band}0:", *netem,
                     "limit", str(limit)])
    flt = ["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip"]
    for port in exempt_ports:
        for direction in ("sport", "dport"):
            cmds.append([*flt, "prio", "1", "u32", "match", "ip", direction, str(port), "0xffff", "flowid", "1:1"])
    for match, k in filters:
        cmds.append([*flt, "prio", "2", "u32", "match", *match, "flowid", f"1:{4 + k}"])
    return cmds


def tc_plan(my_region: int, regions: int, rtt_matrix_ms, jitter_ms: float = 0, distribution: str = "normal",
            limit: int = 100000, dev: str = "eth0", exempt_ports=(22,), subnet_prefix: str = "10.55",
            txqueuelen: int = TXQUEUELEN) -> list[list[str]]:
    """Commands shaping one container of region my_region (from 1, as in its address) on dev and on lo.
    rtt_matrix_ms is R x R, indices from 0 (row my_region-1 is used). Jitter applies to cross-region classes."""
    if not 1 <= my_region <= regions:
        raise ValueError(f"my_region={my_region}: must be in [1, {regions}]")
    if len(rtt_matrix_ms) != regions or any(len(row) != regions for row in rtt_matrix_ms):
        raise ValueError(f"rtt_matrix_ms: must be {regions} x {regions}")
    side_jitter = rttlib.one_way_jitter(jitter_ms)
    me = my_region - 1
    key = {r: (rtt_matrix_ms[me][r] / 2, side_jitter if r != me else 0.0) for r in range(regions)}
    classes = sorted(set(key.values()))
    filters = [(["ip", "dst", f"{subnet_prefix}.{r + 1}.0/24"], classes.index(key[r])) for r in range(regions)]
    cmds = _device(dev, classes, filters, exempt_ports, limit, distribution, txqueuelen)
    lo_filters = [(["u32", "0", "0"], 0)]  # everything on lo is co-located: own region's intra delay
    cmds += _device("lo", [(rtt_matrix_ms[me][me] / 2, 0.0)], lo_filters, exempt_ports, limit, distribution, 0)
    return cmds


def tc_plan_for(cfg, region: int, jitter_ms: float | None = None, dev: str = "eth0") -> list[list[str]]:
    """tc_plan with the values of an ExpConfig (jitter_ms overrides cfg.jitter_ms, e.g. for exp 5)."""
    return tc_plan(region, cfg.max_regions, rtt_matrix(cfg), cfg.jitter_ms if jitter_ms is None else jitter_ms,
                   cfg.jitter_distribution, cfg.netem_limit, dev, cfg.control_ports, cfg.subnet_prefix)


def to_shell(cmds) -> str:
    """The plan as a POSIX shell script (deletions may fail), e.g. for a container entrypoint."""
    lines = ["set -e"]
    for argv in cmds:
        line = shlex.join(argv)
        lines.append(f"{line} 2>/dev/null || true" if may_fail(argv) else line)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- running commands

def run_local(argv) -> tuple[int, str]:
    """Runner: run argv here; (exit code, stdout+stderr)."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        return 127, str(e)
    return p.returncode, (p.stdout + p.stderr).strip()


def apply(cmds, run=run_local) -> None:
    """Run a plan with run(argv) -> (rc, output); RuntimeError on the first failure that is not allowed."""
    for argv in cmds:
        rc, out = run(argv)
        if rc != 0 and not may_fail(argv):
            raise RuntimeError(f"shaping failed: {' '.join(argv)}: {out or f'exit {rc}'}")


PROBE_DEV = "edgeprobe0"


def netem_supported(run=run_local, dev: str | None = None) -> tuple[bool, str]:
    """Probe netem by adding it to a dummy device (created and removed here), or to dev (e.g. lo inside a fresh
    container, whose root qdisc is then deleted again). -> (supported, detail)."""
    if dev is not None:
        rc, out = run(["tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay", "1ms"])
        if rc != 0:
            return False, f"tc qdisc replace dev {dev} root netem: {out or f'exit {rc}'}"
        run(["tc", "qdisc", "del", "dev", dev, "root"])
        return True, "netem available"
    run(["ip", "link", "del", PROBE_DEV])  # leftover of an interrupted probe, if any
    rc, out = run(["ip", "link", "add", PROBE_DEV, "type", "dummy"])
    if rc != 0:
        return False, f"cannot create a dummy device to probe netem ({out or f'exit {rc}'}); needs NET_ADMIN"
    try:
        rc, out = run(["tc", "qdisc", "add", "dev", PROBE_DEV, "root", "netem", "delay", "1ms"])
        if rc != 0:
            return False, f"tc qdisc add ... netem: {out or f'exit {rc}'}"
        run(["tc", "qdisc", "del", "dev", PROBE_DEV, "root"])
        return True, "netem available"
    finally:
        run(["ip", "link", "del", PROBE_DEV])


def choose_mechanism(requested: str, probe_result=None, log=None) -> tuple[str, str]:
    """requested: auto | netem | app; probe_result: (supported, detail) from netem_supported (or a bool).
    -> (mechanism, message). 'auto' without netem falls back to 'app' and prints why; 'netem' without it fails."""
    if log is None:
        def log(msg):
            print(msg, file=sys.stderr)
    if requested == "app":
        return "app", "shaping: app (SHAPING='app'): the transport delays each message"
    if requested not in ("auto", "netem"):
        raise ValueError(f"SHAPING={requested!r}: must be one of auto, netem, app")
    if probe_result is None:
        raise ValueError(f"SHAPING={requested!r}: needs a netem probe result")
    ok, detail = probe_result if isinstance(probe_result, tuple) else (bool(probe_result), "")
    if ok:
        return "netem", f"shaping: netem (SHAPING={requested!r}): tc netem delays traffic by destination region"
    if requested == "netem":
        raise RuntimeError(f"SHAPING='netem' but this kernel cannot run netem ({detail}); "
                           "load sch_netem, or set SHAPING='auto' or 'app' in exp_config.py")
    msg = (f"shaping: netem is not available ({detail}); falling back to SHAPING='app': the transport delays "
           "each message by the configured one-way delay. Set SHAPING='netem' to make this an error.")
    log(msg)
    return "app", msg
