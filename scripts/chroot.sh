#!/usr/bin/env bash
# A Debian 13 (trixie) chroot for the LibTorch 2.x suite: Debian 12's libc cannot run trixie's
# binaries, so the 2.x LibTorch (libtorch-dev 2.6) is built against and tested inside a root of
# its own. This script makes that root once (debootstrap, minbase) and caches it in
# FSDP_CHROOT_DIR (default /var/cache/fsdp/trixie); later runs reuse it, and only install packages
# that scripts/setup.sh has since come to list. Then it runs a command inside, in a private mount
# namespace (nothing stays mounted when it ends) where the repository sits at the same path as
# outside, so build folders and paths in test logs read the same on both sides.
# The mirror is the one apt uses on this machine (its sources), never a name written here.
#
# --cuda: another root (default /var/cache/fsdp/trixie-cuda; libtorch-cuda-dev conflicts with
# libtorch-dev) with Debian 13's CUDA LibTorch 2.6, the CUDA toolkit's headers and NCCL from contrib
# and non-free, so that the CUDA build compiles and links on machines without a GPU. Its
# nvidia-cudnn dependency is an installer that downloads cuDNN from outside, which cannot work
# here: a local placeholder package stands in for it (nothing we build calls cuDNN).
#
# Needs root (or sudo). Usage: scripts/chroot.sh [--cuda] COMMAND [ARGS...]   (run from anywhere)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
# FSDP_CHROOT_SUITE: another Debian suite for a one-off check (sid has the newest LibTorch); its
# root then defaults to /var/cache/fsdp/<suite>.
SUITE=${FSDP_CHROOT_SUITE:-trixie}
if [[ $(id -u) -ne 0 ]]; then
  exec sudo --preserve-env=FSDP_CHROOT_DIR,FSDP_CHROOT_SUITE "$0" "$@"
fi
CUDA=""
if [[ "${1:-}" == "--cuda" ]]; then
  CUDA=1
  shift
fi
ROOT=${FSDP_CHROOT_DIR:-/var/cache/fsdp/$SUITE}${CUDA:+-cuda}
COMPONENTS="main${CUDA:+ contrib non-free non-free-firmware}"
CHROOT_ENV=(${CUDA:+FSDP_CUDA=1})  # scripts/setup.sh then installs the CUDA packages

# The archive apt installs this machine's own release from (deb822 .sources files, then one-line
# lists): the first entry whose suites include this release's codename, so that neither the
# security archive nor a third-party repository is taken for Debian's mirror.
mirror() {
  local codename uri
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v c="$codename" '
    BEGIN { RS = ""; FS = "\n" }
    {
      u = ""; ok = 0
      for (i = 1; i <= NF; i++) {
        n = split($i, f, " ")
        if (f[1] == "URIs:") u = f[2]
        if (f[1] == "Suites:") for (j = 2; j <= n; j++) if (f[j] == c) ok = 1
      }
      if (ok && u != "") { print u; exit }
    }')
  if [[ -z "$uri" ]]; then
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk -v c="$codename" '
      $1 == "deb" {
        for (i = 2; i < NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($(i + 1) == c) { print $i; exit } break }
      }')
  fi
  [[ -n "$uri" ]] || {
    echo "chroot: no Debian mirror found in /etc/apt/sources.list{,.d}" >&2
    exit 1
  }
  echo "$uri"
}

bootstrap() {
  [[ -f "$ROOT/.fsdp-bootstrapped" ]] && return
  command -v debootstrap >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  }
  local url start=$SECONDS
  url=$(mirror)
  echo "chroot: making a $SUITE root in $ROOT from $url"
  # Only a root this script began (marked before debootstrap ran) is ever replaced.
  if [[ -n "$(ls -A "$ROOT" 2>/dev/null)" && ! -f "$ROOT/.fsdp-root" ]]; then
    echo "chroot: $ROOT exists and was not made by scripts/chroot.sh: not replacing it" >&2
    exit 1
  fi
  rm -rf --one-file-system "$ROOT"
  mkdir -p "$ROOT"
  touch "$ROOT/.fsdp-root"
  # In a mount namespace of its own, so that the /proc and /sys debootstrap mounts inside the root
  # cannot outlive it if it is killed.
  unshare --mount --propagation private debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOT" "$url" >"$ROOT.log" 2>&1 || {
    tail -n 30 "$ROOT.log" >&2
    echo "chroot: debootstrap failed (whole log: $ROOT.log)" >&2
    exit 1
  }
  echo "deb $url $SUITE $COMPONENTS" >"$ROOT/etc/apt/sources.list"
  # The configured mirror may be a dated snapshot whose Release files have expired (sid's do).
  echo 'Acquire::Check-Valid-Until "false";' >"$ROOT/etc/apt/apt.conf.d/99fsdp-snapshot"
  touch "$ROOT/.fsdp-bootstrapped"
  echo "chroot: bootstrapped in $((SECONDS - start)) s"
}

# Runs "$@" inside the root with /proc, /sys, /dev, /run/netns (the two-host test's network
# namespaces), the host's DNS settings and the repository mounted, in a mount namespace of its own.
enter() {
  unshare --mount --propagation private -- bash -euo pipefail -c '
    root=$1 repo=$2
    shift 2
    # The root a mount point of its own: ip netns (the two-host test) remounts / as a slave.
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mkdir -p "$root/run" "$root/tmp" "$root$repo"
    mount -t tmpfs tmpfs "$root/run"
    mount -t tmpfs -o size=50% tmpfs "$root/dev/shm"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    mount --bind "$repo" "$root$repo"
    exec chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      LANG=C.UTF-8 ${CI:+CI=$CI} ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE} \
      FSDP_IN_CHROOT=1 bash -c "cd \"\$0\" && exec \"\$@\"" "$repo" "$@"
  ' enter "$ROOT" "$REPO" env "${CHROOT_ENV[@]}" "$@"
}

# The stand-in for nvidia-cudnn (see above), installed once.
cudnn_placeholder() {
  [[ -n "$CUDA" ]] || return 0
  chroot "$ROOT" dpkg-query -W -f='${Status}' nvidia-cudnn 2>/dev/null | grep -q "ok installed" &&
    return
  local pkg="$ROOT/tmp/nvidia-cudnn-placeholder"
  mkdir -p "$pkg/DEBIAN"
  printf '%s\n' "Package: nvidia-cudnn" "Version: 99:0-fsdp-placeholder" "Architecture: amd64" \
    "Maintainer: fsdp.cpp <nobody@invalid>" \
    "Description: placeholder for the cuDNN downloader, which cannot reach its server here" \
    >"$pkg/DEBIAN/control"
  chroot "$ROOT" dpkg-deb --build /tmp/nvidia-cudnn-placeholder /tmp/nvidia-cudnn.deb >/dev/null
  chroot "$ROOT" dpkg -i /tmp/nvidia-cudnn.deb >/dev/null
}

bootstrap
cudnn_placeholder
# setup.sh installs, inside, what is missing (nothing, once the cache is warm); FSDP_IN_CHROOT
# tells it that the assets come from outside (scripts/test.sh fetched them) and need no npm here.
start=$SECONDS
enter scripts/setup.sh --no-build
echo "chroot: packages ready in $((SECONDS - start)) s"
enter "$@"
