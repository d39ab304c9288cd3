"""Where the main job runs: the local swarm when Docker answers, local processes otherwise."""
import pytest

from testbed.sweeps import mainjob


def test_strip_backend_in_both_spellings():
    assert mainjob.strip_backend(["--quick", "--backend", "auto", "--all"]) == ["--quick", "--all"]
    assert mainjob.strip_backend(["--backend=local", "--fresh"]) == ["--fresh"]
    assert mainjob.strip_backend(["--quick"]) == ["--quick"]


@pytest.mark.parametrize("kind, docker_ok, driver, want", [
    ("auto", True, False, "swarm-via-driver"), ("auto", False, False, "local"),
    ("local", True, False, "local"), ("swarm", True, False, "swarm-via-driver"),
    ("auto", True, True, "swarm-here"), ("swarm", False, True, "swarm-here"), ("local", True, True, "local"),
])
def test_choice(monkeypatch, kind, docker_ok, driver, want):
    monkeypatch.setattr(mainjob, "docker_available", lambda: (docker_ok, "test"))
    monkeypatch.setattr(mainjob, "inside_driver", lambda: driver)
    assert mainjob.choose(kind, log=lambda m: None) == want


def test_swarm_without_docker_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(mainjob, "docker_available", lambda: (False, "no Docker daemon (connection refused)"))
    monkeypatch.setattr(mainjob, "inside_driver", lambda: False)
    with pytest.raises(RuntimeError, match=r"--backend swarm: no Docker daemon .*use --backend local"):
        mainjob.choose("swarm")
