"""hosts.yml: parsing, defaults, and errors that name the line."""
from pathlib import Path

import pytest

from testbed.cluster.hosts import LOCAL_DOCKER_URL, Host, load_hosts, parse_hosts

REPO = Path(__file__).resolve().parents[2]


def test_shipped_default_is_this_machine_only():
    hosts = load_hosts(REPO / "hosts.yml")
    assert hosts == (Host("localhost"),)
    assert hosts[0].is_local and hosts[0].url == LOCAL_DOCKER_URL


def test_missing_default_file_means_local(monkeypatch, tmp_path):
    monkeypatch.setattr("testbed.cluster.hosts.DEFAULT_FILE", tmp_path / "nope.yml")
    assert load_hosts() == (Host("localhost"),)
    with pytest.raises(ValueError, match="no such hosts file"):
        load_hosts(tmp_path / "nope.yml")


def test_multi_host_form_and_urls(tmp_path):
    p = tmp_path / "hosts.yml"
    p.write_text("hosts:\n"
                 "  - address: 10.0.0.5\n    user: root\n    cpus: 8\n"
                 "  - {address: 10.0.0.6, docker_url: 'tcp://10.0.0.6:2375'}\n"
                 "  - 10.0.0.7\n")
    a, b, c = load_hosts(p)
    assert (a.address, a.user, a.cpus, a.url) == ("10.0.0.5", "root", 8, "ssh://root@10.0.0.5")
    assert b.url == "tcp://10.0.0.6:2375" and b.cpus is None
    assert c == Host("10.0.0.7") and c.url == "ssh://10.0.0.7"  # the original artifact's bare-address form


@pytest.mark.parametrize("text,line,msg", [
    ("hosts:\n  - address: a\n  - user: root\n", 3, "hosts[1]: missing 'address'"),
    ("hosts:\n  - address: a\n  - address: b\n  - address: a\n", 4, "duplicate address 'a' (first at line 2)"),
    ("hosts:\n  - address: a\n    cpus: 0\n", 3, "cpus=0: must be an integer in [1, 4096]"),
    ("hosts:\n  - address: a\n    cpus: many\n", 3, "cpus='many'"),
    ("hosts:\n  - address: a\n    cpus: true\n", 3, "cpus=True"),
    ("hosts:\n  - address: a\n\n    cpu: 4\n", 4, "unknown key 'cpu' (did you mean 'cpus'?)"),
    ("hosts:\n  - address: a\n    colour: red\n", 3, "unknown key 'colour'; allowed: address"),
    ("hosts: 10.0.0.5\n", 1, "'hosts' must be a non-empty list"),
    ("hosts: []\n", 1, "'hosts' must be a non-empty list"),
    ("# nothing\n", 1, "empty file"),
    ("- 10.0.0.5\n", 1, "expected a mapping with the key 'hosts'"),
    ("hosts:\n  - address: a\nhost:\n  - b\n", 3, "unknown top-level key 'host'"),
    ("{}\n", 1, "missing key 'hosts'"),
    ("nodes:\n  - a\n", 1, "unknown top-level key 'nodes'"),
    ("hosts:\n  - address: a\n    address: b\n", 3, "duplicate key 'address' (first at line 2)"),
    ("hosts:\n  - address: [a, b]\n", 2, "address must be a single value"),
    ("hosts:\n  - [a]\n", 2, "hosts[0]: expected a mapping"),
    ("hosts:\n  - address: a\n    docker_url: http://a\n", 3, "docker_url 'http://a' must start with unix://"),
    ("hosts:\n  - address: a\n    user: ''\n", 3, "user must be a non-empty string"),
    ("hosts:\n  - address: a\n  - address: 'b c'\n", 3, "must be a host name or IP address"),
    ("hosts:\n  - address: a\n    cpus: 4\n   - address: b\n", 4, "YAML syntax error"),
    ("hosts:\n  - address: 'a\n", 3, "YAML syntax error"),
    ("hosts:\n  - {address: a\n", 3, "YAML syntax error"),
])
def test_errors_name_file_and_line(tmp_path, text, line, msg):
    p = tmp_path / "hosts.yml"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        load_hosts(p)
    assert str(e.value).startswith(f"{p}:{line}: "), str(e.value)
    assert msg in str(e.value)


def test_parse_hosts_names_its_source():
    with pytest.raises(ValueError, match=r"^cluster\.yml:2: hosts\[0\]: missing 'address'"):
        parse_hosts("hosts:\n  - user: x\n", "cluster.yml")
