#!/usr/bin/env bash
# Makes the stand-in Python base image from Debian packages (mmdebstrap) and imports it into the
# local container storage, once per package list (versions.env). Prints the image name.
# It exists because no container registry is reachable on CI; a release build uses the
# Dockerfile's default base (python:3.11-slim-bookworm) instead — see docs/install.md.
set -euo pipefail
source "$(dirname "$0")/common.sh"
need podman mmdebstrap
if podman "${STORAGE[@]}" image exists "$BASE_IMAGE"; then
  echo "$BASE_IMAGE"
  exit 0
fi
mkdir -p "$CACHE_DIR"
tar="$CACHE_DIR/base-${BASE_SUITE}-${base_key}.tar"
if [ ! -s "$tar" ]; then
  start=$(date +%s)
  echo "building base ${BASE_IMAGE}: mmdebstrap ${BASE_SUITE} with ${BASE_PACKAGES}" >&2
  # mmdebstrap picks the output format from the file name: keep `.tar` at the end.
  part="$CACHE_DIR/.part-$$.tar"
  trap 'rm -f "$part"' EXIT
  mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" \
    "$BASE_SUITE" "$part" >&2
  mv "$part" "$tar"
  trap - EXIT
  echo "base rootfs built in $(( $(date +%s) - start )) s" >&2
fi
podman "${STORAGE[@]}" import --quiet "$tar" "$BASE_IMAGE" >/dev/null
echo "$BASE_IMAGE"
