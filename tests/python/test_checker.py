import json
import subprocess
import sys

import pytest

from testbed.analysis import checker
from testbed.core import deploy

from conftest import REPO


def tpcc_dump(node, shard, replica):
    # 2 warehouses x 10 districts; each customer district paid 30000.00 of HISTORY, half of it stored on the
    # other warehouse (remote payments), and 900 of its 3000 orders are undelivered
    districts = [{"d_id": i, "d_ytd": 30000.0, "d_next_o_id": 3001, "max_o_id": 3000, "max_no_o_id": 3000,
                  "min_no_o_id": 2101, "no_count": 900, "sum_ol_cnt": 30123, "ol_count": 30123,
                  "o_count": 3000, "o_null_carrier": 900, "no_with_carrier": 0, "ol_cnt_mismatch": 0,
                  "ol_delivery_mismatch": 0, "sum_h_amount": 30000.0, "delivered_at_load": 2100, "deliveries": 0,
                  "sum_c_balance": -29000.0, "sum_delivered_ol_amount": 1000.0, "c_balance_mismatch": 0}
                 for i in range(10)]
    paid = {f"{w}:{i}": 15000.0 for w in (0, 1) for i in range(10)}
    return {"node": node, "shard": shard, "replica": replica, "workload": "tpcc", "digest": f"dig{shard}",
            "rows": {"warehouse": 1, "district": 10}, "executed_pieces": 5,
            "tpcc": {"warehouses": [{"w_id": shard, "w_ytd": 300000.0, "sum_h_amount": 300000.0,
                                     "h_by_customer_district": paid, "districts": districts}]}}


def tpca_dump(node, shard, replica, delta=7):
    tables = {t: {"sum": 1000 + delta, "initial_sum": 1000, "applied_delta": delta, "applied_count": 3}
              for t in ("customer", "teller", "branch")}
    return {"node": node, "shard": shard, "replica": replica, "workload": "tpca", "digest": f"dig{shard}",
            "rows": {"customer": 10}, "tpca": {"tables": tables}}


def make_run(tmp_path, make=tpcc_dump, mutate=None, with_deploy=True):
    """1 region x 2 shards x 3 replicas; mutate(dumps) may edit the dumps before writing."""
    (tmp_path / "servers").mkdir(parents=True)
    if with_deploy:
        deploy.write_yaml(deploy.build_deployment(regions=1, shards=2), tmp_path / "deploy.yml")
    dumps = {f"s0.{s}.{r}": make(f"s0.{s}.{r}", s, r) for s in range(2) for r in range(3)}
    if mutate:
        mutate(dumps)
    for name, d in dumps.items():
        (tmp_path / "servers" / f"{name}.state.json").write_text(json.dumps(d))
    return tmp_path


def run_cli(run):
    return subprocess.run([sys.executable, "-m", "testbed.analysis.checker", str(run)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_consistent_run(tmp_path):
    run = make_run(tmp_path)
    p = run_cli(run)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == "CONSISTENT"
    res = json.loads((run / "check.json").read_text())
    assert res["verdict"] == "CONSISTENT" and res["dumps"] == 6 and res["shards"] == 2


def all_replicas(fn):
    def mutate(dumps):
        for d in dumps.values():
            if d["shard"] == 1:
                fn(d)
    return mutate


@pytest.mark.parametrize("mutate,needle", [
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0].update(w_ytd=300001.0)), "3.3.2.1"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(d_next_o_id=3005)), "3.3.2.2"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(no_count=899)), "3.3.2.3"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(ol_count=30122)), "3.3.2.4"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(o_null_carrier=899)), "3.3.2.5"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(no_with_carrier=1)), "3.3.2.5"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(ol_cnt_mismatch=2)), "3.3.2.6"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(ol_delivery_mismatch=1)), "3.3.2.7"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0].update(sum_h_amount=299999.99)), "3.3.2.8"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(sum_h_amount=29000.0)), "3.3.2.9"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["h_by_customer_district"].update({"0:3": 15000.01})),
     "3.3.2.10"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(deliveries=1)), "3.3.2.11"),
    (all_replicas(lambda d: d["tpcc"]["warehouses"][0]["districts"][3].update(c_balance_mismatch=1)), "3.3.2.12"),
    (lambda dumps: dumps["s0.1.2"].update(digest="other"), "digest of s0.1.2"),
    (lambda dumps: dumps["s0.0.1"]["rows"].update(district=11), "aggregates of s0.0.1"),
])
def test_tpcc_violations(tmp_path, mutate, needle):
    run = make_run(tmp_path, mutate=mutate)
    p = run_cli(run)
    assert p.returncode == 1
    assert needle in p.stdout and "INCONSISTENT" in p.stdout.splitlines()[-1]
    res = json.loads((run / "check.json").read_text())
    assert res["exit_code"] == 1 and any(needle in v for v in res["violations"])


