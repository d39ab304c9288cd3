"""Stand-in for build/txn-server and build/txn-client that follows the process contract
(docs/deploy-schema.md), so the local launcher can be tested without the C++ build.
FAKE_FAIL=early:<name> makes <name> exit 1 before READY; FAKE_FAIL=die:<name> makes it die mid-run."""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

import yaml

role = sys.argv[1]
ap = argparse.ArgumentParser()
ap.add_argument("--config")
ap.add_argument("--name")
ap.add_argument("--process")
ap.add_argument("--out")
ap.add_argument("--client-out")
a = ap.parse_args(sys.argv[2:])
d = yaml.safe_load(open(a.config))
# --process runs every node of that process (as the engine does), --name one node
nodes = ([n for n in d["nodes"] if n.get("process") == a.process] if a.process
         else [n for n in d["nodes"] if n["name"] == a.name])
node = nodes[0]
a.name = a.process or a.name
fail = os.environ.get("FAKE_FAIL", "")
os.makedirs(a.out, exist_ok=True)


def write_client_files(clients, out, dur):
    n = int(dur * 20)
    for node in clients:
        with open(os.path.join(out, f"{node['name']}.records.csv"), "w") as f:
            f.write("txn_id,type,type_name,class,start_us,latency_us,attempts,status\n")
            for i in range(n):
                crt = i % 5 == 0
                f.write(f"{i},0,{'Payment' if crt else 'NewOrder'},{'CRT' if crt else 'IRT'},{i * 50000},"
                        f"{150000 if crt else 20000},1,committed\n")
        with open(os.path.join(out, f"{node['name']}.summary.json"), "w") as f:
            json.dump({"node": node["name"], "n_records": n}, f)


if role == "server":
    if fail == f"early:{a.name}":
        print(f"txn-server: error: fake failure of {a.name}", file=sys.stderr)
        sys.exit(1)
    # a child in our process group that outlives us unless the launcher kills the group (or, like the engine's
    # processes, it dies with its parent: the launcher's parent-death signal reaches the fake server only)
    from testbed.core.interrupts import die_with_parent
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", a.config], preexec_fn=die_with_parent)
    stop, go = [], []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGUSR1, lambda *_: go.append(time.monotonic()))  # its clients start (a shared process)
    clients = [n for n in nodes if n["kind"] == "client"]
    for n in nodes:
        print(f"READY {n['name']} {node['host']}:{node['port']}", flush=True)
    print(f"READY {a.name} {node['host']}:{node['port']}", flush=True)
    t0, said_go = time.monotonic(), False
    while not stop:
        if fail == f"die:{a.name}" and time.monotonic() - t0 > 1.0:
            os._exit(1)
        if clients and go and not said_go:
            said_go = print(f"GO {a.name}", flush=True) or True
        if clients and go and time.monotonic() - go[0] >= d["client"]["duration_s"]:
            write_client_files(clients, a.client_out or a.out, d["client"]["duration_s"])
            print(f"DONE {a.name}", flush=True)
            clients = []
        time.sleep(0.05)
    for node in (n for n in nodes if n["kind"] == "replica"):
        gshard = node["region"] * d["shards_per_region"] + node["shard"]
        dump = {"node": node["name"], "shard": gshard, "replica": node["replica"], "workload": "tpcc",
                "digest": f"d{gshard}", "rows": {"warehouse": 1}, "executed_pieces": 10,
                "tpcc": {"warehouses": [{"w_id": gshard, "w_ytd": 300.0, "districts": [
                    {"d_id": i, "d_ytd": 30.0, "d_next_o_id": 31, "max_o_id": 30, "max_no_o_id": 30,
                     "min_no_o_id": 22, "no_count": 9, "sum_ol_cnt": 300, "ol_count": 300} for i in range(10)]}]}}
        with open(os.path.join(a.out, f"{node['name']}.state.json"), "w") as f:
            json.dump(dump, f)
    sys.exit(0)

dur = d["client"]["duration_s"]
time.sleep(dur)
write_client_files(nodes, a.out, dur)
