"""Load hosts.yml: the machines of the swarm.

    hosts:
      - address: 10.0.0.5          # required, unique
        user: root                 # optional: ssh user (default: your ssh config's)
        docker_url: ssh://root@10.0.0.5   # optional (default: unix socket for localhost, else ssh://[user@]address)
        cpus: 8                    # optional: when every host gives cpus, containers are spread in proportion

A bare address (`- 10.0.0.5`, the original artifact's form) is accepted too. Every error names the file and
line: `hosts.yml:4: hosts[1]: unknown key 'cpu' (did you mean 'cpus'?)`.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.core.paths import REPO

DEFAULT_FILE = REPO / "hosts.yml"
LOCAL_DOCKER_URL = "unix:///var/run/docker.sock"
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
KEYS = ("address", "user", "docker_url", "cpus")
URL_SCHEMES = ("unix://", "ssh://", "tcp://", "npipe://")


@dataclass(frozen=True)
class Host:
    address: str
    user: str | None = None
    docker_url: str | None = None
    cpus: int | None = None

    @property
    def is_local(self) -> bool:
        return self.address in LOCAL_NAMES

    @property
    def url(self) -> str:
        """The docker-py base URL for this host."""
        if self.docker_url:
            return self.docker_url
        if self.is_local:
            return LOCAL_DOCKER_URL
        return f"ssh://{self.user + '@' if self.user else ''}{self.address}"


LOCAL = (Host("localhost"),)


def parse_hosts(text: str, name: str = "hosts.yml") -> tuple[Host, ...]:
    """Parse and validate the text of a hosts file; ValueError('<name>:<line>: ...') on any problem."""
    def fail(node_or_line, msg):
        line = node_or_line if isinstance(node_or_line, int) else node_or_line.start_mark.line + 1
        raise ValueError(f"{name}:{line}: {msg}")

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        fail(mark.line + 1 if mark else 1, f"YAML syntax error: {problem}")
    if root is None:
        fail(1, "empty file; expected 'hosts:' with a list of hosts")
    if not isinstance(root, yaml.MappingNode):
        fail(root, "expected a mapping with the key 'hosts'")
    top = _mapping(root, fail, "top level")
    for key, (knode, _) in top.items():
        if key != "hosts":
            fail(knode, f"unknown top-level key {key!r}; only 'hosts' is allowed")
    if "hosts" not in top:
        fail(root, "missing key 'hosts'")
    seq = top["hosts"][1]
    if not isinstance(seq, yaml.SequenceNode) or not seq.value:
        fail(seq, "'hosts' must be a non-empty list, e.g. '- address: 10.0.0.5'")

    hosts, seen = [], {}
    for i, item in enumerate(seq.value):
        where = f"hosts[{i}]"
        if isinstance(item, yaml.ScalarNode):  # bare address
            fields = {"address": item}
        elif isinstance(item, yaml.MappingNode):
            fields = {}
            for key, (knode, vnode) in _mapping(item, fail, where).items():
                if key not in KEYS:
                    hint = difflib.get_close_matches(str(key), KEYS, n=1)
                    fail(knode, f"{where}: unknown key {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else
                                                                    f"; allowed: {', '.join(KEYS)}"))
                fields[key] = vnode
        else:
            fail(item, f"{where}: expected a mapping with 'address' (or a bare address)")
        if "address" not in fields:
            fail(item, f"{where}: missing 'address'")
        vals = {key: _scalar(node, fail, where, key) for key, node in fields.items()}
        addr = vals["address"]
        if not isinstance(addr, str) or not addr.strip() or " " in addr:
            fail(fields["address"], f"{where}: address {addr!r} must be a host name or IP address")
        if addr in seen:
            fail(fields["address"], f"{where}: duplicate address {addr!r} (first at line {seen[addr]})")
        seen[addr] = fields["address"].start_mark.line + 1
        for key in ("user", "docker_url"):
            if key in vals and (not isinstance(vals[key], str) or not vals[key]):
                fail(fields[key], f"{where}: {key} must be a non-empty string")
        if "docker_url" in vals and not vals["docker_url"].startswith(URL_SCHEMES):
            fail(fields["docker_url"], f"{where}: docker_url {vals['docker_url']!r} must start with "
                                       f"{', '.join(URL_SCHEMES)}")
        cpus = vals.get("cpus")
        if "cpus" in vals and (isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= 4096):
            fail(fields["cpus"], f"{where}: cpus={cpus!r}: must be an integer in [1, 4096]")
        hosts.append(Host(addr, vals.get("user"), vals.get("docker_url"), cpus))
    return tuple(hosts)


def _mapping(node, fail, where) -> dict:
    """key -> (key node, value node); duplicate keys are an error (PyYAML would keep the last silently)."""
    out = {}
    for knode, vnode in node.value:
        key = knode.value
        if key in out:
            fail(knode, f"{where}: duplicate key {key!r} (first at line {out[key][0].start_mark.line + 1})")
        out[key] = (knode, vnode)
    return out


def _scalar(node, fail, where, key):
    if not isinstance(node, yaml.ScalarNode):
        fail(node, f"{where}: {key} must be a single value, not a list or mapping")
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def load_hosts(path=None) -> tuple[Host, ...]:
    """Hosts from path (default: the top-level hosts.yml). A missing default file means this machine only."""
    if path is None:
        if not DEFAULT_FILE.exists():
            return LOCAL
        path = DEFAULT_FILE
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such hosts file")
    return parse_hosts(path.read_text(), str(path))
