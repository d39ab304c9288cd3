"""exp_config.py loading: defaults, every bad value named with its range, the RTT matrix."""
import warnings
from pathlib import Path

import pytest

import exp_config
from testbed.core.config import ExpConfig, load_exp_config, rtt_matrix

REPO = Path(__file__).resolve().parents[2]


def test_shipped_exp_config_is_valid_and_fits_one_small_machine():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_exp_config()
    assert cfg == load_exp_config(exp_config) == load_exp_config(REPO / "exp_config.py")
    assert (cfg.regions, cfg.shards_per_region, cfg.replicas, cfg.n_repeat) == (3, 2, 3, 3)
    assert (cfg.max_regions, cfg.scalability_n_regions, cfg.seed) == (10, (3, 5, 7, 10), 1)
    assert (cfg.fixed_concurrency, cfg.scalability_concurrency) == (4, 2)
    assert cfg.shaping == "auto" and cfg.subnet_prefix == "10.55" and 22 in cfg.control_ports
    assert cfg.containers == "shard"   # a container per shard, unless CONTAINERS='replica'
    assert load_exp_config({"CONTAINERS": "replica", "SHARDS_PER_REGION": 63}).containers == "replica"
    assert cfg.systems == ("dast", "janus", "tapir", "slog")
    assert (cfg.retry_backoff_ms, cfg.variant_retry_backoff_ms) == (0, 100)   # tapir retries at once; tapir+backoff
    assert cfg.options_of("dast") == {"defer_commutative": True} and cfg.options_of("tapir") == {}
    # a file that leaves a setting out gets its default (testbed/core/knobs.py): no SYSTEMS means every built
    # protocol, no PROTOCOL_OPTIONS their registry defaults
    bare = load_exp_config({})
    assert bare.systems == () and bare.protocol_options == () and bare.concurrency_levels == (1, 2, 4)
    assert load_exp_config({"REGIONS": 5}).regions == 5 and bare.regions == 3
    with pytest.raises(Exception):
        cfg.regions = 4  # frozen


def test_as_dict_round_trips():
    cfg = load_exp_config({"RTT_OVERRIDES": {(1, 2): 80}, "ROBUST_RTT_VAR": [0, 20],
                           "PROTOCOL_OPTIONS": {"dast": {"defer_commutative": False, "ewma_alpha": 0.5}}})
    d = cfg.as_dict()
    assert d["rtt_overrides"] == [[1, 2, 80]] and d["systems"] == []
    assert d["protocol_options"] == {"dast": {"defer_commutative": False, "ewma_alpha": 0.5}}
    assert load_exp_config({k.upper(): v for k, v in d.items()}) == cfg


def test_loads_a_file_path(tmp_path):
    p = tmp_path / "my_config.py"
    p.write_text("import math\nREGIONS = 4\nSHARDS_PER_REGION = 1\nhelper = math.pi  # lower case: ignored\n")
    cfg = load_exp_config(p)
    assert (cfg.regions, cfg.shards_per_region) == (4, 1)
    with pytest.raises(ValueError, match="no such file"):
        load_exp_config(tmp_path / "missing.py")


def test_rtt_matrix_defaults_and_symmetric_overrides():
    assert rtt_matrix(load_exp_config({}), 3) == [[5, 100, 100], [100, 5, 100], [100, 100, 5]]
    cfg = load_exp_config({"REGIONS": 4, "RTT_OVERRIDES": {(3, 1): 80, (2, 4): 150, (4, 4): 2},
                           "ROBUST_RTT_VAR": [0, 20], "SCALABILITY_N_REGIONS": [3]})
    m = rtt_matrix(cfg)
    assert m == [[5, 100, 80, 100], [100, 5, 100, 150], [80, 100, 5, 100], [100, 150, 100, 2]]
    assert all(m[a][b] == m[b][a] for a in range(4) for b in range(4))
    assert rtt_matrix(cfg, 3) == [row[:3] for row in m[:3]]  # exp 4 sub-deployment
    assert load_exp_config({"RTT_OVERRIDES": {(1, 2): 80, (2, 1): 80}, "ROBUST_RTT_VAR": [0]}).rtt_overrides == (
        ((1, 2), 80),)


