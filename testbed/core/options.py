"""The command-line options several commands share, defined once: the same flag means the same thing, with the
same default and help, in run_local.py, run_experiments.py, experiments/exp*.py, start_containers.py,
genConfig.py, genFigure.py, the self-test and the scripts."""
from __future__ import annotations

import argparse

import yaml

from testbed.core.knobs import help_of, knob

BACKENDS = ("auto", "local", "swarm")


def add_config(ap: argparse.ArgumentParser, help: str = "experiment config file (default exp_config.py)") -> None:
    ap.add_argument("--config", default=None, help=help)


def add_backend(ap: argparse.ArgumentParser, default: str = "auto", choices=BACKENDS) -> None:
    what = {"auto": "the local Docker swarm when Docker answers (containers brought up, the job run in the driver "
                    "container), else local processes",
            "local": "processes on this machine",
            "swarm": "the containers of start_containers.py (from the host, through the driver container)"}
    ap.add_argument("--backend", default=default, choices=choices,
                    help="; ".join(f"{c}: {what[c]}" for c in choices) + f" (default {default})")


def add_results_root(ap: argparse.ArgumentParser, flag: str = "--out", default: str = "results") -> None:
    ap.add_argument(flag, default=default, help=f"results root (default {default})")


def add_wait(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--wait", action="store_true",
                    help="when another job holds the deployment (or the results folder), wait for it to finish "
                         "instead of refusing at once")


def add_build_dir(ap: argparse.ArgumentParser, default=None) -> None:
    ap.add_argument("--build-dir", default=default,
                    help=f"where txn-server and txn-client are (default {default or 'build/'}), e.g. another "
                         "commit's, to compare")


def add_mode(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--mode", default=None, help="protocol: one of `txn-server --list-modes` (default: the first)")


def add_knob(ap: argparse.ArgumentParser, name: str, default) -> None:
    """--<name> for a single run's numeric knob (testbed/core/knobs.py): its type, range, unit and help."""
    ap.add_argument("--" + name.replace("_", "-"), type=int if knob(name).integer else float, default=default,
                    help=help_of(name) + " (default %(default)s)")


def add_choice(ap: argparse.ArgumentParser, name: str, default) -> None:
    """--<name> for a knob that takes one of a few words (testbed/core/knobs.py): its words and help."""
    ap.add_argument("--" + name.replace("_", "-"), default=default, choices=knob(name).words,
                    help=help_of(name) + " (default %(default)s)")


def add_load(ap: argparse.ArgumentParser, defaults: dict) -> None:
    """--workload, --clients-per-shard, --concurrency with the given defaults."""
    add_choice(ap, "workload", defaults["workload"])
    add_knob(ap, "clients_per_shard", defaults["clients_per_shard"])
    add_knob(ap, "concurrency", defaults["concurrency"])


def add_open_loop(ap: argparse.ArgumentParser, defaults: dict) -> None:
    """--rate, --rate-per, --max-outstanding: open-loop load (docs/workloads.md); without --rate, a closed loop."""
    k = knob("OPEN_LOOP_RATE")
    ap.add_argument("--rate", type=float, default=defaults["rate"], metavar="TXN_PER_S",
                    help=f"open loop: transactions offered per second, Poisson arrivals, each measured from its "
                         f"arrival (in {k.range_text()}; --rate-per says of what); --concurrency coordinators per "
                         "client process take them (default: none, a closed loop)")
    add_choice(ap, "rate_per", defaults["rate_per"])
    add_knob(ap, "max_outstanding", defaults["max_outstanding"])


def add_retry(ap: argparse.ArgumentParser, defaults: dict) -> None:
    """--retry-backoff, --retry-backoff-max: how an aborted attempt is retried (docs/workloads.md, "Retries")."""
    add_knob(ap, "retry_backoff", defaults["retry_backoff"])
    add_knob(ap, "retry_backoff_max", defaults["retry_backoff_max"])


def option_value(text: str):
    """A protocol option's value as given on a command line, read as a YAML scalar (true, 3, 0.5, text); the
    protocol's schema checks it (testbed/core/deploy.py)."""
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (bool, int, float, str)) else text


def option_values(items: list[str]) -> dict:
    """NAME=VALUE strings (--protocol-option) -> {name: value}, each value as option_value reads it."""
    out = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--protocol-option {item!r}: must be NAME=VALUE")
        out[name.strip()] = option_value(text)
    return out
