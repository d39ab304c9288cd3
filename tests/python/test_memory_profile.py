"""testbed/runs/memory.py: a run's memory.csv read back per process (start once settled, middle, end)."""
from testbed.runs import memory


def test_a_process_is_measured_from_its_settled_start_to_its_end(tmp_path, capsys):
    rows = ["t_s,process,rss_bytes"]
    mb = 2 ** 20
    for t in range(0, 101, 5):   # grows while it fills (first 30 s), then flat but for one step at 80 s
        rows.append(f"{t},s0.0.1,{(10 + min(t, 30) / 10 + (1 if t >= 80 else 0)) * mb:.0f}")
    for t in range(60, 101, 5):   # a restarted process: its own start is what counts
        rows.append(f"{t},s0.0.2+restart,{20 * mb}")
    (tmp_path / memory.FILE).write_text("\n".join(rows) + "\n")
    got = {r["process"]: r for r in memory.profile(tmp_path)}
    assert (got["s0.0.1"]["start_t_s"], got["s0.0.1"]["start_mb"], got["s0.0.1"]["end_mb"]) == (30, 13.0, 14.0)
    assert got["s0.0.1"]["middle_mb"] == 13.0 and got["s0.0.1"]["growth_pct"] == 7.7
    # lived 40 s: its start is its first sample 30 s in
    assert got["s0.0.2+restart"]["start_t_s"] == 90 and got["s0.0.2+restart"]["growth_pct"] == 0
    assert memory.main([str(tmp_path)]) == 0 and "s0.0.2+restart" in capsys.readouterr().out


def test_a_folder_without_samples_is_one_line(tmp_path, capsys):
    assert memory.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "memory.csv does not exist" in err


class _Proc:
    name = "s0.0.1"

    def poll(self):
        return None

    def memory(self):
        return 20 * 2 ** 20, 5 * 2 ** 20


def test_samples_that_cannot_be_written_are_left_out_never_raised(tmp_path):
    """A full disk (here: a folder that does not exist) fails the run by its own error, not by memory.csv's."""
    s = memory.MemorySampler(tmp_path / "gone", lambda: [_Proc()], t0=0.0, interval_s=0.05)
    s.stop()
    assert not (tmp_path / "gone").exists()
    ok = memory.MemorySampler(tmp_path, lambda: [_Proc()], t0=0.0, interval_s=0.05)
    ok.stop()
    assert (tmp_path / memory.FILE).read_text().splitlines()[1].endswith(f",s0.0.1,{20 * 2 ** 20},{5 * 2 ** 20}")


def test_a_process_that_exited_unreaped_holds_no_memory(tmp_path):
    """A server that exits between the sampler's poll() and its read is a zombie until reaped: its statm reads all
    zeros, which is no sample (CI caught an end of 0.0 MB for a restarted replica drained at the run's end); a zero
    in an older memory.csv is not its end either."""
    import os
    import subprocess
    p = subprocess.Popen(["sleep", "30"])
    rss, private = memory.proc_memory(p.pid)
    assert rss >= private > 0   # (just forked, before its exec: one page, its own)
    p.kill()
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)   # exited, not reaped
    assert memory.proc_memory(p.pid) is None
    p.wait()
    assert memory.proc_memory(p.pid) is None
    (tmp_path / memory.FILE).write_text("t_s,process,rss_bytes\n0,s0.0.1,1048576\n5,s0.0.1,2097152\n10,s0.0.1,0\n")
    assert memory.profile(tmp_path)[0]["end_mb"] == 2.0


def test_the_private_part_is_profiled_beside_the_resident_set(tmp_path):
    """The code and libraries a process shares with their files are most of its resident set and fault in as new
    paths run; its private part (heap, stacks) is what its state costs: both profiled where the file has both."""
    mb = 2 ** 20
    rows = ["t_s,process,rss_bytes,private_bytes"] + [f"{t},s0.0.1,{(20 + t / 50) * mb:.0f},{6 * mb}"
                                                       for t in range(0, 101, 5)]
    (tmp_path / memory.FILE).write_text("\n".join(rows) + "\n")
    (got,) = memory.profile(tmp_path)
    assert got["growth_pct"] > 0 and (got["private_start_mb"], got["private_end_mb"], got["private_growth_pct"]) == \
        (6.0, 6.0, 0.0)
    (tmp_path / memory.FILE).write_text("t_s,process,rss_bytes\n0,s0.0.1,1048576\n40,s0.0.1,1048576\n")
    assert "private_start_mb" not in memory.profile(tmp_path)[0]
