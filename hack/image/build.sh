#!/usr/bin/env bash
# Builds the repository's unchanged Dockerfile with buildah, daemonless (no Docker engine), on
# the stand-in base from base.sh. Prints the image name ($IMAGE from versions.env).
#   DYNQUOTA_IMAGE           tag to build instead of localhost/dynquota:dev
#   DYNQUOTA_CA_BUNDLE       CA bundle mounted for pip inside the build (default: the host's),
#                            needed where registry traffic passes a TLS-intercepting proxy
# Layers are cached by buildah (--layers): an unchanged tree rebuilds in seconds.
set -euo pipefail
source "$(dirname "$0")/common.sh"
need buildah podman mmdebstrap
image=${DYNQUOTA_IMAGE:-$IMAGE}
base=$("$here/base.sh")
ca=${DYNQUOTA_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
volume=()
[ -r "$ca" ] && volume=(--volume "$ca:/etc/ssl/certs/ca-certificates.crt:ro")
start=$(date +%s)
cd "$here/../.."
buildah "${STORAGE[@]}" bud --quiet --layers --isolation chroot "${volume[@]}" \
  --build-arg PYTHON_IMAGE="$base" --tag "$image" --file Dockerfile . >&2
echo "built ${image} in $(( $(date +%s) - start )) s" >&2
echo "$image"
