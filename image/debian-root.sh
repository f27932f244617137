# image/debian-root.sh: a Debian arm64 root made with debootstrap and entered with chroot under
# qemu-user (binfmt_misc), shared by image/build (the SD card) and .ci/arm64 (the arm64 tests).
#
# Sourced, not run. The caller sets ROOT (the root's folder), SUITE and MIRROR, and defines
# die MESSAGE (prints and exits). On an x86 host it needs qemu-user-static and binfmt-support.
# shellcheck shell=bash

MOUNTS=()

log() { printf '\n== %s  %s\n' "$(date +%T)" "$*"; }

# The host runs aarch64 binaries through qemu-user. The handler's F flag makes the kernel open
# qemu when it is registered, so the root needs no copy of it.
enable_binfmt() {
    [ "$(uname -m)" = aarch64 ] && return 0
    command -v update-binfmts >/dev/null ||
        die "update-binfmts is missing (apt-get install qemu-user-static binfmt-support)"
    [ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
        die "cannot mount binfmt_misc (a container needs --privileged for it)"
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64 || true
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] ||
        die "no qemu-aarch64 binfmt handler (apt-get install qemu-user-static binfmt-support)"
}

# Undo every bind mount into the root, newest first; safe to call twice (the EXIT trap does).
cleanup() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[i]}" 2>/dev/null || true; done
    MOUNTS=()
}
bind() { mount --bind "$1" "$2"; MOUNTS+=("$2"); }
mount_chroot() {
    bind /proc "$ROOT/proc"
    bind /sys "$ROOT/sys"
    bind /dev "$ROOT/dev"
    bind /dev/pts "$ROOT/dev/pts"
}

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"; }
apt_install() { in_root apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-confold "$@"; }

# A minimal Debian $SUITE arm64 in $ROOT (emptied first) with COMPONENTS ("main ...") of $MIRROR
# and the security archive as its apt sources, and no daemon starting in it; then apt-get update.
bootstrap_root() {
    local components=$1
    log "debootstrap $SUITE arm64 (first stage)"
    rm -rf "$ROOT"
    mkdir -p "$ROOT"
    debootstrap --arch=arm64 --foreign --variant=minbase "$SUITE" "$ROOT" "$MIRROR"
    log "debootstrap second stage (under qemu-user)"
    chroot "$ROOT" /debootstrap/debootstrap --second-stage

    cat > "$ROOT/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: $components
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $SUITE-security
Components: $components
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    rm -f "$ROOT/etc/apt/sources.list"
    printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"   # no daemons start in the chroot
    chmod +x "$ROOT/usr/sbin/policy-rc.d"
    mount_chroot
    in_root apt-get update
}

