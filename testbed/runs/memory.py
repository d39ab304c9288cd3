"""Every server process's resident memory over a run (memory.csv in the run folder; docs/fault-tolerance.md,
"Memory over a long run"): sampled from outside, as `ps` would, so it holds for a process killed mid-run and for the
one started again in its place. `python -m testbed.runs.memory RUN_DIR` prints each process's at its start, middle
and end."""
from __future__ import annotations

import csv
import os
import sys
import threading
import time
from pathlib import Path

FILE = "memory.csv"
INTERVAL_S = 5.0   # a sample of every live server process this often
SETTLED_S = 30.0   # "start": a process's first sample this long after its own start (its buffers filled), if any


class MemorySampler:
    """Samples `procs()` (the run's server processes so far, restarted ones included) every `interval_s` into
    run_dir/memory.csv: t_s (since load start, `t0` on time.time()), process, rss_bytes. Processes whose backend
    cannot read their memory (Proc.rss_bytes() None: the swarm's) are left out; with none, no file is written."""

    def __init__(self, run_dir: Path, procs, t0: float, interval_s: float = INTERVAL_S):
        self.path, self.procs, self.t0, self.interval_s = Path(run_dir) / FILE, procs, t0, interval_s
        self._stop = threading.Event()
        self._rows: list[tuple[float, str, int]] = []
        self._thread = threading.Thread(target=self._run, name="memory", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        now = round(time.time() - self.t0, 3)
        for p in list(self.procs()):
            if p.poll() is None:
                rss = p.rss_bytes()
                if rss is not None:
                    self._rows.append((now, p.name, rss))

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> None:
        """Stop sampling and write the file (once; later calls do nothing); a file that cannot be written is left
        out, never raised (the run's own verdict stands)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        if not self._rows:
            return
        try:
            with open(self.path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(("t_s", "process", "rss_bytes"))
                w.writerows(self._rows)
        except OSError:   # information, not a record the run needs (a full disk: the run's own failure says so)
            self.path.unlink(missing_ok=True)


PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_rss_bytes(pid: int) -> int | None:
    """A local process's resident memory (/proc/PID/statm), or None once it is gone (its file unreadable, or all
    zeros: a process that exited and is not yet reaped, a zombie, holds no memory)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE or None
    except (OSError, IndexError, ValueError):
        return None


def profile(run_dir) -> list[dict]:
    """Per process of memory.csv: its resident MB at start (its first sample SETTLED_S or more after its own
    first; in a shorter life, 1 s or more after, else its first), middle and end of its life, and its growth from
    start to end in %."""
    by: dict[str, list[tuple[float, int]]] = {}
    with open(Path(run_dir) / FILE, newline="") as f:
        for row in csv.DictReader(f):
            if int(row["rss_bytes"]) > 0:   # (a zombie's zeros, sampled before this was known, are not its memory)
                by.setdefault(row["process"], []).append((float(row["t_s"]), int(row["rss_bytes"])))
    out = []
    for name, xs in sorted(by.items()):
        first = xs[0][0]
        start = next((x for x in xs if x[0] >= first + SETTLED_S), None) or \
            next((x for x in xs if x[0] >= first + 1.0), xs[0])   # (not its first instants: libraries loading)
        mid_t = (start[0] + xs[-1][0]) / 2
        mid = min(xs, key=lambda x: abs(x[0] - mid_t))
        mb = [round(v / 2 ** 20, 1) for _, v in (start, mid, xs[-1])]
        out.append({"process": name, "start_t_s": start[0], "start_mb": mb[0], "middle_mb": mb[1],
                    "end_t_s": xs[-1][0], "end_mb": mb[2], "growth_pct": round(100 * (xs[-1][1] / start[1] - 1), 1)})
    return out


def main(argv=None) -> int:
    from tabulate import tabulate
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m testbed.runs.memory RUN_DIR", file=sys.stderr)
        return 2
    if not (Path(args[0]) / FILE).is_file():
        print(f"memory: error: {Path(args[0]) / FILE} does not exist (a local run writes it)", file=sys.stderr)
        return 2
    print(tabulate(profile(args[0]), headers="keys", tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
