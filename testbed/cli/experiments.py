"""The main job: run experiments and print where their figures are.

    python run_experiments.py                  # exp 1 as configured in exp_config.py (small by default)
    python run_experiments.py --quick          # exp 1, --quick preset (2-core machine)
    python run_experiments.py --quick --all    # all six experiments, --quick preset
    python run_experiments.py --only exp2,exp5 --backend local
Backends: auto (the default): the local Docker swarm when Docker answers (image built if needed, containers brought
up and self-tested, the job run inside the driver container; results land in this checkout), local processes
otherwise; local; swarm.
"""
import argparse
import sys

from testbed.core import experiments
from testbed.sweeps import runner


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Run experiments (default: exp 1) and print the figure paths.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--all", action="store_true", help="all six experiments (exp1..exp6)")
    ap.add_argument("--only", default=None, help="comma-separated experiments, e.g. exp2,exp5 or crt_ratio")
    runner.add_arguments(ap)
    a = ap.parse_args(argv)
    if a.all and a.only:
        ap.error("--all and --only exclude each other")
    try:
        names = (list(experiments.EXPERIMENTS) if a.all else
                 [experiments.get(n.strip()).name for n in a.only.split(",") if n.strip()] if a.only else
                 ["n_clients"])
    except ValueError as e:
        ap.error(str(e))
    return runner.run_experiments(names, a, argv if argv is not None else sys.argv[1:], "run_experiments.py")

