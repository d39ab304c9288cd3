#!/usr/bin/env bash
# Build the edge-txn image:  docker/build_image.sh [--if-stale | --deps-only] [IMAGE_NAME]   (default edge-txn:latest)
# --if-stale: do nothing when the image was built from the same sources (label edge-txn.source).
# --deps-only: when the image is stale, only its part that needs no engine program (the base, the Debian packages,
# the venv: the Dockerfile's deps stage), left in Docker's cache for the build; scripts/setup.sh --image-base runs it
# while the engine compiles.
# Env: BASE (default debian:bookworm-slim), DEBIAN_MIRROR (default: from this host's apt sources).
# If BASE is neither local nor pullable (no registry), it is created locally with debootstrap
# (minbase bookworm) and `docker import`ed under the same name. Idempotent: later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
IF_STALE=0 DEPS_ONLY=0
if [[ ${1:-} == --if-stale ]]; then IF_STALE=1; shift; elif [[ ${1:-} == --deps-only ]]; then IF_STALE=1 DEPS_ONLY=1; shift; fi
IMAGE=${1:-edge-txn:latest}
# What the image is built from (the Python testbed is also mounted from the checkout in the driver):
SOURCE_HASH=$(cat CMakeLists.txt pyproject.toml constraints.txt docker/Dockerfile docker/entrypoint.sh \
              $(find src -type f | LC_ALL=C sort) | sha256sum | cut -c1-16)
BASE=${BASE:-debian:bookworm-slim}
die() { echo "build_image: $*" >&2; exit 1; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon (is it running, and may $(id -un) use it?)"
if ((IF_STALE)) && [[ $(docker image inspect -f '{{ index .Config.Labels "edge-txn.source" }}' "$IMAGE" 2>/dev/null) == "$SOURCE_HASH" ]]; then
  echo "build_image: $IMAGE is up to date (source $SOURCE_HASH)"
  exit 0
fi

# First URI of the host's apt sources serving bookworm (deb822 *.sources or one-line *.list).
host_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] && awk '/^URIs:/{u=$2} /^Suites:/ && / bookworm( |$)/ && u {print u; exit}' "$f"
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1=="deb" && $0 ~ / bookworm / {for(i=2;i<=NF;i++) if($i ~ /^https?:/){print $i; exit}}'
}

