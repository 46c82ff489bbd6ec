# Shared by the field tests (tests/field/run, tests/field/cgroup2): messages, timing,
# and the Debian 12 root both boot, made once with debootstrap and kept under
# target/field/. Sourced, not run.

cache=$PWD/target/field
mkdir -p "$cache"

fail() {
    echo "field: $*" >&2
    exit 1
}
say() { echo "field: $*"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# libpam-systemd: a lingering user's manager starts only with pam_systemd.
rootfs_packages=systemd,systemd-sysv,libpam-systemd,dbus,bubblewrap,git,ca-certificates,procps,python3,curl

# Makes $cache/rootfs from this machine's own Debian mirror (about 65 s cold), unless
# it is there with the same package list.
ensure_rootfs() {
    [ "$(cat "$cache/rootfs/.complete" 2> /dev/null)" != "$rootfs_packages" ] || return 0
    # This machine's own mirror, from its apt sources (deb822 or one-line format).
    local mirror started
    mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$mirror" ] || fail "no Debian mirror in this machine's apt sources to debootstrap from"
    rm -rf --one-file-system "$cache/rootfs.tmp" "$cache/rootfs"
    started=$(date +%s%N)
    debootstrap --variant=minbase --include="$rootfs_packages" bookworm "$cache/rootfs.tmp" "$mirror" \
        > "$cache/debootstrap.log" 2>&1 || fail "debootstrap failed (see $cache/debootstrap.log)"
    echo "$rootfs_packages" > "$cache/rootfs.tmp/.complete"
    mv "$cache/rootfs.tmp" "$cache/rootfs"
    say "debootstrap bookworm: $(ms_since "$started") ms"
}