def test_tpca_consistent_and_delta_mismatches(tmp_path):
    assert checker.check_run(make_run(tmp_path / "a", make=tpca_dump))["exit_code"] == 0

    def per_table(dumps):  # sum moved but applied_delta did not
        for r in range(3):
            dumps[f"s0.0.{r}"]["tpca"]["tables"]["teller"]["sum"] += 1
    res = checker.check_run(make_run(tmp_path / "b", make=tpca_dump, mutate=per_table))
    assert res["exit_code"] == 1 and any("teller" in v and "applied_delta" in v for v in res["violations"])

    def cross_table(dumps):  # branch got one delta too many on shard 1 (self-consistent per table)
        for r in range(3):
            t = dumps[f"s0.1.{r}"]["tpca"]["tables"]["branch"]
            t["sum"] += 5
            t["applied_delta"] += 5
    p = run_cli(make_run(tmp_path / "c", make=tpca_dump, mutate=cross_table))
    assert p.returncode == 1 and "total deltas differ" in p.stdout


def test_unreadable_inputs_exit_2(tmp_path):
    run = make_run(tmp_path / "a")
    (run / "servers" / "s0.0.0.state.json").write_text("{not json")
    p = run_cli(run)
    assert p.returncode == 2 and "s0.0.0.state.json" in p.stderr and "UNREADABLE" in p.stdout
    assert json.loads((run / "check.json").read_text())["exit_code"] == 2

    run = make_run(tmp_path / "b")
    (run / "servers" / "s0.1.1.state.json").unlink()
    p = run_cli(run)
    assert p.returncode == 2 and "s0.1.1" in p.stderr

    assert run_cli(tmp_path / "nonexistent").returncode == 2
    (tmp_path / "empty").mkdir()
    assert run_cli(tmp_path / "empty").returncode == 2

    def drop_section(dumps):
        del dumps["s0.0.0"]["tpcc"]
    assert checker.check_run(make_run(tmp_path / "c", mutate=drop_section))["exit_code"] == 2


def test_older_dumps_without_the_new_aggregates_are_still_checked(tmp_path):
    def strip(dumps):
        for d in dumps.values():
            w = d["tpcc"]["warehouses"][0]
            del w["sum_h_amount"], w["h_by_customer_district"]
            for dd in w["districts"]:
                for k in ("o_count", "o_null_carrier", "no_with_carrier", "ol_cnt_mismatch", "ol_delivery_mismatch",
                          "sum_h_amount", "delivered_at_load", "deliveries", "sum_c_balance",
                          "sum_delivered_ol_amount", "c_balance_mismatch"):
                    del dd[k]
    res = checker.check_run(make_run(tmp_path, mutate=strip))
    assert res["exit_code"] == 0, res["violations"]
    assert res["checks"]["order"]["verdict"] == "skipped" and "no execution histories" in res["checks"]["order"]["reason"]


