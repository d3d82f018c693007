#!/usr/bin/env bash
# Builds the Toxiproxy server (github.com/Shopify/toxiproxy/v2/cmd/server, a binary named
# `server`) at the version in versions.env with `go install` from the Go module proxy, into a
# cache directory outside the repository keyed by that version. Prints that directory on stdout.
# A build happens only when the binary is missing.
#   DYNQUOTA_TOXIPROXY_ASSETS  use this directory instead (it must hold `server`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
dest=${DYNQUOTA_TOXIPROXY_ASSETS:-${XDG_CACHE_HOME:-$HOME/.cache}/dynquota/toxiproxy/${TOXIPROXY_VERSION}}

if [ -x "$dest/server" ]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building toxiproxy ${TOXIPROXY_VERSION} into ${dest} (about a minute)" >&2
start=$(date +%s)
chmod 755 "$tmp"
CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath \
  -ldflags "-s -w -X github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION}" \
  "github.com/Shopify/toxiproxy/v2/cmd/server@${TOXIPROXY_VERSION}"
echo "built in $(( $(date +%s) - start )) s" >&2
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
[ -x "$dest/server" ] || { echo "build produced no $dest/server" >&2; exit 1; }
echo "$dest"
