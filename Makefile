# Entry points; scripts/setup.sh is the single set-up step (apt, .venv, cmake+ninja). `setup` builds everything
# (the unit tests too); `engine` only the engine's programs, which is all a run needs.
.PHONY: setup engine engine-image build test main main-all smoke demo bench image up down bench-swarm mutants rehearsal rehearsal-down clean

setup:
	scripts/setup.sh

engine:
	scripts/setup.sh --engine

# the engine, and the image's Debian base made while it compiles (for the targets that build the image)
engine-image:
	scripts/setup.sh --engine --image-base

build:
	@[ -f build/build.ninja ] || cmake -S . -B build -G Ninja
	ninja -C build -j2

# ctest in a worker per core; pytest (pytest-xdist) in a worker per core plus one per Docker test file, which run at
# the same time, each on a deployment of its own (tests/python/conftest.py); a test run by hand
# (`.venv/bin/pytest tests/python/test_x.py`) stays in one process
test: setup
	ctest --test-dir build --output-on-failure -j$$(nproc)
	.venv/bin/pytest -n auto --durations=15

main: engine-image
	.venv/bin/python run_experiments.py --quick

main-all: engine-image
	.venv/bin/python run_experiments.py --quick --all

# every experiment once, short (testbed/core/presets.py: smoke), into results/smoke/ and always run anew: a check of
# the whole pipeline before a long sweep, on the same deployment as `make main`; ~10 min; CI runs it
smoke: engine-image
	.venv/bin/python run_experiments.py --all --preset smoke --fresh --out results/smoke

demo: engine
	.venv/bin/python run_local.py

bench: engine
	.venv/bin/python scripts/bench.py

# Deliberately broken protocol variants vs the tests (tests/mutants/README.md); ~2 h, not part of `make test`.
mutants: setup
	.venv/bin/python scripts/mutants.py

image:
	docker/build_image.sh

up: engine-image
	.venv/bin/python start_containers.py --check-owner
	docker/build_image.sh --if-stale
	.venv/bin/python start_containers.py --self-test

down: engine
	.venv/bin/python start_containers.py --down

bench-swarm: engine-image
	.venv/bin/python start_containers.py --check-owner
	docker/build_image.sh --if-stale
	.venv/bin/python scripts/bench_swarm.py

# A multi-host cluster on this machine: extra Docker daemons in network namespaces join the swarm; bring-up, self-test,
# every protocol once, a host lost mid-run, teardown (docs/multi-host.md); ~4 min.
rehearsal: engine-image
	docker/build_image.sh --if-stale
	.venv/bin/python scripts/rehearse.py

rehearsal-down: engine
	.venv/bin/python scripts/rehearse.py --down

clean:
	rm -rf build build-mutants .pytest_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +
