#!/usr/bin/env bash
# Installs promtool (Prometheus' rule checker and rule unit-test runner) into a cache directory
# outside the repository keyed by its source and version, once. Prints the binary's path.
#   DYNQUOTA_PROMTOOL          use this promtool binary instead
#   DYNQUOTA_PROMTOOL_SOURCE   debian (default): promtool from Debian's `prometheus` package,
#                              unpacked with dpkg-deb (not installed: no server, no service);
#                              seconds, and what CI uses.
#                              go: `go install` of PROMTOOL_GO_VERSION from the Go module proxy
#                              (the newest Prometheus; ~10 minutes on 2 cores, cached).
# The rule tests (tests/alerts/) pass with both; docs/metrics.md says why CI takes Debian's.
#   `install.sh prometheus` prints the Prometheus server of the same Debian package instead (the
#   dashboard's queries are run against a live scrape: tests/integration/test_dashboard.py);
#   DYNQUOTA_PROMETHEUS uses your own. Only the debian source has it.
set -euo pipefail
want=${1:-promtool}
case "$want" in
  promtool|prometheus) ;;
  *) echo "usage: $0 [promtool|prometheus]" >&2; exit 2 ;;
esac
if [ "$want" = prometheus ] && [ -n "${DYNQUOTA_PROMETHEUS:-}" ]; then
  echo "$DYNQUOTA_PROMETHEUS"
  exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
if [ "$want" = promtool ] && [ -n "${DYNQUOTA_PROMTOOL:-}" ]; then
  echo "$DYNQUOTA_PROMTOOL"
  exit 0
fi
source_kind=${DYNQUOTA_PROMTOOL_SOURCE:-debian}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dynquota/promtool
case "$source_kind" in
  debian)
    command -v apt-cache >/dev/null || {
      echo "no apt here: set DYNQUOTA_PROMTOOL_SOURCE=go (or DYNQUOTA_PROMTOOL=/path/to/promtool)" >&2
      exit 3
    }
    version=$(apt-cache policy "$PROMTOOL_DEBIAN_PACKAGE" | awk '/Candidate:/ {print $2}')
    if [ -z "$version" ] || [ "$version" = "(none)" ]; then
      echo "apt knows no $PROMTOOL_DEBIAN_PACKAGE package: run apt-get update" >&2
      exit 3
    fi
    dest="$cache/debian-${version//[:+~]/_}"
    ;;
  go)
    if [ "$want" = prometheus ]; then
      echo "the Prometheus server comes from Debian's package only: unset DYNQUOTA_PROMTOOL_SOURCE or set DYNQUOTA_PROMETHEUS" >&2
      exit 3
    fi
    dest="$cache/go-${PROMTOOL_GO_VERSION}"
    ;;
  *)
    echo "DYNQUOTA_PROMTOOL_SOURCE must be debian or go, not ${source_kind}" >&2
    exit 2
    ;;
esac
if [ -x "$dest/$want" ]; then
  echo "$dest/$want"
  exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
if [ "$source_kind" = debian ]; then
  echo "unpacking promtool from Debian's ${PROMTOOL_DEBIAN_PACKAGE} ${version}" >&2
  (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "${PROMTOOL_DEBIAN_PACKAGE}=${version}" >&2)
  dpkg-deb -x "$tmp"/*.deb "$tmp/root"
  mkdir -p "$tmp/out"
  cp "$tmp/root/usr/bin/promtool" "$tmp/root/usr/bin/prometheus" "$tmp/out/"
else
  echo "building promtool ${PROMTOOL_GO_VERSION} from the Go module proxy (~10 min on 2 cores)" >&2
  # remove_all_sd: leaves out the service-discovery plugins (cloud SDKs) rule tests never use.
  GOBIN="$tmp/out" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -trimpath \
    -tags remove_all_sd -ldflags "-s -w" \
    "github.com/prometheus/prometheus/cmd/promtool@${PROMTOOL_GO_VERSION}"
fi
"$tmp/out/promtool" --version >&2
echo "promtool ready in $(( $(date +%s) - start )) s" >&2
rm -rf "$dest"
mv "$tmp/out" "$dest"
echo "$dest/$want"
