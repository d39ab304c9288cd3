"""tc netem on a real kernel (issue 18): the swarm's tc plans, generated and applied by the same code as in a
container (testbed/cluster/shaping.py: to_shell(tc_plan_for(...)), run by sh), on a stock Debian kernel in a
QEMU VM (this machine's kernel has no netem), to network namespaces standing for containers of three regions.
Checked: every plan is accepted, the qdisc tree is as planned, packets to each destination region are counted in
that region's netem class (tc -s), control ports are exempt, loopback is shaped for co-located processes, RTTs are
within wide bounds (TCG's timers are coarse), and the jitter distributions are accepted."""
import re
import statistics

import pytest

import netem_vm
from testbed.cluster import shaping
from testbed.core.config import load_exp_config

pytestmark = pytest.mark.slow

COUNT = 10
CFG = dict(REGIONS=3, SHARDS_PER_REGION=2, INTRA_RTT_MS=5, INTER_RTT_MS=100, RTT_OVERRIDES={(1, 3): 60},
           ROBUST_RTT_VAR=[0])
# c<region><shard>, at <prefix>.<region>.<shard> as the swarm places them
NSS = {"c11": (1, "10.55.1.1"), "c12": (1, "10.55.1.2"), "c21": (2, "10.55.2.1"), "c31": (3, "10.55.3.1")}
JITTERED = {"jn": "normal", "jp": "pareto", "jq": "paretonormal"}


def measure() -> str:
    x = "ip netns exec"
    lines = []
    for label, dst in (("intra", "10.55.1.2"), ("r2", "10.55.2.1"), ("r3", "10.55.3.1"), ("lo", "127.0.0.1")):
        lines.append(f"echo '== ping {label}'; {x} c11 ping -c {COUNT} -i 0.3 {dst}")
    for port in (22, 19000):  # control ports: a TCP connect to each (SYN out of c11, RST back out of c21)
        lines.append(f"for i in $(seq {COUNT}); do {x} c11 nc -w 1 10.55.2.1 {port} </dev/null 2>/dev/null; done")
    for ns in ("c11", "c21"):
        for what in ("qdisc", "class"):
            for dev in ("eth0", "lo"):
                lines.append(f"echo '== {ns} {what} {dev}'; {x} {ns} tc -s {what} show dev {dev}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def vm(tmp_path_factory):
    why = netem_vm.missing()
    if why:
        pytest.skip(f"netem VM: {why}")
    cfg = load_exp_config(CFG)
    nss = [netem_vm.Netns(n, ip, shaping.to_shell(shaping.tc_plan_for(cfg, r))) for n, (r, ip) in NSS.items()]
    for k, (n, dist) in enumerate(JITTERED.items()):
        jcfg = load_exp_config({**CFG, "JITTER_MS": 10, "JITTER_DISTRIBUTION": dist})
        nss.append(netem_vm.Netns(n, f"10.55.2.{20 + k}", shaping.to_shell(shaping.tc_plan_for(jcfg, 2))))
    d = tmp_path_factory.mktemp("netem-vm")
    out = netem_vm.boot(netem_vm.build_initramfs(nss, measure(), d / "initramfs.cpio.gz"))
    (d / "console.txt").write_text(out)
    print(out)
    return out


def section(out: str, title: str) -> str:
    return out.split(f"== {title}\n", 1)[1].split("\n== ", 1)[0]


def sent(text: str) -> dict[str, int]:
    """'netem 40:' / 'prio 1:1' -> packets sent, from tc -s output."""
    out, key = {}, None
    for line in text.splitlines():
        m = re.match(r"(?:qdisc|class) (\w+) ([0-9a-f]+:[0-9a-f]*)", line)
        if m:
            key = f"{m.group(1)} {m.group(2)}"
        m = re.match(r"\s*Sent \d+ bytes (\d+) pkt", line)
        if m and key:
            out[key] = int(m.group(1))
    return out


def rtts(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", text)]


def test_every_plan_is_accepted_on_a_stock_kernel(vm):
    assert re.search(r"kernel 6\.", vm), vm[:200]
    for n in [*NSS, *JITTERED]:
        assert f"plan-ok {n}" in vm, vm
    assert "insmod-failed" not in vm


def test_the_qdisc_tree_is_the_plan(vm):
    q = section(vm, "c11 qdisc eth0")
    assert re.search(r"qdisc prio 1: root .*bands 6", q), q
    # classes by (one-way delay, jitter), smallest first: own region 2.5 ms, region 3 30 ms, region 2 50 ms
    for handle, delay in (("40:", "2.5ms"), ("50:", "30ms"), ("60:", "50ms")):
        assert re.search(rf"qdisc netem {handle} parent 1:{handle[0]} limit \d+ delay {delay}", q), q
    lo = section(vm, "c11 qdisc lo")
    assert re.search(r"qdisc netem 40: parent 1:4 limit \d+ delay 2.5ms", lo), lo


def test_packets_are_counted_in_their_destination_regions_class(vm):
    got = sent(section(vm, "c11 qdisc eth0"))
    assert got["netem 40:"] == COUNT   # echo requests to c12 (own region)
    assert got["netem 50:"] == COUNT   # to region 3
    assert got["netem 60:"] == COUNT   # to region 2
    back = sent(section(vm, "c21 qdisc eth0"))
    # c21's tree: own region 2.5 ms (40:), regions 1 and 3 both 100 ms (one class, 50:): the replies to c11
    assert back["netem 50:"] == COUNT


def test_control_ports_are_not_delayed(vm):
    out = sent(section(vm, "c11 class eth0"))
    assert out["prio 1:1"] >= 2 * COUNT        # SYNs to ports 22 and 19000
    back = sent(section(vm, "c21 class eth0"))
    assert back["prio 1:1"] >= 2 * COUNT       # the RSTs from them
    netem = sent(section(vm, "c11 qdisc eth0"))
    assert netem["netem 60:"] == COUNT         # region 2's class saw the pings only


def test_loopback_is_shaped_for_co_located_processes(vm):
    lo = sent(section(vm, "c11 qdisc lo"))
    assert lo["netem 40:"] >= 2 * COUNT         # requests and replies both leave through lo


def test_rtts_follow_the_plan_within_wide_bounds(vm):
    med = {k: statistics.median(rtts(section(vm, f"ping {k}"))) for k in ("intra", "r2", "r3", "lo")}
    print(med)
    assert all(len(rtts(section(vm, f"ping {k}"))) == COUNT for k in med)
    assert 95 <= med["r2"] <= 250, med      # configured 100 ms (netem never delivers early)
    assert 57 <= med["r3"] <= 200, med      # configured 60 ms
    assert med["intra"] <= 40 and med["lo"] <= 40, med  # configured 5 ms
    assert med["r2"] > med["r3"] > med["intra"], med
