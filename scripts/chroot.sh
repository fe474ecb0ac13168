#!/usr/bin/env bash
# Debian chroots for the PostgreSQL majors that this machine's release does
# not have: each holds one major's server, its headers and what the tests,
# the package build and the TAP tests start, from that major's own Debian
# release.  Run as root.
#
#   scripts/chroot.sh suite MAJOR        the Debian suite that has MAJOR
#   scripts/chroot.sh create MAJOR DIR   make the chroot (a few minutes; for
#                                        13, with an isolation tester built
#                                        from the release's source package)
#   scripts/chroot.sh run DIR CMD...     run CMD inside, as root, with /proc,
#                                        /dev, /dev/pts and /dev/shm mounted
#                                        for it alone (see in_chroot), and
#                                        the directories of CHROOT_BIND at
#                                        their own paths
#   scripts/chroot.sh remove DIR         delete a chroot (nothing mounted)
#
# The release of each major is in .ci/majors (PostgreSQL 14 and 16 are in
# no Debian release: there is no chroot for them).
set -euo pipefail

MAJORS=${DLOCK_MAJORS:-$(dirname "$0")/../.ci/majors}

# suite_of MAJOR: its Debian release, from the table of majors
suite_of() {
    local suite
    suite=$(awk -v m="$1" '!/^[[:space:]]*(#|$)/ && $1 == m { print $2 }' "$MAJORS")
    [ -n "$suite" ] || { echo "$MAJORS lists no PostgreSQL $1" >&2; return 1; }
    echo "$suite"
}

# packages MAJOR: the server and headers, the package build's tools, and
# what the TAP tests start (pg_cron, the Prometheus exporter, pgbouncer,
# libfaketime)
packages() {
    local m=$1 list
    list="postgresql-$m,postgresql-server-dev-$m,postgresql-server-dev-all,libpq-dev"
    list="$list,build-essential,debhelper,ca-certificates"
    list="$list,libipc-run-perl,libfaketime,postgresql-$m-cron"
    list="$list,prometheus-postgres-exporter,pgbouncer"
    echo "$list"
}

# mounted DIR: the mount points under DIR, deepest first
mounted() {
    local dir
    dir=$(realpath "$1")
    awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r
}

unmount_all() {
    local m
    for m in $(mounted "$1"); do umount "$m" || umount -l "$m"; done
}

# in_chroot DIR CMD...: run CMD in the chroot with /proc, /dev, /dev/pts
# and a /dev/shm of its own mounted in a mount namespace of its own.  The
# mounts are seen by CMD and its children alone, and go with the last of
# them: nothing to unmount, however it ends; two runs in one chroot at once
# do not unmount each other's; and a process left running cannot keep a
# mount under DIR that remove would delete through.  CHROOT_BIND: absolute
# paths of this machine's directories to mount at the same path inside
# (a server started inside keeps them while it runs; the empty mount
# points stay, for the caller to remove)
in_chroot() {
    local dir=$1
    shift
    unshare --mount --propagation private -- sh -c '
        dir=$1
        shift
        mount -t proc proc "$dir/proc" &&
            mount --bind /dev "$dir/dev" &&
            mount --bind /dev/pts "$dir/dev/pts" &&
            mount -t tmpfs -o mode=1777 shm "$dir/dev/shm" || exit 1
        for d in ${CHROOT_BIND:-}; do
            case $d in /?*) ;; *) echo "CHROOT_BIND: $d is not an absolute path" >&2; exit 1 ;; esac
            mkdir -p "$dir$d" && mount --bind "$d" "$dir$d" || exit 1
        done
        exec chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
            HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"' sh "$dir" "$@"
}

# Debian's packages of PostgreSQL 13 have no isolation tester (later ones
# ship it with the headers): build pg_isolation_regress and isolationtester
# from that release's source package of the server, and put them where
# PGXS looks for them
build_isolation_tester() {
    local major=$1 suite=$2
    cat <<SCRIPT
set -e
pgxs=\$(dirname "\$(/usr/lib/postgresql/$major/bin/pg_config --pgxs)")/../..
[ ! -x "\$pgxs/src/test/isolation/pg_isolation_regress" ] || exit 0
echo "deb-src http://deb.debian.org/debian $suite main" >/etc/apt/sources.list.d/dlock-src.list
apt-get update -qq
mkdir /tmp/pgsrc
cd /tmp/pgsrc
apt-get source -qq --download-only postgresql-$major >/dev/null
dpkg-source -x postgresql-${major}_*.dsc src >/dev/null 2>&1
cd src
./configure --quiet --without-readline --without-zlib --without-icu --without-llvm >/dev/null 2>&1
make -s -j2 -C src/test/isolation >/dev/null
mkdir -p "\$pgxs/src/test/isolation"
install -m 755 src/test/isolation/pg_isolation_regress src/test/isolation/isolationtester \
    "\$pgxs/src/test/isolation/"
cd /
rm -rf /tmp/pgsrc /etc/apt/sources.list.d/dlock-src.list
SCRIPT
}

cmd=${1:-}
shift || true
case $cmd in
    suite)
        suite_of "$1"
        ;;
    create)
        major=$1 dir=$2
        suite=$(suite_of "$major")
        opts=()
        # sid's Release file may be past its Valid-Until date in the archive
        [ "$suite" != sid ] || opts+=(--aptopt='Acquire::Check-Valid-Until "false"')
        # Installing the server package must not start a cluster in the chroot
        mmdebstrap --variant=apt --include="$(packages "$major")" \
            --customize-hook='echo "exit 101" > "$1/usr/sbin/policy-rc.d"; chmod 755 "$1/usr/sbin/policy-rc.d"' \
            "${opts[@]}" "$suite" "$dir" http://deb.debian.org/debian
        in_chroot "$dir" sh -c "$(build_isolation_tester "$major" "$suite")"
        ;;
    run)
        dir=$1
        shift
        in_chroot "$dir" "$@"
        ;;
    remove)
        dir=$1
        [ -d "$dir" ] || exit 0
        unmount_all "$dir"
        [ -z "$(mounted "$dir")" ] || { echo "still mounted under $dir" >&2; exit 1; }
        rm -rf --one-file-system "$dir"
        ;;
    *)
        sed -n '2,19s/^# \{0,1\}//p' "$0" >&2
        exit 2
        ;;
esac
