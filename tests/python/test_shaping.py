"""tc command plans (pure), their application, the netem probe and the mechanism choice."""
import math

import pytest

from testbed.cluster import shaping
from testbed.core.config import load_exp_config
from testbed.cluster.shaping import choose_mechanism, may_fail, netem_supported, tc_plan, tc_plan_for, to_shell

M3 = [[5, 100, 100], [100, 5, 100], [100, 100, 5]]
PRIOMAP = "1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1".split()


def cmd(s):
    return s.split()


def test_region2_view_of_3_regions_exact():
    plan = tc_plan(2, 3, M3, jitter_ms=10, distribution="normal", limit=100000, exempt_ports=(22,))
    f = "tc filter add dev eth0 parent 1: protocol ip"
    fl = "tc filter add dev lo parent 1: protocol ip"
    assert plan == [cmd(s) for s in [
        "tc qdisc del dev eth0 root",
        "ip link set dev eth0 txqueuelen 1000",
        "tc qdisc add dev eth0 root handle 1: prio bands 5 priomap " + " ".join(PRIOMAP),
        "tc qdisc add dev eth0 parent 1:4 handle 40: netem delay 2.5ms limit 100000",
        "tc qdisc add dev eth0 parent 1:5 handle 50: netem delay 50ms 7.071ms distribution normal limit 100000",
        f"{f} prio 1 u32 match ip sport 22 0xffff flowid 1:1",
        f"{f} prio 1 u32 match ip dport 22 0xffff flowid 1:1",
        f"{f} prio 2 u32 match ip dst 10.55.1.0/24 flowid 1:5",
        f"{f} prio 2 u32 match ip dst 10.55.2.0/24 flowid 1:4",
        f"{f} prio 2 u32 match ip dst 10.55.3.0/24 flowid 1:5",
        "tc qdisc del dev lo root",
        "tc qdisc add dev lo root handle 1: prio bands 4 priomap " + " ".join(PRIOMAP),
        "tc qdisc add dev lo parent 1:4 handle 40: netem delay 2.5ms limit 100000",
        f"{fl} prio 1 u32 match ip sport 22 0xffff flowid 1:1",
        f"{fl} prio 1 u32 match ip dport 22 0xffff flowid 1:1",
        f"{fl} prio 2 u32 match u32 0 0 flowid 1:4",
    ]]
    assert all(a[0] in ("tc", "ip") for a in plan)
    # only the two root deletions may fail, and they come first on each device
    assert [a for a in plan if may_fail(a)] == [cmd("tc qdisc del dev eth0 root"), cmd("tc qdisc del dev lo root")]


def netems(plan, dev="eth0"):
    return [a for a in plan if a[:5] == ["tc", "qdisc", "add", "dev", dev] and "netem" in a]


@pytest.mark.parametrize("jitter,side", [(10, "7.071ms"), (20, "14.142ms"), (1, "0.707ms")])
def test_jitter_is_split_per_side(jitter, side):
    (intra, inter), = [netems(tc_plan(1, 3, M3, jitter, "pareto", 500))]
    assert intra[intra.index("delay") + 1:] == ["2.5ms", "limit", "500"]  # own region: no jitter
    assert inter[inter.index("delay") + 1:] == ["50ms", side, "distribution", "pareto", "limit", "500"]
    assert float(side[:-2]) == pytest.approx(jitter / math.sqrt(2), abs=1e-3)


def test_no_jitter_no_distribution_but_limit_everywhere():
    plan = tc_plan(1, 3, M3, 0, "normal", 1234)
    for a in netems(plan) + netems(plan, "lo"):
        assert "distribution" not in a and a[-2:] == ["limit", "1234"]


def test_control_ports_exempt_both_directions_before_region_filters():
    plan = tc_plan(3, 3, M3, exempt_ports=(22, 19000))
    eth = [a for a in plan if a[:3] == ["tc", "filter", "add"] and a[4] == "eth0"]
    exempt = [(a[a.index("match") + 2], a[a.index("match") + 3]) for a in eth if a[-1] == "1:1"]
    assert exempt == [("sport", "22"), ("dport", "22"), ("sport", "19000"), ("dport", "19000")]
    assert all(a[a.index("prio") + 1] == "1" for a in eth if a[-1] == "1:1")
    assert all(a[a.index("prio") + 1] == "2" for a in eth if a[-1] != "1:1")  # evaluated after exemptions
    lo = [a for a in plan if a[:3] == ["tc", "filter", "add"] and a[4] == "lo" and a[-1] == "1:1"]
    assert len(lo) == 4


def test_unmatched_traffic_keeps_default_priomap():
    root = [a for a in tc_plan(1, 3, M3) if "prio" in a and "root" in a and "eth0" in a][0]
    assert root[root.index("priomap") + 1:] == PRIOMAP and set(PRIOMAP) <= {"0", "1", "2"}
    dsts = [a[a.index("dst") + 1] for a in tc_plan(1, 3, M3) if "dst" in a]
    assert dsts == ["10.55.1.0/24", "10.55.2.0/24", "10.55.3.0/24"]  # driver's 10.55.0.0/24 never matched


