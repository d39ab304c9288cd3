"""Protocol variants: a SYSTEMS item '<protocol>+<variant>' (e.g. 'tapir+backoff') runs the protocol with the
variant's client knobs beside the plain protocol in the same sweep. It is a system of its own everywhere a system is
named (meta.json's `system`, the point keys, a figure's line, a baseline of results/claims.md); what runs is its
protocol (the deployment's `mode`, the registry's checks, PROTOCOL_OPTIONS).

    protocol_of("tapir+backoff")    -> "tapir"
    variant_of("tapir+backoff")     -> VARIANTS["backoff"]  (None: a plain protocol, or a variant not declared)
    check("tapir+bakoff", "SYSTEMS item 'tapir+bakoff'")   # ValueError naming it and the variants there are
    knobs("tapir+backoff", cfg)     -> {"retry_backoff": 10, "retry_backoff_max": 5000}   ({} for a protocol)
    unchanged("dast+backoff", cfg, base)   -> the line saying it changes nothing for DAST ("" when it changes something)

A variant is declared once, in VARIANTS: the deploy knobs it sets (from exp_config.py), the protocols whose runs they
change, and the knob its figure label shows ('Tapir (backoff 10 ms)').
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable

SEP = "+"


@dataclass(frozen=True)
class Variant:
    name: str
    knobs: Callable[..., dict]   # ExpConfig -> the deploy knobs it sets over its protocol's (ValueError: a bad setting)
    changes: tuple[str, ...]     # the protocols it changes; any other runs exactly as its plain protocol does
    why_not: str                 # why it changes nothing for the others
    shown: tuple[str, str]       # (deploy knob, unit) its label shows: 'backoff 10 ms'


def _backoff(cfg) -> dict:
    first, cap = cfg.variant_retry_backoff_ms, cfg.retry_backoff_max_ms
    if first > cap:
        raise ValueError(f"VARIANT_RETRY_BACKOFF_MS={first}: must be <= RETRY_BACKOFF_MAX_MS={cap}, the backoff's cap")
    return dict(retry_backoff=first, retry_backoff_max=cap)


VARIANTS = {v.name: v for v in (
    # aborted attempts retried after a randomized exponential backoff from VARIANT_RETRY_BACKOFF_MS, at most
    # RETRY_BACKOFF_MAX_MS, as TAPIR's authors' benchmark clients do (docs/workloads.md, "Retries")
    Variant("backoff", _backoff, changes=("tapir",), why_not="only TAPIR aborts", shown=("retry_backoff", "ms")),
)}


def protocol_of(system: str) -> str:
    return system.partition(SEP)[0]


def variant_of(system: str) -> Variant | None:
    """The system's variant; None for a plain protocol, or a variant VARIANTS lacks (one config.py refuses, or that
    a run folder of an older checkout names)."""
    return VARIANTS.get(system.partition(SEP)[2])


def check(system: str, label: str) -> str:
    """system when its variant (if any) is one of VARIANTS; else ValueError '<label>: 'x' is not a variant (did you
    mean backoff?); variants: backoff'. Its protocol is protocols.check_name's business."""
    variant = system.partition(SEP)[2]
    if variant and variant not in VARIANTS:
        hint = difflib.get_close_matches(variant, VARIANTS, n=1)
        raise ValueError(f"{label}: {variant!r} is not a variant" + (f" (did you mean {hint[0]}?)" if hint else "")
                         + f"; variants: {', '.join(VARIANTS)} (testbed/core/variants.py)")
    return system


def knobs(system: str, cfg) -> dict:
    """The deploy knobs the system's variant sets over its protocol's ({} for a plain protocol)."""
    variant = variant_of(system)
    return variant.knobs(cfg) if variant else {}


def unchanged(system: str, cfg, base: dict) -> str:
    """The line a sweep says when the system's variant changes nothing of its protocol's runs, whose knobs are base
    (it still runs, as a line of its own): a protocol it does not change, or knobs base already has. "" otherwise."""
    protocol, variant = protocol_of(system), variant_of(system)
    if variant is None:
        return ""
    if protocol not in variant.changes:
        return f"{system}: the {variant.name} variant changes nothing for {protocol} ({variant.why_not}): its runs " \
               f"repeat {protocol}'s"
    mine = variant.knobs(cfg)
    if all(base.get(k) == v for k, v in mine.items()):
        return f"{system}: the {variant.name} variant changes nothing: exp_config.py already gives every protocol " + \
            ", ".join(f"{k}={v}" for k, v in mine.items())
    return ""
