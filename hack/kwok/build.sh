#!/usr/bin/env bash
# Prints the directory holding kwok (sigs.k8s.io/kwok: simulated Nodes and pod lifecycles
# without a container runtime) and `stages.yaml`. kwok is built with the control plane, in the
# same `go build` and cache directory (hack/controlplane/build.sh, KWOK_VERSION in
# hack/controlplane/versions.env), so this builds only when that directory is incomplete.
#   DYNQUOTA_KWOK_ASSETS  use this directory instead (must hold kwok and stages.yaml)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${DYNQUOTA_KWOK_ASSETS:-}" ]; then
  [ -x "$DYNQUOTA_KWOK_ASSETS/kwok" ] && [ -s "$DYNQUOTA_KWOK_ASSETS/stages.yaml" ] || {
    echo "DYNQUOTA_KWOK_ASSETS=$DYNQUOTA_KWOK_ASSETS lacks kwok or stages.yaml" >&2
    exit 1
  }
  echo "$DYNQUOTA_KWOK_ASSETS"
  exit 0
fi
exec "$here/../controlplane/build.sh"
