#!/usr/bin/env bash
# Builds the repository's unchanged Dockerfile with buildah, daemonless (no Docker engine), on
# the stand-in base from base.sh. Prints the image name ($IMAGE from versions.env).
#   DYNQUOTA_IMAGE           tag to build instead of localhost/dynquota:dev
#   DYNQUOTA_PYTHON_IMAGE    the base to build on (a release: python:3.11-slim-bookworm from its
#                            registry) instead of the stand-in from base.sh
#   DYNQUOTA_CA_BUNDLE       CA bundle mounted for pip inside the build (default: the host's),
#                            needed where registry traffic passes a TLS-intercepting proxy
# Layers are cached by buildah (--layers): an unchanged tree rebuilds in seconds.
set -euo pipefail
source "$(dirname "$0")/common.sh"
need buildah podman
image=${DYNQUOTA_IMAGE:-$IMAGE}
if [ -n "${DYNQUOTA_PYTHON_IMAGE:-}" ]; then
  # a release build on the Dockerfile's own base, pulled from its registry
  base=$DYNQUOTA_PYTHON_IMAGE
  podman "${STORAGE[@]}" image exists "$base" || buildah "${STORAGE[@]}" pull --quiet "$base" >&2
else
  need mmdebstrap
  base=$("$here/base.sh")
fi
ca=${DYNQUOTA_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
volume=()
[ -r "$ca" ] && volume=(--volume "$ca:/etc/ssl/certs/ca-certificates.crt:ro")
cd "$here/../.."
# The build's inputs: the files the Dockerfile copies (see .dockerignore), the Dockerfile and the
# base. An image already built from the same inputs is reused at once: with vfs storage even a
# fully layer-cached `buildah bud` copies the base rootfs several times (minutes on 2 cores).
base_id=$(podman "${STORAGE[@]}" image inspect --format '{{.Id}}' "$base")
digest=$(
  {
    echo "$base_id"
    find Dockerfile .dockerignore pyproject.toml constraints.txt README.md dynquota \
      -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)
# one name for a build of these inputs, whatever tag is asked for (`make image`'s dev tag, the
# release tag of `make dist`), so each reuses the other's build
built="localhost/dynquota:ctx-${digest}"
if podman "${STORAGE[@]}" image exists "$built"; then
  podman "${STORAGE[@]}" tag "$built" "$image"
  echo "$image is up to date (${built})" >&2
  echo "$image"
  exit 0
fi
start=$(date +%s)
buildah "${STORAGE[@]}" bud --quiet --layers --isolation chroot "${volume[@]}" \
  --build-arg PYTHON_IMAGE="$base" --tag "$built" --tag "$image" --file Dockerfile . >&2
echo "built ${image} (${built}) in $(( $(date +%s) - start )) s" >&2
echo "$image"
