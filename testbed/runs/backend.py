"""One interface over the two backends (ARCHITECTURE.md), so experiment code does not care which one runs.

    backend = open_backend("auto", cfg)          # cfg: ExpConfig from testbed.core.config.load_exp_config()
    knobs = base_knobs(cfg, regions=3, rtt_jitter_ms=10)   # deploy knobs (testbed/core/deploy.py DEFAULTS)
    deploy = backend.deployment(mode="<protocol>", concurrency=2, **knobs)
    res = backend.run(deploy, "exp1", meta_extra={"point": {...}})    # -> runtypes.RunResult
    backend.close()

A backend turns deploy knobs into a deployment whose hosts/ports fit it (loopback ports for `local`, container
addresses for `swarm`), runs it into results/<name>/<run-id>/ (same files either way) through the shared run
lifecycle (testbed/runs/lifecycle.py), and says which shaping mechanism its runs use. A run that could not finish
raises runtypes.RunError, an interrupted one runtypes.Interrupted (both with run_dir). open_backend() (which
knows both backends) is in testbed/runs/backends.py.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from testbed.core import deploy as deploylib, protocols, rtt
from testbed.core.config import ExpConfig, rtt_matrix
from testbed.runs.local import REPO, LocalRunner
from testbed.core.runtypes import RunResult


def base_knobs(cfg: ExpConfig, regions: int | None = None, rtt_jitter_ms: float | None = None) -> dict:
    """Deploy knobs from exp_config: scale, the RTT matrix (the first `regions` regions; default REGIONS), jitter,
    durations. rtt_jitter_ms overrides JITTER_MS (exp 5). The caller adds mode, workload and the swept knob."""
    R = cfg.regions if regions is None else regions
    if not 1 <= R <= cfg.max_regions:
        raise ValueError(f"regions={R}: must be in [1, MAX_REGIONS={cfg.max_regions}], the regions deployed")
    j = cfg.jitter_ms if rtt_jitter_ms is None else rtt_jitter_ms
    return dict(regions=R, shards=cfg.shards_per_region, scale=cfg.scale, district=cfg.tpcc_district, processes=cfg.engine_processes,
                transport=cfg.engine_transport, delivery_grid_us=cfg.engine_delivery_grid_us,
                rtt_ms=rtt_matrix(cfg, R),
                jitter=round(rtt.one_way_jitter(j), 6), duration=cfg.duration_s, warmup=cfg.warmup_s,
                cooldown=cfg.cooldown_s, faults=cfg.faults, faults_seed=cfg.faults_seed,
                # open loop only when OPEN_LOOP_RATE is set: a closed loop's knobs (config.json, sweep.json) as before
                **(dict(rate=cfg.open_loop_rate, rate_per=cfg.open_loop_rate_per,
                        max_outstanding=cfg.open_loop_max_outstanding) if cfg.open_loop_rate is not None else {}),
                # a retry backoff only when set (RETRY_BACKOFF_MS): retries at once keep their knobs as before
                **(dict(retry_backoff=cfg.retry_backoff_ms, retry_backoff_max=cfg.retry_backoff_max_ms)
                   if cfg.retry_backoff_ms else {}))


class Backend(ABC):
    name: str = ""
    mechanism: str = "app"  # how runs emulate delays: app (the transport) or netem (tc in the containers)

    def registry(self) -> protocols.Registry:
        """The protocols the engine this backend runs has built (protocols.RegistryError when it cannot tell)."""
        return protocols.load()

    def built_modes(self) -> list[str]:
        try:
            return self.registry().names()
        except protocols.RegistryError:
            return []

    @abstractmethod
    def deployment(self, **knobs) -> dict:
        """A deployment dict (docs/deploy-schema.md) for deploy knobs; ValueError on a bad knob."""

    @abstractmethod
    def run(self, deploy: dict, name: str, out_root="results", config: dict | None = None,
            meta_extra: dict | None = None, probe: int = 0) -> RunResult:
        """Run it into <out_root>/<name>/<run-id>/, summarise, check (lifecycle.Runner.run).
        probe > 0: an RTT self-test instead (RunResult.probe, see testbed/core/rtt.py)."""

    def selftest_knobs(self, cfg: ExpConfig) -> dict:
        """Deploy knobs of the RTT self-test: the configured matrix of every region deployed, no jitter, one light
        client per shard."""
        return {**base_knobs(cfg, regions=cfg.max_regions), "jitter": 0, "concurrency": 1, "clients_per_shard": 1,
                "faults": None, "rate": None}  # the default protocol; probes, not a load

    def describe(self) -> str:
        return f"{self.name} backend, shaping {self.mechanism}"

    def close(self) -> None:
        """Undo what runs changed (e.g. restore the configured jitter); the deployment itself stays up."""


class LocalBackend(Backend):
    """Every process on 127.0.0.1 (testbed/runs/local.py); delays always by the transport (app)."""
    name, mechanism = "local", "app"

    def __init__(self, build_dir=REPO / "build", progress: bool = True, **runner_opts):
        self.build_dir = Path(build_dir)
        self.runner = LocalRunner(build_dir=self.build_dir, progress=progress, **runner_opts)

    def registry(self) -> protocols.Registry:
        return protocols.load(self.build_dir / "txn-server")

    def deployment(self, **knobs) -> dict:
        return deploylib.build_deployment(**{**knobs, "mechanism": "app"})

    def run(self, deploy, name, out_root="results", config=None, meta_extra=None, probe=0) -> RunResult:
        return self.runner.run(deploy, name, out_root=out_root, config=config, probe=probe,
                               meta_extra={"backend": self.name, **(meta_extra or {})})
