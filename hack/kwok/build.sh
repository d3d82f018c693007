#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok, simulated Nodes and pod lifecycles without a container
# runtime) at the version in versions.env with `go install`, into a cache directory outside the
# repository keyed by that version, next to `stages.yaml`: the stages kwok needs, concatenated
# from the module's own kustomize/stage files. Prints that directory on stdout.
# A build happens only when something is missing.
#   DYNQUOTA_KWOK_ASSETS  use this directory instead (must hold kwok and stages.yaml)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
dest=${DYNQUOTA_KWOK_ASSETS:-${XDG_CACHE_HOME:-$HOME/.cache}/dynquota/kwok/kwok-${KWOK_VERSION}}
# Fast node and pod lifecycles: a Node becomes Ready and renews its Lease; a scheduled pod
# becomes Running; a Job's pod (ownerReference kind Job) completes; a deleted pod on a managed
# node goes away. A node taken out of kwok's annotation selector gets none of this: it falls
# silent, which is how a lost node is staged.
stages=(
  node/fast/node-initialize.yaml
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml
  pod/fast/pod-complete.yaml
  pod/fast/pod-delete.yaml
)

if [ -x "$dest/kwok" ] && [ -s "$dest/stages.yaml" ]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building kwok ${KWOK_VERSION} into ${dest} (cold: a few minutes on 2 cores)" >&2
start=$(date +%s)
module=$(cd "$tmp" && go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$module/kustomize/stage" ] || { echo "no kustomize/stage in $module" >&2; exit 1; }
for s in "${stages[@]}"; do
  [ -f "$module/kustomize/stage/$s" ] || { echo "kwok ${KWOK_VERSION} has no stage $s" >&2; exit 1; }
  printf -- '---\n# from sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "$KWOK_VERSION" "$s"
  cat "$module/kustomize/stage/$s"
done >"$tmp/stages.yaml"
CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
echo "built in $(( $(date +%s) - start )) s" >&2
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$dest"
