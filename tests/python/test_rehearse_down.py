"""The rehearsal's check that its teardown left nothing asks again while a removed network still shows (no Docker)."""
from testbed.sweeps import rehearse


def test_a_network_that_lingers_for_a_moment_is_not_left(monkeypatch):
    answers = [["network rehearsal_txn"], ["network rehearsal_txn"], []]
    asked = []
    monkeypatch.setattr(rehearse, "_left_on", lambda url, dep: asked.append(url) or answers[len(asked) - 1])
    assert rehearse.left_after_down(["unix:///a.sock"], "rehearsal", sleep=lambda s: None) == []
    assert len(asked) == 3


def test_what_stays_is_reported_with_its_host(monkeypatch):
    monkeypatch.setattr(rehearse, "_left_on", lambda url, dep: ["network rehearsal_txn"] if "b" in url else [])
    left = rehearse.left_after_down(["unix:///a.sock", "unix:///b.sock"], "rehearsal", timeout_s=0,
                                    sleep=lambda s: None)
    assert left == ["unix:///b.sock: network rehearsal_txn"]