@pytest.mark.parametrize("knobs,msg", [
    ({"REGIONS": 0}, r"REGIONS=0: must be an integer in \[1, 64\]"),
    ({"REGIONS": 65, "SCALABILITY_N_REGIONS": [3]}, r"REGIONS=65: .*\[1, 64\]"),
    ({"REGIONS": 2.5}, r"REGIONS=2.5: must be an integer"),
    ({"REGIONS": True}, r"REGIONS=True"),
    ({"SHARDS_PER_REGION": 240}, r"SHARDS_PER_REGION=240: .*\[1, 239\]"),
    ({"REPLICAS": 5}, r"REPLICAS=5: .*\[3, 3\]"),
    ({"SCALE": 0}, r"SCALE=0: .*\[0.0001, 10\]"),
    ({"INTRA_RTT_MS": -1}, r"INTRA_RTT_MS=-1: must be a number in \[0, 10000\]"),
    ({"INTER_RTT_MS": "100"}, r"INTER_RTT_MS='100'"),
    ({"INTER_RTT_MS": float("nan")}, r"INTER_RTT_MS=nan"),
    ({"RTT_OVERRIDES": {(1, 11): 80}}, r"RTT_OVERRIDES key \(1, 11\): must be a pair \(a, b\) of regions in \[1, 10\]"),
    ({"RTT_OVERRIDES": {(1, 4): 80}, "MAX_REGIONS": 3, "SCALABILITY_N_REGIONS": [3]},
     r"RTT_OVERRIDES key \(1, 4\): must be a pair \(a, b\) of regions in \[1, 3\]"),
    ({"RTT_OVERRIDES": {(0, 1): 80}}, r"RTT_OVERRIDES key \(0, 1\)"),
    ({"RTT_OVERRIDES": {"1-2": 80}}, r"RTT_OVERRIDES key '1-2'"),
    ({"RTT_OVERRIDES": {(1, 2): -5}}, r"RTT_OVERRIDES\[\(1, 2\)\]=-5"),
    ({"RTT_OVERRIDES": {(1, 2): 80, (2, 1): 90}}, r"RTT_OVERRIDES \(2, 1\): conflicts"),
    ({"RTT_OVERRIDES": [1, 2]}, r"RTT_OVERRIDES=\[1, 2\]: must be a dict"),
    ({"JITTER_MS": -1}, r"JITTER_MS=-1"),
    ({"JITTER_MS": 80}, r"JITTER_MS=80: must be in \[0, 70.7\]"),
    ({"RTT_OVERRIDES": {(1, 2): 20}, "JITTER_MS": 20}, r"JITTER_MS=20: must be in \[0, 14.1\]"),
    ({"ROBUST_RTT_VAR": [10, 80]}, r"ROBUST_RTT_VAR item=80: must be in \[0, 70.7\]"),
    ({"JITTER_DISTRIBUTION": "gauss"}, r"JITTER_DISTRIBUTION='gauss': must be one of normal, pareto"),
    ({"JITTER_DISTRIBUTION": "pareto", "SHAPING": "app"}, r"JITTER_DISTRIBUTION='pareto': must be normal"),
    ({"SHAPING": "tc"}, r"SHAPING='tc': must be one of auto, netem, app"),
    ({"CONTAINERS": "follower"}, r"^CONTAINERS='follower': must be one of shard, replica$"),
    ({"CONTAINERS": "replica", "SHARDS_PER_REGION": 64},
     r"^SHARDS_PER_REGION=64: must be <= 63 with CONTAINERS='replica' \(a region's /24 holds its followers' "
     r"containers from .128, two per shard\)$"),
    ({"NETEM_LIMIT": 0}, r"NETEM_LIMIT=0"),
    ({"CONTROL_PORTS": [22, 70000]}, r"CONTROL_PORTS item=70000: .*\[1, 65535\]"),
    ({"CONTROL_PORTS": 22}, r"CONTROL_PORTS=22: must be a list"),
    ({"IMAGE_NAME": ""}, r"IMAGE_NAME=''"),
    ({"NETWORK_NAME": "my net"}, r"NETWORK_NAME='my net'"),
    ({"OVERLAY_MTU": 100}, r"OVERLAY_MTU=100: .*\[576, 9000\]"),
    ({"SUBNET": "10.55.0.0/24"}, r"SUBNET='10.55.0.0/24': must be an IPv4 network a.b.0.0/p with p in \[16, 23\]"),
    ({"SUBNET": "10.55.0.0/8"}, r"SUBNET='10.55.0.0/8': must be an IPv4 network"),
    ({"SUBNET": "10.55.1.0/16"}, r"SUBNET='10.55.1.0/16'"),
    ({"SUBNET": "10.55.16.0/20"}, r"SUBNET='10.55.16.0/20': must be an IPv4 network a.b.0.0/p"),
    ({"SUBNET": "nonsense"}, r"SUBNET='nonsense'"),
    ({"SUBNET": "10.55.0.0/23", "REGIONS": 3}, r"SUBNET='10.55.0.0/23': holds regions 1..1 .*, 10 regions deployed "
                                                r"\(MAX_REGIONS\) need a larger subnet"),
    ({"SUBNET": "10.66.0.0/16"}, r"DRIVER_IP='10.55.0.240': must be in 10.66.0.0/24"),
    ({"DRIVER_IP": "10.55.1.240"}, r"DRIVER_IP='10.55.1.240': must be in 10.55.0.0/24"),
    ({"DRIVER_IP": "10.55.0.0"}, r"DRIVER_IP='10.55.0.0'"),
    ({"DRIVER_IP": "x"}, r"DRIVER_IP='x': must be an IPv4 address"),
    ({"SYSTEMS": "dast"}, r"SYSTEMS='dast': must be a list of protocol names"),
    ({"SYSTEMS": ["dast", "Chronos!"]}, r"SYSTEMS item 'Chronos!': must be a protocol name"),
    ({"PROTOCOL_OPTIONS": ["dast"]}, r"PROTOCOL_OPTIONS=\['dast'\]: must be a dict"),
    ({"PROTOCOL_OPTIONS": {"dast": True}}, r"PROTOCOL_OPTIONS\['dast'\]=True: must be a dict \{option: value\}"),
    ({"PROTOCOL_OPTIONS": {"dast": {"x": [1]}}}, r"PROTOCOL_OPTIONS\['dast'\]\['x'\]=\[1\]: must be a bool, number"),
    ({"N_REPEAT": 0}, r"N_REPEAT=0: .*\[1, 100\]"),
    ({"DURATION_S": 0}, r"DURATION_S=0"),
    ({"WARMUP_S": 15, "COOLDOWN_S": 5, "DURATION_S": 20}, r"WARMUP_S\+COOLDOWN_S=20: must be < DURATION_S=20"),
    ({"TAIL_PERCENTILE": 100}, r"TAIL_PERCENTILE=100: must be a number in \(50, 100\)"),
    ({"TAIL_PERCENTILE": 50}, r"TAIL_PERCENTILE=50"),
    ({"CONCURRENCY_LEVELS": []}, r"CONCURRENCY_LEVELS=\[\]: must be a non-empty list of values in \[1, 256\]"),
    ({"CONCURRENCY_LEVELS": [0]}, r"CONCURRENCY_LEVELS item=0"),
    ({"CLIENT_PROCESS_PER_SHARD": [17]}, r"CLIENT_PROCESS_PER_SHARD item=17: .*\[1, 16\]"),
    ({"CRT_RATIOS": [10, 110]}, r"CRT_RATIOS item=110: .*\[0, 100\]"),
    ({"ZIPFS": [1.5]}, r"ZIPFS item=1.5: .*\[0, 1\]"),
    ({"ZIPFS": 0.5}, r"ZIPFS=0.5: must be a non-empty list"),
    ({"SCALABILITY_N_REGIONS": [3, 5], "MAX_REGIONS": 3},
     r"^SCALABILITY_N_REGIONS item=5: must be <= MAX_REGIONS=3, the regions deployed \(raise MAX_REGIONS, or set "
     r"it to None: the most any experiment uses\)$"),
    ({"REGIONS": 4, "MAX_REGIONS": 3, "SCALABILITY_N_REGIONS": [3]}, r"^REGIONS=4: must be <= MAX_REGIONS=3, the "
                                                                     r"regions deployed"),
    ({"SCALABILITY_N_REGIONS": [0]}, r"SCALABILITY_N_REGIONS item=0: .*\[1, 64\]"),
    ({"SCALABILITY_N_REGIONS": [65]}, r"SCALABILITY_N_REGIONS item=65: .*\[1, 64\]"),
    ({"MAX_REGIONS": 0}, r"^MAX_REGIONS=0: must be an integer in \[1, 64\]$"),
    ({"MAX_REGIONS": "10"}, r"^MAX_REGIONS='10': must be an integer in \[1, 64\]$"),
    ({"SEED": -1}, r"^SEED=-1: must be an integer in \[0, 2147483647\]$"),
    ({"SEED": 2**31 - 1, "N_REPEAT": 3}, r"^SEED=2147483647: must be <= 2147483645 with N_REPEAT=3"),
    ({"ROBUST_RTT_VAR": []}, r"ROBUST_RTT_VAR=\[\]"),
    ({"FIXED_CONCURRENCY": 0}, r"FIXED_CONCURRENCY=0: must be an integer in \[1, 256\]"),
    ({"FIXED_CLIENT_PROCESS_PER_SHARD": [1]}, r"FIXED_CLIENT_PROCESS_PER_SHARD=\[1\]: must be an integer in \[1, 16\]"),
    ({"DAST_DEFER_COMMUTATIVE": False}, r"DAST_DEFER_COMMUTATIVE: unknown knob"),
    ({"REGION": 4}, r"REGION: unknown knob \(did you mean REGIONS\?\)"),
    ({"ZIPF": [0.5]}, r"ZIPF: unknown knob \(did you mean ZIPFS\?\)"),
])
def test_bad_values_name_the_knob_and_range(knobs, msg):
    with pytest.raises(ValueError, match=msg):
        load_exp_config(knobs)


