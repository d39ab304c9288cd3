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


# ---- a deployment of another checkout (issue 50): refused naming the owner, before anything is built or touched ----

OWNER = "vm:/srv/other-checkout"


def _not_ours(monkeypatch, calls):
    from testbed.cluster import swarm

    def ensure_owner(cfg, hosts, deployment=None, repo=None):
        calls.append("owner")
        raise swarm.NotOwner(f"deployment {deployment or cfg.deployment!r} belongs to another checkout, {OWNER} "
                             "(its driver mounts that checkout: jobs would write their results there); ...")
    monkeypatch.setattr(swarm, "ensure_owner", ensure_owner)
    monkeypatch.setattr(mainjob, "load_hosts", lambda: {"127.0.0.1": {}})
    monkeypatch.setattr(mainjob, "run_killable", lambda *a, **k: calls.append("build") or 0)
    monkeypatch.setattr(swarm, "up", lambda *a, **k: calls.append("up"))


def test_a_job_on_another_checkouts_deployment_is_refused_before_the_image_build(monkeypatch):
    calls, said = [], []
    _not_ours(monkeypatch, calls)
    assert mainjob.run_in_driver("run_experiments.py", ["--quick"], log=said.append) == 2
    assert calls == ["owner"], "nothing built, brought up or locked"
    assert len(said) == 1 and said[0].startswith("main job: deployment ") and OWNER in said[0], said


def test_a_run_from_a_checkout_without_the_deployment_names_its_owner(monkeypatch, tmp_path):
    from testbed.cluster import swarm
    calls, said = [], []
    _not_ours(monkeypatch, calls)
    monkeypatch.setattr(swarm, "load_state", lambda path: None)   # no containers.yml in this checkout
    assert mainjob.run_job_in_driver(["-m", "testbed.cli"], log=said.append) == 2
    assert len(said) == 1 and OWNER in said[0] and "not up" not in said[0], said
    # nobody's: the deployment is not up, as before
    monkeypatch.setattr(swarm, "ensure_owner", lambda *a, **k: None)
    said.clear()
    assert mainjob.run_job_in_driver(["-m", "testbed.cli"], log=said.append) == 2
    assert len(said) == 1 and "not found: deployment is not up" in said[0], said


def test_make_up_checks_the_owner_before_it_builds_the_image(monkeypatch, capsys):
    from testbed.cli import swarm as swarmcli
    calls = []
    _not_ours(monkeypatch, calls)
    monkeypatch.setattr(swarmcli, "load_hosts", lambda *a: {"127.0.0.1": {}})
    assert swarmcli.main(["--check-owner"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("start_containers: error: deployment ") and OWNER in err[0], err
    assert swarmcli.main(["--check-owner", "--take-over"]) == 0
    make = (mainjob.swarm.REPO / "Makefile").read_text()
    up = make[make.index("\nup:"):make.index("\ndown:")]
    assert up.index("start_containers.py --check-owner") < up.index("build_image.sh"), up
