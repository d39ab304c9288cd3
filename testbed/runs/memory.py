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
    run_dir/memory.csv: t_s (since load start, `t0` on time.time()), process, rss_bytes, private_bytes (the resident
    pages that are the process's own: its heap, stacks and written data, not the code and libraries it shares with
    their files). Processes whose backend cannot read their memory (Proc.memory() None: the swarm's) are left out;
    with none, no file is written."""

    def __init__(self, run_dir: Path, procs, t0: float, interval_s: float = INTERVAL_S):
        self.path, self.procs, self.t0, self.interval_s = Path(run_dir) / FILE, procs, t0, interval_s
        self._stop = threading.Event()
        self._rows: list[tuple[float, str, int, int]] = []
        self._thread = threading.Thread(target=self._run, name="memory", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        now = round(time.time() - self.t0, 3)
        for p in list(self.procs()):
            if p.poll() is None:
                mem = p.memory()
                if mem is not None:
                    self._rows.append((now, p.name, *mem))

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
                w.writerow(("t_s", "process", "rss_bytes", "private_bytes"))
                w.writerows(self._rows)
        except OSError:   # information, not a record the run needs (a full disk: the run's own failure says so)
            self.path.unlink(missing_ok=True)


PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_memory(pid: int) -> tuple[int, int] | None:
    """A local process's resident memory and the part of it that is its own (/proc/PID/statm: resident minus
    shared, the file-backed pages it shares), or None once it is gone (its file unreadable, or all zeros: a process
    that exited and is not yet reaped, a zombie, holds no memory)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            fields = f.read().split()
        resident, shared = int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None
    return (resident * PAGE, (resident - shared) * PAGE) if resident else None


def profile(run_dir) -> list[dict]:
    """Per process of memory.csv: its resident MB at start (its first sample SETTLED_S or more after its own
    first; in a shorter life, 1 s or more after, else its first), middle and end of its life, and its growth from
    start to end in %; the same of its private part (`private_*`, where the file has it)."""
    by: dict[str, list[tuple[float, int, int | None]]] = {}
    with open(Path(run_dir) / FILE, newline="") as f:
        for row in csv.DictReader(f):
            if int(row["rss_bytes"]) > 0:   # (a zombie's zeros, sampled before this was known, are not its memory)
                private = row.get("private_bytes")
                by.setdefault(row["process"], []).append((float(row["t_s"]), int(row["rss_bytes"]),
                                                          int(private) if private else None))
    out = []
    for name, xs in sorted(by.items()):
        first = xs[0][0]
        start = next((x for x in xs if x[0] >= first + SETTLED_S), None) or \
            next((x for x in xs if x[0] >= first + 1.0), xs[0])   # (not its first instants: libraries loading)
        mid_t = (start[0] + xs[-1][0]) / 2
        mid = min(xs, key=lambda x: abs(x[0] - mid_t))
        row = {"process": name, "start_t_s": start[0], "end_t_s": xs[-1][0]}
        for col, prefix in ((1, ""), (2, "private_")):
            if any(x[col] is None for x in (start, mid, xs[-1])):
                continue
            mb = [round(x[col] / 2 ** 20, 1) for x in (start, mid, xs[-1])]
            row.update({f"{prefix}start_mb": mb[0], f"{prefix}middle_mb": mb[1], f"{prefix}end_mb": mb[2],
                        f"{prefix}growth_pct": round(100 * (xs[-1][col] / start[col] - 1), 1) if start[col] else None})
        out.append(row)
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
