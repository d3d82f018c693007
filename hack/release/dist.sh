#!/usr/bin/env bash
# `make dist`: the release artifacts of this tree, into dist/ (docs/install.md, "Release: what to
# push where", says where each goes):
#   dynquota-<v>-py3-none-any.whl, dynquota-<v>.tar.gz   the package and CLI (python -m build)
#   dynquota-<v>.tgz                                     the Helm chart (helm lint --strict, package)
#   dynquota-image-<v>.oci.tar                           the image <image.repository>:<v>, an OCI
#                                                        archive (buildah; hack/image/build.sh)
#   SHA256SUMS
# <v> is the one version (dynquota/__init__.py); the chart's generated files must be current.
#   DYNQUOTA_DIST_IMAGE=0       skip the image (no buildah here, or no time: the build takes
#                               minutes after a code change on 2 cores)
#   DYNQUOTA_PYTHON_IMAGE=...   build the image on this base (a release: the Dockerfile's own
#                               python:3.11-slim-bookworm from a registry) instead of the
#                               Debian-made stand-in base CI uses (hack/image/base.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PY:-.venv/bin/python}
version=$("$py" -c 'import dynquota; print(dynquota.__version__)')
out=dist
start=$(date +%s)
rm -rf "$out" build
mkdir -p "$out"
echo "== dynquota $version" >&2
"$py" hack/chart/generate.py --check
echo "== wheel and sdist" >&2
"$py" -m build --sdist --wheel --outdir "$out" . >&2
rm -rf build dynquota.egg-info/SOURCES.txt.bak
echo "== chart" >&2
helm="$(hack/controlplane/build.sh)/helm"
"$helm" lint --strict helm/dynquota >&2
"$helm" package helm/dynquota --destination "$out" >&2
if [ "${DYNQUOTA_DIST_IMAGE:-1}" != 0 ]; then
  echo "== image" >&2
  repo=$("$py" -c 'import yaml; print(yaml.safe_load(open("helm/dynquota/values.yaml"))["image"]["repository"])')
  image="$repo:$version"
  DYNQUOTA_IMAGE="$image" hack/image/build.sh >&2
  podman --storage-driver "${DYNQUOTA_STORAGE_DRIVER:-vfs}" save --quiet --format oci-archive \
    -o "$out/dynquota-image-$version.oci.tar" "$image"
  base=${DYNQUOTA_PYTHON_IMAGE:-stand-in base (hack/image/base.sh): not for release}
  echo "$image built on $base" > "$out/IMAGE"
else
  echo "image skipped (DYNQUOTA_DIST_IMAGE=0)" > "$out/IMAGE"
fi
(cd "$out" && sha256sum -- * > SHA256SUMS)
echo "== dist/ in $(( $(date +%s) - start )) s:" >&2
ls -l "$out" >&2