def test_distinct_classes_grouped_by_delay():
    m = [[5, 80, 100, 100], [80, 5, 100, 100], [100, 100, 5, 100], [100, 100, 100, 5]]
    plan = tc_plan(1, 4, m, subnet_prefix="10.9")
    assert [a[a.index("delay") + 1] for a in netems(plan)] == ["2.5ms", "40ms", "50ms"]
    assert "bands" in plan[2] and plan[2][plan[2].index("bands") + 1] == "6"
    flow = {a[a.index("dst") + 1]: a[-1] for a in plan if "dst" in a}
    assert flow == {"10.9.1.0/24": "1:4", "10.9.2.0/24": "1:5", "10.9.3.0/24": "1:6", "10.9.4.0/24": "1:6"}
    # without jitter a cross-region link as fast as the own region shares its class
    same = tc_plan(1, 2, [[5, 5], [5, 5]])
    assert len(netems(same)) == 1 and {a[-1] for a in same if "dst" in a} == {"1:4"}
    # with jitter it does not (cross-region links are jittered, the own region is not)
    assert len(netems(tc_plan(1, 2, [[5, 5], [5, 5]], jitter_ms=1))) == 2


def test_lo_uses_own_region_intra_delay():
    m = [[4, 100], [100, 12]]
    for region, delay in ((1, "2ms"), (2, "6ms")):
        (lo,) = netems(tc_plan(region, 2, m, jitter_ms=10), "lo")
        assert lo[lo.index("delay") + 1:] == [delay, "limit", "100000"]


def test_bad_inputs():
    with pytest.raises(ValueError, match="my_region"):
        tc_plan(0, 3, M3)
    with pytest.raises(ValueError, match="3 x 3"):
        tc_plan(1, 3, M3[:2])
    many = [[float(i + j) for j in range(15)] for i in range(15)]  # 15 distinct delays
    with pytest.raises(ValueError, match="at most 13"):
        tc_plan(1, 15, many)


def test_plan_from_config_uses_overrides_ports_and_prefix():
    cfg = load_exp_config({"RTT_OVERRIDES": {(2, 1): 80}, "ROBUST_RTT_VAR": [0, 20], "CONTROL_PORTS": [22],
                           "SUBNET": "10.77.0.0/16", "DRIVER_IP": "10.77.0.240", "NETEM_LIMIT": 777,
                           "SCALABILITY_N_REGIONS": [3]})
    plan = tc_plan_for(cfg, 1, jitter_ms=20)
    assert [a[a.index("delay") + 1:a.index("delay") + 3] for a in netems(plan)] == [
        ["2.5ms", "limit"], ["40ms", "14.142ms"], ["50ms", "14.142ms"]]
    assert {a[a.index("dst") + 1] for a in plan if "dst" in a} == {f"10.77.{r}.0/24" for r in (1, 2, 3)}
    assert all(a[-1] == "777" for a in netems(plan))


def test_plan_from_config_covers_every_region_deployed():
    # exp 4 runs on the first k of the regions deployed: every container's plan shapes traffic to all of them
    cfg = load_exp_config({"REGIONS": 3, "SCALABILITY_N_REGIONS": [3, 5]})
    plan = tc_plan_for(cfg, 4)
    assert {a[a.index("dst") + 1] for a in plan if "dst" in a} == {f"10.55.{r}.0/24" for r in range(1, 6)}


def test_to_shell_and_apply_ignore_only_deletions():
    plan = tc_plan(1, 2, [[5, 100], [100, 5]])
    sh = to_shell(plan).splitlines()
    assert sh[1] == "tc qdisc del dev eth0 root 2>/dev/null || true" and sh[2].startswith("ip link set")
    seen = []

    def run(argv):
        seen.append(argv)
        return (2, "Error: Cannot delete qdisc with handle of zero.") if may_fail(argv) else (0, "")
    shaping.apply(plan, run)
    assert seen == plan

    def broken(argv):
        return (2, "Error: Specified qdisc kind is unknown.") if "netem" in argv else (0, "")
    with pytest.raises(RuntimeError, match="kind is unknown"):
        shaping.apply(plan, broken)


class FakeRunner:
    def __init__(self, fail_on=()):
        self.calls, self.fail_on = [], fail_on

    def __call__(self, argv):
        self.calls.append(" ".join(argv))
        for word, out in self.fail_on:
            if word in argv:
                return 2, out
        return 0, ""


def test_netem_probe_supported_cleans_up():
    run = FakeRunner(fail_on=[("del", "Cannot find device")])  # no leftover device, deletes 'fail'
    ok, _ = netem_supported(run)
    assert ok
    assert "ip link add edgeprobe0 type dummy" in run.calls
    assert "tc qdisc add dev edgeprobe0 root netem delay 1ms" in run.calls
    assert run.calls[-1] == "ip link del edgeprobe0"


def test_netem_probe_unknown_qdisc_and_no_net_admin():
    run = FakeRunner(fail_on=[("netem", "Error: Specified qdisc kind is unknown.")])
    ok, detail = netem_supported(run)
    assert not ok and "kind is unknown" in detail and run.calls[-1] == "ip link del edgeprobe0"
    ok, detail = netem_supported(FakeRunner(fail_on=[("add", "RTNETLINK answers: Operation not permitted")]))
    assert not ok and "NET_ADMIN" in detail


def test_choose_mechanism(capsys):
    logged = []
    assert choose_mechanism("auto", (True, "netem available"), logged.append)[0] == "netem"
    assert logged == []
    mech, msg = choose_mechanism("auto", netem_supported(FakeRunner([("netem", "qdisc kind is unknown")])))
    assert mech == "app" and "falling back" in msg and "qdisc kind is unknown" in msg
    assert "falling back to SHAPING='app'" in capsys.readouterr().err
    assert choose_mechanism("app", None, logged.append)[0] == "app" and logged == []
    assert choose_mechanism("netem", True)[0] == "netem"
    with pytest.raises(RuntimeError, match="SHAPING='netem'.*kind is unknown"):
        choose_mechanism("netem", (False, "qdisc kind is unknown"))
    with pytest.raises(ValueError, match="SHAPING"):
        choose_mechanism("tc", True)
