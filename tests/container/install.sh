#!/usr/bin/env bash
# What tests/container.rs needs to build and run deploy/Containerfile offline: Debian's buildah
# (a daemonless builder; it runs a build's steps with chroot isolation, no daemon and no OCI
# runtime needed) and debootstrap, and the image's base, `debian:trixie-slim`, which no
# container registry these machines reach can give. The base is made here instead, from Debian's
# own packages (debootstrap's minbase variant of trixie, as the official slim image is), from
# the apt mirror this machine is configured with, and stored in buildah's storage as
# localhost/debian:trixie-slim. Both installs are apt's, as root; otherwise this fails with the
# command to run. Idempotent, and quick when everything is there (the root folder is cached in
# ~/.cache/picogent/container). The test runs this on first use (tests/support/setup.rs), and so
# does tests/setup.sh.
set -euo pipefail
BASE=localhost/debian:trixie-slim

missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "tests/container/install.sh: ${missing[*]} missing, and only apt installs them (as root);" \
         "run: sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null
fi

if [ -z "$(buildah images -q "$BASE" 2>/dev/null)" ]; then
  cache="${PICOGENT_CONTAINER_CACHE:-$HOME/.cache/picogent/container}"
  mkdir -p "$cache"
  if [ ! -f "$cache/rootfs.done" ]; then
    # The mirror apt on this machine uses for Debian (deb822 or one-line sources).
    mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    if [ -z "$mirror" ]; then
      mirror=$(awk '$1 == "deb" && $3 ~ /^(bookworm|trixie)$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
    fi
    if [ -z "$mirror" ]; then
      echo "tests/container/install.sh: no Debian mirror found in apt's sources for debootstrap" >&2
      exit 1
    fi
    rm -rf "$cache/rootfs"
    if ! debootstrap --variant=minbase trixie "$cache/rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1; then
      tail -n 20 "$cache/debootstrap.log" >&2
      exit 1
    fi
    touch "$cache/rootfs.done"
  fi
  container=$(buildah from scratch)
  trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
  root=$(buildah mount "$container")
  cp -a "$cache/rootfs/." "$root/"
  buildah umount "$container" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$container"
  buildah commit -q "$container" "$BASE" >/dev/null
fi
echo "$(buildah --version), base $BASE $(buildah images -q "$BASE")"