def test_protocol_rules_are_not_checked_here():
    # what a protocol needs (e.g. slog's 3 regions) is the registry's word, checked by the runner (test_runner.py)
    cfg = load_exp_config({"REGIONS": 2, "SYSTEMS": ["dast", "slog"], "SCALABILITY_N_REGIONS": [1, 2]})
    assert cfg.scalability_n_regions == (1, 2) and cfg.systems == ("dast", "slog")
    assert load_exp_config({"REGIONS": 1, "SYSTEMS": ["tapir"], "JITTER_MS": 500,
                            "SCALABILITY_N_REGIONS": [1]}).jitter_ms == 500  # no cross-region link to clip


@pytest.mark.parametrize("knobs, msg", [
    ({"SYSTEMS": ["dast", "janis"]}, "SYSTEMS item 'janis': not a protocol (did you mean janus?); "
                                     "protocols: dast, janus, tapir, slog"),
    ({"SYSTEMS": ["chronos"]}, "SYSTEMS item 'chronos': not a protocol; protocols: dast, janus, tapir, slog"),
    ({"PROTOCOL_OPTIONS": {"dsat": {"defer_commutative": False}}},
     "PROTOCOL_OPTIONS key 'dsat': not a protocol (did you mean dast?); protocols: dast, janus, tapir, slog"),
])
def test_a_name_no_protocol_has_is_refused_with_a_near_miss(knobs, msg):
    """A typo in SYSTEMS (or a PROTOCOL_OPTIONS key) is not "not built": one line, before anything starts."""
    with pytest.raises(ValueError) as e:
        load_exp_config(knobs)
    assert str(e.value) == msg


def test_jitter_between_half_and_full_one_way_delay_warns():
    with pytest.warns(UserWarning, match="JITTER_MS=50: .*clipped"):
        load_exp_config({"JITTER_MS": 50})  # 35.4 ms per side on a 50 ms one-way delay
    with pytest.warns(UserWarning, match="ROBUST_RTT_VAR item=60"):
        load_exp_config({"ROBUST_RTT_VAR": [10, 60]})


def test_subnet_smaller_than_16_for_few_regions():
    cfg = load_exp_config({"SUBNET": "10.55.0.0/22", "REGIONS": 3, "SCALABILITY_N_REGIONS": [3]})  # regions 1..3 fit
    assert cfg.subnet == "10.55.0.0/22"
    with pytest.raises(ValueError, match="SUBNET='10.55.0.0/22': holds regions 1..3"):
        load_exp_config({"SUBNET": "10.55.0.0/22", "REGIONS": 4, "SCALABILITY_N_REGIONS": [3]})


def test_too_many_delay_classes_rejected():
    overrides = {(1, b): 100 + b for b in range(2, 16)}  # region 1 sees 14 cross-region delays + its own
    with pytest.raises(ValueError, match="RTT_OVERRIDES: region 1 would need 15 distinct delay classes"):
        load_exp_config({"REGIONS": 15, "RTT_OVERRIDES": overrides})


def test_regions_deployed_and_regions_used():
    # MAX_REGIONS None (the default): the most any experiment uses, exp 4's largest count included
    c = load_exp_config({"REGIONS": 3, "SCALABILITY_N_REGIONS": [3, 5, 7, 10]})
    assert (c.regions, c.max_regions, c.scalability_n_regions) == (3, 10, (3, 5, 7, 10))
    assert load_exp_config({"REGIONS": 4, "SCALABILITY_N_REGIONS": [2, 3]}).max_regions == 4
    assert load_exp_config({"REGIONS": 3, "SCALABILITY_N_REGIONS": [3], "MAX_REGIONS": 12}).max_regions == 12
    assert len(rtt_matrix(c)) == 10 and rtt_matrix(c, 3) == [row[:3] for row in rtt_matrix(c)[:3]]
    # the checked config validates again to itself (the --quick preset and --seed revalidate it)
    assert load_exp_config(c.as_dict() and {k.upper(): v for k, v in c.as_dict().items()}) == c


def test_type_errors_for_wrong_source():
    with pytest.raises(TypeError):
        load_exp_config(42)
    assert isinstance(load_exp_config(None), ExpConfig)
