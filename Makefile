# Entry points; scripts/setup.sh is the single set-up step (apt, .venv, cmake+ninja).
.PHONY: setup build test demo bench clean

setup:
	scripts/setup.sh

build:
	@[ -f build/build.ninja ] || cmake -S . -B build -G Ninja
	ninja -C build -j2

test: setup
	ctest --test-dir build --output-on-failure
	.venv/bin/pytest

demo: setup
	.venv/bin/python run_local.py

bench: setup
	.venv/bin/python scripts/bench_dast.py

clean:
	rm -rf build .pytest_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +
