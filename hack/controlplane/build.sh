#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, helm and kwok
# at the versions in versions.env, in one `go build` so they share the compile cache (kwok is
# compiled against the same k8s.io/* modules as the control plane), into a cache directory
# outside the repository keyed by all those versions, next to `stages.yaml`: the stages kwok
# needs, concatenated from the kwok module's own kustomize/stage files. Prints that directory
# on stdout. A build happens only when something is missing.
#   DYNQUOTA_CONTROLPLANE_ASSETS  use this directory instead (like envtest's KUBEBUILDER_ASSETS)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}_kwok-${KWOK_VERSION}"
dest=${DYNQUOTA_CONTROLPLANE_ASSETS:-${XDG_CACHE_HOME:-$HOME/.cache}/dynquota/controlplane/$key}
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl helm kwok)
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

complete() {
  local b
  for b in "${bins[@]}"; do [ -x "$dest/$b" ] || return 1; done
  [ -s "$dest/stages.yaml" ]
}

if complete; then
  echo "$dest"
  exit 0
fi

mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=${KUBERNETES_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"${KUBERNETES_VERSION}")"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${KUBERNETES_VERSION}"
ldflags+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
echo "building control plane ${key} into ${dest} (cold: about 10 minutes on 2 cores)" >&2
start=$(date +%s)
(
  cd "$here"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    ./etcd \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    helm.sh/helm/v3/cmd/helm \
    sigs.k8s.io/kwok/cmd/kwok
  module=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  [ -d "$module/kustomize/stage" ] || { echo "no kustomize/stage in $module" >&2; exit 1; }
  for s in "${stages[@]}"; do
    [ -f "$module/kustomize/stage/$s" ] || { echo "kwok ${KWOK_VERSION} has no stage $s" >&2; exit 1; }
    printf -- '---\n# from sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "$KWOK_VERSION" "$s"
    cat "$module/kustomize/stage/$s"
  done >"$tmp/stages.yaml"
)
echo "built in $(( $(date +%s) - start )) s" >&2
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
complete || { echo "build produced no complete set in $dest" >&2; exit 1; }
echo "$dest"
