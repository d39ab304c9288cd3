"""The engine's protocol registry, read from `txn-server --list-modes --json` (format: docs/protocol-registry.md).

Every protocol list, role rule and option check of the testbed comes from here, so a protocol added to the engine
needs no Python edit:

    reg = protocols.load()             # $TXN_SERVER, else build/txn-server, else txn-server on PATH (containers)
    reg.names()                        # ['dast', ...], registration order; reg.default_mode() is the first
    p = reg.get("dast")                # ValueError: "not a protocol (did you mean ...?)" or "not built into ..."
    check_name("janis", "SYSTEMS item 'janis'")   # ValueError when no protocol has the name, built or not (a typo)
    p.min_regions                      # the fewest regions it runs on
    p.guarantee, p.order_key           # "strict_serializable" | "serializable"; its order key in one line ("": none)
    p.reports_copies                   # its replies name the replicas each commit rests on (the durability check)
    p.role_nodes(regions)              # its processes besides replicas and clients: [{name, kind, region}, ...]
    p.check_options({"ewma_alpha": 0.5})   # every option with its value (defaults filled in); ValueError names it

The registry is read once per binary (path and modification time).
"""
from __future__ import annotations

import difflib
import functools
import json
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.core.paths import REPO

BINARY_ENV = "TXN_SERVER"  # path of the txn-server whose registry to read, overriding the search
FORMAT = 1                 # the registry JSON format this module reads
GUARANTEES = ("serializable", "strict_serializable")  # a protocol's `guarantee`, weakest first
SOURCE_LIST = REPO / "src" / "protocols" / "protocols.inc"   # PROTOCOL(<name>) lines: the protocols of the source


class RegistryError(RuntimeError):
    """The registry could not be read: no txn-server, it failed, or its output is not the registry."""


def _bound(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Option:
    name: str
    type: str                        # bool | int | double | string
    default: Any
    help: str
    min: float | None = None         # int, double: inclusive bounds (None: unbounded)
    max: float | None = None
    choices: tuple[str, ...] = ()    # string: the allowed values (empty: any)

    def check(self, value, label: str | None = None):
        """value as the deployment file carries it (an int for an int option, a float for a double one);
        ValueError '<label>=<value>: must be ...' naming what is allowed."""
        label = label or self.name
        if self.type == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{label}={value!r}: must be True or False")
            return value
        if self.type == "string":
            if not isinstance(value, str) or (self.choices and value not in self.choices):
                raise ValueError(f"{label}={value!r}: must be " +
                                 (f"one of {', '.join(self.choices)}" if self.choices else "a string"))
            return value
        integer = self.type == "int"
        ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
              and (not integer or float(value).is_integer())
              and (self.min is None or value >= self.min) and (self.max is None or value <= self.max))
        if not ok:
            lo = "-inf" if self.min is None else _bound(self.min)
            hi = "inf" if self.max is None else _bound(self.max)
            raise ValueError(f"{label}={value!r}: must be {'an integer' if integer else 'a number'} in [{lo}, {hi}]")
        return int(value) if integer else float(value)


@dataclass(frozen=True)
class Role:
    name: str        # the nodes' `kind` in the deployment file
    prefix: str      # node names: <prefix><region> (per_region) or <prefix><member> (group)
    placement: str   # per_region | group
    size: int        # group: members, each in a different region
    help: str

    def regions(self, regions: int) -> list[int]:
        """The region of each of the role's processes: every region, or a group spread evenly over all of them
        (member i in region i*R//size, so no region holds two; the engine's generator does the same)."""
        if self.placement == "per_region":
            return list(range(regions))
        return [i * regions // self.size for i in range(self.size)]


@dataclass(frozen=True)
class Protocol:
    name: str
    summary: str
    min_regions: int
    roles: tuple[Role, ...]
    options: tuple[Option, ...]
    # What its histories promise and the order key its replicas record (docs/protocol-registry.md); a registry
    # from before these fields existed declares neither: serializable, no key.
    guarantee: str = "serializable"
    order_key: str = ""
    # Its replies name the replicas per shard a commit rests on (ClientReply.stored); the durability check holds
    # each commit to a majority of every touched shard's (docs/checker.md)
    reports_copies: bool = False

    def defaults(self) -> dict:
        return {o.name: o.default for o in self.options}

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def check_options(self, values: dict) -> dict:
        """Every option of the protocol: values (checked against the schema) over the defaults.
        ValueError names the option as the deployment file does (protocols.<mode>.<option>)."""
        by_name = {o.name: o for o in self.options}
        unknown = sorted(set(values) - set(by_name))
        if unknown:
            raise ValueError(f"protocols.{self.name}.{unknown[0]}: not an option of {self.name} "
                             f"(options: {', '.join(by_name) or 'none'})")
        return {n: (o.check(values[n], f"protocols.{self.name}.{n}") if n in values else o.default)
                for n, o in by_name.items()}

    def role_nodes(self, regions: int) -> list[dict]:
        """The processes the protocol needs besides shard replicas and clients, for a deployment of `regions`."""
        return [dict(name=f"{r.prefix}{i}", kind=r.name, region=region)
                for r in self.roles for i, region in enumerate(r.regions(regions))]


@dataclass(frozen=True)
class Registry:
    protocols: dict[str, Protocol]   # in registration order
    binary: str

    def names(self) -> list[str]:
        return list(self.protocols)

    def default_mode(self) -> str:
        """The first registered protocol (the first line of src/protocols/protocols.inc)."""
        return self.names()[0]

    def get(self, mode) -> Protocol:
        if mode not in self.protocols:
            check_name(mode, f"mode={mode!r}", self)
            raise ValueError(f"mode={mode!r}: not built into {self.binary} (it has {', '.join(self.protocols)}); "
                             "`make build` builds the engine of this checkout")
        return self.protocols[mode]


def source_names() -> list[str]:
    """The protocols of this checkout's source (src/protocols/protocols.inc), built or not; [] without it."""
    try:
        return re.findall(r"^PROTOCOL\((\w+)\)", SOURCE_LIST.read_text(), re.M)
    except OSError:
        return []


def known_names(registry: Registry | None = None) -> list[str]:
    """Every protocol name there is: the source's and the built engine's (registry, default: the one load() finds,
    if it can be read; a test or another build may register more)."""
    if registry is None:
        try:
            registry = load()
        except RegistryError:
            registry = None
    return list(dict.fromkeys(source_names() + (registry.names() if registry else [])))


def check_name(name, label: str, registry: Registry | None = None) -> str:
    """name when it is a protocol, built or not (whether it is built is the runner's business); for a typo a
    ValueError '<label>: not a protocol (did you mean janus?); protocols: ...'. When neither the source list nor
    a registry can be read nothing can be told: the name passes."""
    known = known_names(registry)
    if not known or name in known:
        return name
    hint = difflib.get_close_matches(str(name), known, n=1)
    raise ValueError(f"{label}: not a protocol" + (f" (did you mean {hint[0]}?)" if hint else "")
                     + f"; protocols: {', '.join(known)}")


def server_binary() -> Path:
    """The txn-server whose registry counts: $TXN_SERVER, else build/txn-server, else txn-server on PATH."""
    if os.environ.get(BINARY_ENV):
        return Path(os.environ[BINARY_ENV])
    built = REPO / "build" / "txn-server"
    if built.exists():
        return built
    found = shutil.which("txn-server")
    if found:
        return Path(found)
    raise RegistryError(f"txn-server not found (not in ${BINARY_ENV}, {built} or PATH); build it with `make build`")


def load(binary=None) -> Registry:
    """The registry of `binary` (default: server_binary()), read once per path and modification time."""
    path = Path(binary) if binary is not None else server_binary()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        raise RegistryError(f"{path}: not found; build it with `make build`") from None
    return _load(str(path.resolve()), mtime)


@functools.lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int) -> Registry:
    what = f"{path} --list-modes --json"
    try:
        out = subprocess.run([path, "--list-modes", "--json"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise RegistryError(f"{what}: {e}") from None
    if out.returncode != 0:
        first = next((line for line in out.stderr.splitlines() if line.strip()), "no message")
        raise RegistryError(f"{what} failed (exit {out.returncode}): {first}")
    try:
        return parse(json.loads(out.stdout), path)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RegistryError(f"{what}: not a protocol registry ({type(e).__name__}: {e})") from None


def parse(doc: dict, binary: str = "") -> Registry:
    """A Registry from the registry JSON (already decoded)."""
    if doc.get("format") != FORMAT:
        raise ValueError(f"format {doc.get('format')!r} unsupported (expected {FORMAT})")
    protocols = {}
    for p in doc["protocols"]:
        roles = tuple(Role(r["name"], r["prefix"], r["placement"], int(r["size"]), r["help"]) for r in p["roles"])
        options = tuple(Option(o["name"], o["type"], o["default"], o["help"], o.get("min"), o.get("max"),
                               tuple(o.get("choices", ()))) for o in p["options"])
        for r in roles:
            if r.placement not in ("per_region", "group"):
                raise ValueError(f"{p['name']}: role {r.name}: placement {r.placement!r} unknown")
        for o in options:
            if o.type not in ("bool", "int", "double", "string"):
                raise ValueError(f"{p['name']}: option {o.name}: type {o.type!r} unknown")
        guarantee = p.get("guarantee", "serializable")
        if guarantee not in GUARANTEES:
            raise ValueError(f"{p['name']}: guarantee {guarantee!r} unknown (expected {' or '.join(GUARANTEES)})")
        protocols[p["name"]] = Protocol(p["name"], p["summary"], int(p["min_regions"]), roles, options, guarantee,
                                        str(p.get("order_key", "")), bool(p.get("reports_copies", False)))
    if not protocols:
        raise ValueError("no protocols")
    return Registry(protocols, binary)
