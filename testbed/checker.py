"""Consistency checker over replica state dumps (docs/checker.md).

Usage: python -m testbed.checker RUN_DIR   -> exit 0 CONSISTENT, 1 INCONSISTENT, 2 unreadable input.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import yaml

TPCA_TABLES = ("customer", "teller", "branch")
EPS = 0.01


class Unreadable(Exception):
    pass


def load_dumps(run_dir) -> list[dict]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise Unreadable(f"{run_dir}: not a directory")
    d = run_dir / "servers" if (run_dir / "servers").is_dir() else run_dir
    files = sorted(d.glob("*.state.json"))
    expected = set()
    if (run_dir / "deploy.yml").is_file():
        try:
            nodes = yaml.safe_load((run_dir / "deploy.yml").read_text())["nodes"]
            expected = {n["name"] for n in nodes if n["kind"] == "replica"}
        except Exception as e:  # noqa: BLE001
            raise Unreadable(f"deploy.yml: {e}") from e
    if not files:
        raise Unreadable(f"{d}: no *.state.json dumps")
    dumps = []
    for f in files:
        try:
            dump = json.loads(f.read_text())
            for key in ("node", "shard", "digest", "workload"):
                if key not in dump:
                    raise ValueError(f"missing key {key!r}")
        except (OSError, ValueError) as e:
            raise Unreadable(f"{f.name}: {e}") from e
        dumps.append(dump)
    missing = expected - {x["node"] for x in dumps}
    if missing:
        raise Unreadable(f"missing state dump(s) for {', '.join(sorted(missing))}")
    return dumps


def _aggregates(dump: dict) -> dict:
    return {"rows": dump.get("rows"), dump["workload"]: dump.get(dump["workload"])}


def check_replicas(dumps) -> list[str]:
    v, by_shard = [], defaultdict(list)
    for d in dumps:
        by_shard[d["shard"]].append(d)
    for shard, ds in sorted(by_shard.items()):
        ref = ds[0]
        for d in ds[1:]:
            if d["digest"] != ref["digest"]:
                v.append(f"shard {shard}: digest of {d['node']} ({d['digest']}) != {ref['node']} ({ref['digest']})")
            elif _aggregates(d) != _aggregates(ref):
                v.append(f"shard {shard}: aggregates of {d['node']} differ from {ref['node']}")
    return v


def check_tpcc(dump: dict) -> list[str]:
    v, node = [], dump["node"]
    for w in dump["tpcc"]["warehouses"]:
        dsum = sum(d["d_ytd"] for d in w["districts"])
        if abs(w["w_ytd"] - dsum) > EPS:
            v.append(f"{node}: 3.3.2.1 w {w['w_id']}: w_ytd {w['w_ytd']} != sum(d_ytd) {dsum}")
        for d in w["districts"]:
            where = f"{node}: w {w['w_id']} d {d['d_id']}"
            if d.get("max_o_id") is not None and d["d_next_o_id"] - 1 != d["max_o_id"]:
                v.append(f"{where}: 3.3.2.2 d_next_o_id-1 {d['d_next_o_id'] - 1} != max_o_id {d['max_o_id']}")
            if d["no_count"] > 0:
                if d["d_next_o_id"] - 1 != d["max_no_o_id"]:
                    v.append(f"{where}: 3.3.2.2 d_next_o_id-1 {d['d_next_o_id'] - 1} != max_no_o_id {d['max_no_o_id']}")
                if d["max_no_o_id"] - d["min_no_o_id"] + 1 != d["no_count"]:
                    v.append(f"{where}: 3.3.2.3 max_no_o_id-min_no_o_id+1 "
                             f"{d['max_no_o_id'] - d['min_no_o_id'] + 1} != no_count {d['no_count']}")
            if d["sum_ol_cnt"] != d["ol_count"]:
                v.append(f"{where}: 3.3.2.4 sum(o_ol_cnt) {d['sum_ol_cnt']} != count(order_line) {d['ol_count']}")
    return v


def check_tpca(dumps) -> list[str]:
    v, per_shard = [], {}
    for dump in dumps:
        for t in TPCA_TABLES:
            x = dump["tpca"]["tables"][t]
            if abs(x["sum"] - x["initial_sum"] - x["applied_delta"]) > EPS:
                v.append(f"{dump['node']}: tpca {t}: sum-initial_sum {x['sum'] - x['initial_sum']} "
                         f"!= applied_delta {x['applied_delta']}")
        per_shard.setdefault(dump["shard"], dump)  # one replica per shard for the global sums
    totals = {t: sum(d["tpca"]["tables"][t]["applied_delta"] for d in per_shard.values()) for t in TPCA_TABLES}
    if max(totals.values()) - min(totals.values()) > EPS:
        v.append("tpca: total deltas differ across tables: " + ", ".join(f"{t} {x}" for t, x in totals.items()))
    return v


def check(dumps) -> list[str]:
    v = check_replicas(dumps)
    try:
        workloads = {d["workload"] for d in dumps}
        if len(workloads) != 1:
            raise Unreadable(f"dumps disagree on the workload: {sorted(workloads)}")
        wl = workloads.pop()
        if wl == "tpcc":
            for d in dumps:
                v += check_tpcc(d)
        elif wl == "tpca":
            v += check_tpca(dumps)
        else:
            raise Unreadable(f"unknown workload {wl!r}")
    except (KeyError, TypeError, AttributeError) as e:
        raise Unreadable(f"malformed dump section: {type(e).__name__} {e}") from e
    return v


def check_run(run_dir, write: bool = True) -> dict:
    """Check a run folder; returns {'verdict', 'exit_code', 'violations', ...} and writes check.json."""
    try:
        dumps = load_dumps(run_dir)
        violations = check(dumps)
        verdict = "CONSISTENT" if not violations else f"INCONSISTENT ({len(violations)} violations)"
        res = {"verdict": verdict, "exit_code": 1 if violations else 0, "violations": violations,
               "dumps": len(dumps), "shards": len({d["shard"] for d in dumps}), "workload": dumps[0]["workload"]}
    except Unreadable as e:
        res = {"verdict": "UNREADABLE", "exit_code": 2, "violations": [], "error": str(e)}
    if write and Path(run_dir).is_dir():
        Path(run_dir, "check.json").write_text(json.dumps(res, indent=2) + "\n")
    return res


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m testbed.checker RUN_DIR", file=sys.stderr)
        return 2
    res = check_run(argv[0])
    for line in res["violations"]:
        print(line)
    if res["exit_code"] == 2:
        print(f"checker: error: {res['error']}", file=sys.stderr)
    print(res["verdict"])
    return res["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