make_base() {
  echo "build_image: no registry: creating $BASE locally with debootstrap"
  [[ $(id -u) -eq 0 ]] || die "creating the base image needs root (debootstrap); rerun with sudo"
  if ! command -v debootstrap >/dev/null; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
  fi
  local mirror=${DEBIAN_MIRROR:-$(host_mirror | head -n1)}
  mirror=${mirror:-http://deb.debian.org/debian}
  local dir; dir=$(mktemp -d /tmp/edge-txn-rootfs.XXXXXX)
  trap 'rm -rf "$dir"' EXIT
  echo "build_image: debootstrap --variant=minbase bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$dir" "$mirror" >/tmp/edge-txn-debootstrap.log 2>&1 \
    || { tail -n 20 /tmp/edge-txn-debootstrap.log >&2; die "debootstrap failed (log: /tmp/edge-txn-debootstrap.log)"; }
  # Same suites as the official image; drop caches so the base stays small.
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
    "$mirror" "$mirror" "${mirror%/debian}/debian-security" > "$dir/etc/apt/sources.list"
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/var/log/* "$dir"/tmp/*
  tar -C "$dir" --numeric-owner -c . |
    docker import -c 'CMD ["bash"]' -m "debootstrap minbase bookworm ($mirror)" - "$BASE" >/dev/null
  rm -rf "$dir"; trap - EXIT
  echo "build_image: created $BASE ($(docker image inspect -f '{{.Size}}' "$BASE" | numfmt --to=iec))"
}

if docker image inspect "$BASE" >/dev/null 2>&1; then
  echo "build_image: using local $BASE"
elif timeout 120 docker pull -q "$BASE" >/dev/null 2>&1; then
  echo "build_image: pulled $BASE"
else
  make_base
fi

# The context is streamed as a tar of only what docker/Dockerfile copies (the legacy builder, Docker < 23 without
# BuildKit, has no per-Dockerfile ignore file and the repo root has none).
# EXTRA_CA_DIR (default /usr/local/share/ca-certificates): its *.crt go to docker/extra-ca/ in the
# stream only, trusted by pip in the build (needed behind a TLS-intercepting proxy), not in the image.
ctx=$(mktemp -d /tmp/edge-txn-ctx.XXXXXX); trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/docker/extra-ca" "$ctx/docker/prebuilt"
find "${EXTRA_CA_DIR:-/usr/local/share/ca-certificates}" -name '*.crt' -exec cp {} "$ctx/docker/extra-ca/" \; 2>/dev/null || true

# The engine's programs: this host's build/ (brought current with src/ first: a no-op after `make engine`) when it
# can stand for the image's own -- the host is bookworm like the image (the same compiler and libraries) and build/
# has the default configuration -- which saves the image the compiler's packages and a second compile of the same
# sources; otherwise, or with EDGE_TXN_IMAGE_COMPILE=1, the image's build stage compiles them.
ENGINE=(txn-server txn-client txn-replay)
prebuilt_why() {
  [[ ${EDGE_TXN_IMAGE_COMPILE:-0} == 1 ]] && { echo "EDGE_TXN_IMAGE_COMPILE=1"; return; }
  [[ $(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-}") == bookworm ]] || { echo "this host is not Debian bookworm"; return; }
  [[ -f build/build.ninja && -f build/CMakeCache.txt ]] || { echo "no build/ here"; return; }
  grep -Eq '^CMAKE_BUILD_TYPE:STRING=(|RelWithDebInfo|Release)$' build/CMakeCache.txt &&
    grep -Eq '^CMAKE_CXX_FLAGS:STRING=$' build/CMakeCache.txt || { echo "build/ has a non-default configuration"; return; }
  command -v ninja >/dev/null && ninja -C build -j"${JOBS:-2}" "${ENGINE[@]}" >/tmp/edge-txn-engine-build.log 2>&1 ||
    echo "building them in build/ failed (log: /tmp/edge-txn-engine-build.log)"
}
why=$( ((DEPS_ONLY)) || prebuilt_why)   # --deps-only: the engine is being compiled, and is not needed yet
if ((DEPS_ONLY)); then
  :
elif [[ -z $why ]]; then
  for b in "${ENGINE[@]}"; do install -s -m 755 "build/$b" "$ctx/docker/prebuilt/"; done
  echo "build_image: the engine's programs from this host's build/ (bookworm like the image; EDGE_TXN_IMAGE_COMPILE=1 compiles them in the image)"
else
  echo "build_image: compiling the engine in the image ($why)"
fi
# app/: what the image runs of the checkout (one COPY step: each step costs the legacy builder seconds)
mkdir -p "$ctx/app/docker"
cp -pr ./*.py pyproject.toml testbed docs "$ctx/app/"
cp -p docker/entrypoint.sh "$ctx/app/docker/"
find "$ctx/app" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
start=$SECONDS
tar -c CMakeLists.txt src pyproject.toml constraints.txt docker/Dockerfile -C "$ctx" docker/extra-ca docker/prebuilt app |
  if ((DEPS_ONLY)); then
    docker build --force-rm -f docker/Dockerfile --build-arg BASE="$BASE" --target deps -q - >/dev/null
  else
    docker build --force-rm -f docker/Dockerfile --build-arg BASE="$BASE" --label "edge-txn.source=$SOURCE_HASH" -t "$IMAGE" -
  fi
((DEPS_ONLY)) && { echo "build_image: the image's deps stage is built (${BASE}, packages, venv) in $((SECONDS - start))s"; exit 0; }
echo "build_image: built $IMAGE in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
