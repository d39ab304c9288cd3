"""testbed/core/protocols.py: the engine's protocol registry as the testbed sees it."""
import json
import os
import subprocess

import pytest

from testbed.core import protocols

from conftest import FAKE_REGISTRY, REPO

SERVER = REPO / "build" / "txn-server"


def test_load_reads_every_protocol_rule_and_option(fake_registry):
    reg = protocols.load()
    assert reg.names() == ["alpha", "ordered"] and reg.default_mode() == "alpha"
    alpha, ordered = reg.get("alpha"), reg.get("ordered")
    assert alpha.min_regions == 1 and ordered.min_regions == 3
    assert [(r.name, r.prefix, r.placement, r.size) for r in alpha.roles] == [("manager", "m", "per_region", 1)]
    assert alpha.defaults() == {"defer_commutative": True, "count": 2, "ratio": 0.5, "flavour": "plain"}
    assert alpha.option("flavour").choices == ("plain", "spicy") and alpha.option("nope") is None
    with pytest.raises(ValueError, match=r"^mode='paxos': not a protocol; protocols: dast, janus, tapir, slog, alpha, "
                                         r"ordered$"):
        reg.get("paxos")
    with pytest.raises(ValueError, match=r"^mode='odrered': not a protocol \(did you mean ordered\?\); protocols: "):
        reg.get("odrered")
    # a protocol of the source that this binary does not have: not built, not a typo
    with pytest.raises(ValueError, match=r"^mode='janus': not built into .*txn-server \(it has alpha, ordered\); "
                                         r"`make build` builds the engine of this checkout$"):
        reg.get("janus")


def test_a_protocol_name_is_checked_against_the_source_and_the_registry(fake_registry, monkeypatch, tmp_path):
    assert protocols.source_names() == ["dast", "janus", "tapir", "slog"]   # src/protocols/protocols.inc
    assert protocols.known_names() == ["dast", "janus", "tapir", "slog", "alpha", "ordered"]
    for name in ("dast", "ordered"):   # of the source only, of the built engine only
        assert protocols.check_name(name, "SYSTEMS item") == name
    with pytest.raises(ValueError) as e:
        protocols.check_name("janis", "SYSTEMS item 'janis'")
    assert str(e.value) == ("SYSTEMS item 'janis': not a protocol (did you mean janus?); protocols: dast, janus, "
                            "tapir, slog, alpha, ordered")
    # nothing to tell a protocol by (no source list, no engine): a name passes, the runner says it is not built
    monkeypatch.setattr(protocols, "SOURCE_LIST", tmp_path / "none.inc")
    monkeypatch.setenv("TXN_SERVER", str(tmp_path / "no-txn-server"))
    assert protocols.known_names() == [] and protocols.check_name("janis", "x") == "janis"


def test_roles_give_the_processes_of_a_deployment(fake_registry):
    reg = protocols.load()
    assert reg.get("alpha").role_nodes(2) == [dict(name="m0", kind="manager", region=0),
                                              dict(name="m1", kind="manager", region=1)]
    order = reg.get("ordered").roles[0]
    # a group is spread over all regions, never two members in one
    assert {R: order.regions(R) for R in (3, 4, 5, 7)} == {3: [0, 1, 2], 4: [0, 1, 2], 5: [0, 1, 3], 7: [0, 2, 4]}
    assert [n["name"] for n in reg.get("ordered").role_nodes(5)] == ["o0", "o1", "o2"]


@pytest.mark.parametrize("values, message", [
    ({"count": 0}, r"protocols\.alpha\.count=0: must be an integer in \[1, 5\]"),
    ({"count": 2.5}, r"protocols\.alpha\.count=2\.5: must be an integer in \[1, 5\]"),
    ({"count": True}, r"protocols\.alpha\.count=True: must be an integer"),
    ({"ratio": 1.5}, r"protocols\.alpha\.ratio=1\.5: must be a number in \[0, 1\]"),
    ({"ratio": float("nan")}, r"protocols\.alpha\.ratio=nan: must be a number"),
    ({"defer_commutative": "yes"}, r"protocols\.alpha\.defer_commutative='yes': must be True or False"),
    ({"flavour": "mild"}, r"protocols\.alpha\.flavour='mild': must be one of plain, spicy"),
    ({"colour": 1}, r"protocols\.alpha\.colour: not an option of alpha \(options: defer_commutative, count, ratio, "
                    r"flavour\)"),
])
def test_option_values_are_checked_against_the_schema(fake_registry, values, message):
    with pytest.raises(ValueError, match=message):
        protocols.load().get("alpha").check_options(values)


def test_checked_options_are_complete_and_typed(fake_registry):
    got = protocols.load().get("alpha").check_options({"count": 4.0, "ratio": 1})
    assert got == {"defer_commutative": True, "count": 4, "ratio": 1.0, "flavour": "plain"}
    assert type(got["count"]) is int and type(got["ratio"]) is float


def test_read_once_per_binary_and_modification_time(fake_registry):
    calls = fake_registry.with_name("txn-server.calls")
    first = protocols.load()
    assert protocols.load() is first and len(calls.read_text().split()) == 1
    st = fake_registry.stat()
    os.utime(fake_registry, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a rebuilt binary
    assert protocols.load() is not first and len(calls.read_text().split()) == 2


def test_missing_binary_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TXN_SERVER", str(tmp_path / "nowhere" / "txn-server"))
    with pytest.raises(protocols.RegistryError) as e:
        protocols.load()
    assert "\n" not in str(e.value) and "nowhere/txn-server: not found" in str(e.value) and "make build" in str(e.value)
    # no $TXN_SERVER, no build/txn-server, nothing on PATH
    monkeypatch.delenv("TXN_SERVER")
    monkeypatch.setattr(protocols, "REPO", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(protocols.RegistryError, match=r"txn-server not found \(not in \$TXN_SERVER, .*build/"
                                                      r"txn-server or PATH\); build it with `make build`"):
        protocols.load()


@pytest.mark.parametrize("script, message", [
    ('echo "txn-server: error: bad argument --json" >&2; echo usage >&2; exit 2',
     r"--list-modes --json failed \(exit 2\): txn-server: error: bad argument --json$"),
    ("echo dast", r"not a protocol registry \(JSONDecodeError"),
    ("echo '{\"format\": 2, \"protocols\": []}'", r"not a protocol registry \(ValueError: format 2 unsupported"),
    ("echo '{\"format\": 1, \"protocols\": [{\"name\": \"x\"}]}'", r"not a protocol registry \(KeyError"),
])
def test_a_binary_that_does_not_publish_a_registry_is_named(tmp_path, monkeypatch, script, message):
    fake = tmp_path / "txn-server"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    with pytest.raises(protocols.RegistryError, match=message) as e:
        protocols.load(fake)
    assert "\n" not in str(e.value)


def test_parse_accepts_what_the_format_documents():
    reg = protocols.parse(json.loads(json.dumps(FAKE_REGISTRY)), "b")
    assert reg.binary == "b" and reg.get("ordered").roles[0].size == 3
    bad = json.loads(json.dumps(FAKE_REGISTRY))
    bad["protocols"][0]["roles"][0]["placement"] = "everywhere"
    with pytest.raises(ValueError, match="placement 'everywhere' unknown"):
        protocols.parse(bad)


def test_guarantee_and_order_key_are_read_and_default_when_absent():
    doc = json.loads(json.dumps(FAKE_REGISTRY))
    for p in doc["protocols"]:
        p.pop("guarantee", None)
        p.pop("order_key", None)
    alpha = protocols.parse(doc).get("alpha")
    assert (alpha.guarantee, alpha.order_key) == ("serializable", "")
    doc["protocols"][0].update(guarantee="strict_serializable", order_key="the txn's timestamp; one domain")
    alpha = protocols.parse(doc).get("alpha")
    assert (alpha.guarantee, alpha.order_key) == ("strict_serializable", "the txn's timestamp; one domain")
    doc["protocols"][0]["guarantee"] = "linearizable"
    with pytest.raises(ValueError, match="alpha: guarantee 'linearizable' unknown"):
        protocols.parse(doc)


@pytest.mark.skipif(not os.access(SERVER, os.X_OK), reason="build/txn-server not built (run `make build`)")
def test_the_real_binary_publishes_its_registry(monkeypatch):
    monkeypatch.delenv("TXN_SERVER", raising=False)
    reg = protocols.load()
    lines = subprocess.run([str(SERVER), "--list-modes"], capture_output=True, text=True, check=True).stdout.split()
    assert reg.names() == lines and "dast" in lines
    dast = reg.get("dast")
    assert [(r.name, r.placement) for r in dast.roles] == [("manager", "per_region")]
    assert dast.defaults()["defer_commutative"] is True and dast.option("ewma_alpha").max == 1.0
    assert all(o.help for o in dast.options)
    assert dast.guarantee == "serializable" and "timestamp" in dast.order_key   # its paper claims no more
    assert reg.get("janus").guarantee == "strict_serializable"
    assert reg.get("tapir").order_key == ""
    bad = subprocess.run([str(SERVER), "--json"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--json goes with --list-modes" in bad.stderr
