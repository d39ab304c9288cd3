"""The two small core helpers over libraries: text_table (tabulate) and poll (tenacity), and the waits that use
poll where a fake can stand in for Docker (the driver's state after a bad exit, containers coming up)."""
import pytest
from tenacity import stop_after_attempt, stop_after_delay

from testbed.cluster import swarm
from testbed.core.polling import poll
from testbed.core.tables import text_table
from testbed.sweeps import mainjob


def test_text_table_keeps_cells_as_given_and_aligns_right_but_the_left_columns():
    lines = text_table(["name", "p50", "note"], [["dast", "50.0", "ok"], ["janus", "-", "a longer note"]],
                       left=(0, 2)).splitlines()
    assert lines[0].split() == ["name", "p50", "note"]
    assert set(lines[1].replace(" ", "")) == {"-"} and len(lines[1].split()) == 3   # the rule under the header
    assert lines[2].split() == ["dast", "50.0", "ok"]   # "50.0", not tabulate's own 50
    assert lines[2].startswith("dast ") and lines[3].startswith("janus ")   # left-aligned
    assert lines[2].index("50.0") + 4 == lines[3].index("-") + 1   # right-aligned: both end in the same column
    assert lines[3].endswith("a longer note")


class Answers:
    """Gives the answers in turn (the last one from then on) and counts the asks."""
    def __init__(self, *answers):
        self.answers, self.asks = list(answers), 0

    def __call__(self):
        self.asks += 1
        return self.answers[min(self.asks, len(self.answers)) - 1]


def test_poll_asks_until_done_then_returns_that_answer():
    slept = []
    ask = Answers(None, "running", "exited (0)")
    assert poll(ask, stop_after_attempt(10), 0.25, done=lambda a: a not in (None, "running"),
                sleep=slept.append) == "exited (0)"
    assert ask.asks == 3 and slept == [0.25, 0.25]


def test_poll_returns_the_last_answer_when_time_is_up():
    ask = Answers(False)
    assert poll(ask, stop_after_attempt(3), 0, sleep=lambda s: None) is False and ask.asks == 3
    ask = Answers(False)
    assert poll(ask, stop_after_delay(0), 1, sleep=pytest.fail) is False and ask.asks == 1   # no time: one ask


def test_an_exception_from_the_ask_is_not_retried():
    def ask():
        calls.append(1)
        raise OSError("gone")
    calls = []
    with pytest.raises(OSError, match="gone"):
        poll(ask, stop_after_attempt(5), 0, sleep=lambda s: None)
    assert calls == [1]


def test_after_bad_exit_asks_the_driver_state_again_only_when_the_job_was_killed(monkeypatch):
    said = []
    monkeypatch.setattr("testbed.cluster.swarm.stop_engines", lambda hosts, state: {})
    states = Answers("running", "running", "exited (137)")
    monkeypatch.setattr(mainjob, "container_state", lambda name: states())
    mainjob._after_bad_exit("driver", [], {}, said.append, rc=130, settle_s=5)
    assert states.asks == 3 and "exited (137)" in said[0]
    states = Answers("running", "exited (137)")
    monkeypatch.setattr(mainjob, "container_state", lambda name: states())
    mainjob._after_bad_exit("driver", [], {}, said.append, rc=1)   # not a signal: one look, still running
    assert states.asks == 1 and len(said) == 1


class Ct:
    def __init__(self, status, restarts=0):
        self.status, self.attrs = status, {"RestartCount": restarts, "State": {"ExitCode": 1}}

    def reload(self):
        pass

    def logs(self, tail):
        return b"boom"


def test_wait_up_times_out_naming_the_containers_not_up(monkeypatch):
    monkeypatch.setattr(swarm, "_sshd_up", lambda ct: ct.status == "running")
    swarm._wait_up({}, 0)   # nothing to wait for
    with pytest.raises(swarm.SwarmError, match=r"not up after 0.5s: b$"):
        swarm._wait_up({"a": Ct("running"), "b": Ct("created")}, 0.5)


def test_wait_up_reports_a_death_at_once(monkeypatch):
    monkeypatch.setattr(swarm, "_sshd_up", lambda ct: pytest.fail("asked a dead container"))
    with pytest.raises(swarm.SwarmError, match="(?s)container a died during bring-up.*boom"):
        swarm._wait_up({"a": Ct("restarting", restarts=1)}, 60)
