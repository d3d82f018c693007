# Sourced by hack/image/*.sh: versions, the base image's cache key, and the container tools'
# options. vfs storage and chroot isolation need no overlay, no fuse and no user namespaces, so
# they work inside an unprivileged CI container (and anywhere else, only slower).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/versions.env"
base_key=$(printf '%s %s' "$BASE_SUITE" "$BASE_PACKAGES" | sha256sum | cut -c1-12)
BASE_IMAGE="${BASE_NAME}:${BASE_SUITE}-${base_key}"
STORAGE=(--storage-driver "${DYNQUOTA_STORAGE_DRIVER:-vfs}")
CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/dynquota/image
need() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || {
      echo "$t is not installed (Debian/Ubuntu: apt-get install buildah podman mmdebstrap)" >&2
      exit 3
    }
  done
}
