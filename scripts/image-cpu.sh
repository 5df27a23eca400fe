#!/usr/bin/env bash
# `make image-cpu`: build the Dockerfile's cpu target with buildah, with no container registry.
#
# The base is made locally unless CPU_BASE names one: debootstrap builds Debian bookworm (whose Python is 3.11, the
# locks' version) from Debian's packages and podman imports it as localhost/esbench-base:bookworm. torch 2.13.0+cpu
# comes from WHEELS (default /opt/wheels, mounted into the build) where PyTorch's CPU index is not reachable.
# buildah runs with chroot isolation and vfs storage (what works on machines without overlay or cgroups v2).
set -euo pipefail
cd "$(dirname "$0")/.."
STORAGE=(--storage-driver vfs)
IMAGE="${IMAGE:-localhost/esbench:cpu}"
WHEELS="${WHEELS:-/opt/wheels}"
start=$(date +%s)
if [ -z "${CPU_BASE:-}" ]; then
  CPU_BASE=localhost/esbench-base:bookworm
  if ! podman "${STORAGE[@]}" image exists "$CPU_BASE"; then
    command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
    root=$(mktemp -d /tmp/esbench-base-XXXXXX)
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" \
      http://deb.debian.org/debian >/dev/null
    tar -C "$root" -c . | podman "${STORAGE[@]}" import - "$CPU_BASE" >/dev/null
  fi
fi
args=(--build-arg "CPU_BASE=$CPU_BASE" --build-arg "ESBENCH_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)")
if [ -d "$WHEELS" ]; then
  args+=(--volume "$WHEELS:/wheels:ro" --build-arg PIP_FIND_LINKS=/wheels --build-arg TORCH_CPU_INDEX=https://pypi.org/simple)
fi
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then  # the host's CAs (a TLS-intercepting proxy signs with its own)
  args+=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/esbench-host-ca.crt:ro --build-arg PIP_CERT=/etc/esbench-host-ca.crt)
fi
buildah "${STORAGE[@]}" bud --isolation chroot --target cpu "${args[@]}" -t "$IMAGE" .
size=$(podman "${STORAGE[@]}" image inspect --format '{{.Size}}' "$IMAGE")
digest=$(podman "${STORAGE[@]}" image inspect --format '{{.Digest}}' "$IMAGE")
echo "{\"image\": \"$IMAGE\", \"digest\": \"$digest\", \"size_bytes\": $size, \"seconds\": $(( $(date +%s) - start ))}"
