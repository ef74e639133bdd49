#!/usr/bin/env bash
# Builds the burstscope agent's OCI image from this checkout: the wheels first (this
# checkout's, and its dependencies' from the package index or pip's cache), then the image
# from deploy/container/Dockerfile with no network at build time. Prints the image's name
# and size in bytes (one JSON line) on stdout.
#
#   deploy/container/build.sh [--tag NAME] [--base IMAGE | --mmdebstrap]
#
#   --tag NAME     the image's name (default localhost/burstscope:VERSION)
#   --base IMAGE   a Debian bookworm base image the builder can pull or already has
#   --mmdebstrap   make the base from Debian's packages with mmdebstrap (Debian's mirror is
#                  the only network it needs): for machines that reach no image registry
#
# Builder: buildah where installed, else podman, else docker. PYTHON names the Python (3.11,
# as bookworm's) whose pip builds the wheels (default python3).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml")"
tag="localhost/burstscope:$version"
base=""
mmdebstrap=0
die() { echo "build.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --tag) [ $# -ge 2 ] || die "--tag needs a name"; tag="$2"; shift 2 ;;
        --base) [ $# -ge 2 ] || die "--base needs an image"; base="$2"; shift 2 ;;
        --mmdebstrap) mmdebstrap=1; shift ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
[ -n "$base" ] && [ "$mmdebstrap" -eq 1 ] && die "give --base or --mmdebstrap, not both"
if command -v buildah >/dev/null 2>&1; then builder=(buildah build --format oci)
elif command -v podman >/dev/null 2>&1; then builder=(podman build --format oci)
elif command -v docker >/dev/null 2>&1; then builder=(docker build)
else die "no image builder: install buildah, podman or docker"; fi

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$here/Dockerfile" "$context/"
# The wheels the image installs with --no-index; a wheel of this checkout, built for this
# Python (bookworm's is 3.11: the compiled tick must match its ABI).
"$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$context/wheels" \
    "${root}[mqtt,kubernetes,web]" >&2

build_args=()
if [ "$mmdebstrap" -eq 1 ]; then
    command -v mmdebstrap >/dev/null 2>&1 || die "--mmdebstrap needs mmdebstrap (Debian package mmdebstrap)"
    # The base is named after the image: NAME-base:bookworm.
    name="$tag"; [[ "${tag##*/}" == *:* ]] && name="${tag%:*}"
    base="$name-base:bookworm"
    # apt variant (Essential, apt) plus Python; documentation and translations left out but
    # the copyright files, which the packages' licences ask to keep. The merged-usr hook
    # creates the tree merged-/usr and installs usr-is-merged, where bookworm's
    # init-system-helpers would otherwise bring usrmerge and with it Perl (47 MB) only to
    # convert a tree (mmdebstrap(1), MERGED-/USR).
    mmdebstrap --quiet --variant=apt --include=python3,python3-venv \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        bookworm "$context/base.tar" >&2
    case "${builder[0]}" in
        buildah) container="$(buildah from scratch)"
                 buildah add --quiet "$container" "$context/base.tar" / >/dev/null
                 buildah commit --quiet --format oci --rm "$container" "$base" >/dev/null ;;
        podman) podman import --quiet "$context/base.tar" "$base" >/dev/null ;;
        docker) docker import "$context/base.tar" "$base" >/dev/null ;;
    esac
    rm -f "$context/base.tar"
fi
[ -n "$base" ] && build_args+=(--build-arg "BASE=$base")
"${builder[@]}" --quiet "${build_args[@]}" --tag "$tag" "$context" >&2
case "${builder[0]}" in
    buildah) size="$(buildah inspect --type image --format '{{.ImageSize}}' "$tag" 2>/dev/null || true)" ;;
    *) size="" ;;
esac
if [ -z "$size" ] || [ "$size" = "0" ]; then
    tool="${builder[0]}"; [ "$tool" = buildah ] && tool=podman
    command -v "$tool" >/dev/null 2>&1 && size="$("$tool" image inspect --format '{{.Size}}' "$tag")"
fi
printf '{"image": "%s", "size_bytes": %s}\n' "$tag" "${size:-null}"