def test_unfinished_transactions_and_process_facts_fail_the_run_retry_exhaustion_is_a_note(tmp_path):
    def facts(dumps):
        dumps["s0.0.1"]["process"] = {"rejected_messages": 2, "drain_timed_out": False}
    run = make_run(tmp_path, mutate=facts)   # a 10 s run (deploy.build_deployment's default duration)
    (run / "clients").mkdir()
    # txn 8 used all 20 attempts (the deployment's retry limit): given up by an aborting protocol, a note;
    # txn 9 was given up unfinished after 3 attempts (a record from before `abandoned`): a violation;
    # txn 10 was abandoned at the drain, sent at 10.5 s (after the run's end: an open load's waiting arrival): a note;
    # txn 11 was abandoned at the drain although sent at 9 s: unanswered through the whole drain, a violation
    (run / "clients" / "c0.0.0.records.csv").write_text(
        "txn_id,type,type_name,class,start_us,latency_us,attempts,status,outputs,session,sent_us\n"
        "7,0,new_order,IRT,1,2,1,committed,00aa,0,1\n8,1,payment,CRT,3,4,20,given_up,,0,3\n"
        "9,1,payment,IRT,5,6,3,given_up,,0,5\n10,0,new_order,IRT,9000000,11000000,1,abandoned,,1,10500000\n"
        "11,1,payment,IRT,9000000,11000000,1,abandoned,,2,9000000\n")
    (run / "clients" / "c0.0.0.summary.json").write_text(json.dumps({"interrupted": True, "open_loop": {
        "rate_tps": 1000.0, "arrivals": 400, "shed": 7, "unsent": 3}}))
    p = run_cli(run)
    assert p.returncode == 1
    stuck = ("2 transaction(s) sent before the run's end were still unanswered when the drain timeout ran out: "
             "txn 9 (payment, c0.0.0), txn 11 (payment, c0.0.0)")
    assert f"[run] {stuck}" in p.stdout
    assert "[note] 1 transaction(s) given up after the retry limit" in p.stdout and "txn 8 (payment" in p.stdout
    assert ("[note] could not keep up with the offered load: 7 arrival(s) shed (client.max_outstanding), 3 "
            "arrival(s) never sent (still waiting at the drain), 1 transaction(s) abandoned in flight at the drain "
            "(outcome unknown: checked as possibly committed)") in p.stdout
    assert "txn 10" not in p.stdout
    assert "[run] s0.0.1: rejected 2 message(s) (bad message)" in p.stdout
    assert "[run] c0.0.0: interrupted before its run finished" in p.stdout
    res = json.loads((run / "check.json").read_text())
    assert res["checks"]["run"] == {"verdict": "fail", "violations": 3, "reason": stuck}
    assert res["given_up_after_retries"] == 1 and "txn 8 (payment, c0.0.0)" in res["notes"][0]
    assert res["abandoned_at_drain"] == 1 and res["overloaded"] is True
    assert res["checks"]["replicas"]["verdict"] == "pass"


def test_a_process_of_several_nodes_is_blamed_once_for_its_own_facts(tmp_path):
    """Every node of an engine process carries the process's facts (drops, drain); the run fails once for each,
    naming the process; what a node rejected itself stays its own."""
    def facts(dumps):
        for n in ("s0.0.0", "s0.0.1", "s0.0.2"):
            dumps[n]["process"] = {"name": "srv0.0", "dropped_messages": 4, "drain_timed_out": True,
                                   "rejected_messages": 1 if n == "s0.0.2" else 0}
    p = run_cli(make_run(tmp_path, mutate=facts))
    assert p.returncode == 1
    lines = [x for x in p.stdout.splitlines() if x.startswith("[run]")]
    assert sum("dropped 4 message(s) to servers" in x for x in lines) == 1, lines
    assert sum("still busy when its 10 s drain ran out" in x for x in lines) == 1, lines
    assert "[run] s0.0.0 (process srv0.0): dropped 4 message(s) to servers that were never lost (4 to a process it did not name)" in lines
    assert "[run] s0.0.2 (process srv0.0): rejected 1 message(s) (bad message)" in lines


def test_connections_refused_from_outside_the_deployment_are_a_note_not_a_violation(tmp_path):
    """Junk from a stranger (a connection without the deployment's token: the transport never read it) is no fault
    of the protocol: said once per process, in the notes."""
    def facts(dumps):
        for n in ("s0.0.0", "s0.0.1"):
            dumps[n]["process"] = {"name": "srv0.0", "junk_connections": 3, "junk_from": "127.0.0.1:40000"}
    p = run_cli(make_run(tmp_path, mutate=facts))
    assert p.returncode == 0, p.stdout
    notes = [x for x in p.stdout.splitlines() if "outside the deployment" in x]
    assert notes == ["[note] s0.0.0 (process srv0.0): refused 3 connection(s) from outside the deployment (first "
                     "from 127.0.0.1:40000; not opened with the deployment's token)"], p.stdout


def test_the_realtime_margin_option_is_checked_before_anything(tmp_path, capsys):
    assert checker.main([str(tmp_path), "--realtime-margin-ms", "-1"]) == 2
    assert "--realtime-margin-ms -1: must be in [0, 60000]" in capsys.readouterr().err
    assert checker.main([str(tmp_path), "--realtime-margin-ms", "x"]) == 2
