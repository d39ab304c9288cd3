"""txn-sim's count of the wake-ups a layout and a protocol need (bench's wake-ups floor, docs/efficiency.md)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from testbed.core.deploy import build_deployment, write_yaml

SIM = Path(os.environ.get("TXN_BUILD_DIR", REPO / "build")) / "txn-sim"
pytestmark = pytest.mark.skipif(not SIM.is_file(), reason="build/txn-sim not built (run `make build`)")


def sim(tmp_path, mode="dast", **knobs) -> dict:
    k = dict(name="simwake", mode=mode, duration=4, warmup=1, cooldown=1, concurrency=1, clients_per_shard=1,
             processes="container", delivery_grid_us=250)
    k.update(knobs)
    yml = write_yaml(build_deployment(**k), tmp_path / f"{mode}-{k['processes']}-{k['delivery_grid_us']}.yml")
    p = subprocess.run([str(SIM), "--config", str(yml), "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["finished"] and r["committed"] > 0
    return r


def test_a_wakeup_is_a_process_and_a_cell_not_an_event(tmp_path):
    # Janus sets no timers here: every wake-up is a message falling due, so there are at most as many as messages,
    # and fewer, as messages to one process in one grid cell (a shard's replicas answer together) share one
    r = sim(tmp_path, "janus")
    msgs = sum(v for k, v in r.items() if k.startswith("msgs_"))
    assert 0 < r["wakeups"] < msgs


def test_a_coarser_grid_and_fewer_processes_need_fewer_wakeups(tmp_path):
    # (not exact >= grid: a message goes to its nearest cell end, a timer to the next, so a message and a timer due
    # at one moment may fall in two cells)
    exact, grid, coarse = (sim(tmp_path, delivery_grid_us=g)["wakeups"] for g in (0, 250, 5000))
    assert exact > coarse and grid > coarse
    alone = sim(tmp_path, processes="node")   # every node a process of its own
    shared = sim(tmp_path)
    assert alone["committed"] == shared["committed"]   # the same run: only the count of processes differs
    assert alone["wakeups"] > shared["wakeups"]
