#!/usr/bin/env bash
# make test-sql-edition: the SQL edition (sql-edition/dlock.sql) against
# the project's regression files and isolation specs, on a PostgreSQL
# installation without dlock's files, as on a managed service.  That
# installation is a copy of PG_CONFIG's (PostgreSQL finds its libraries
# and share directory relative to its binaries), with dlock's module,
# control file and scripts left out, so that this works on a machine that
# has the C edition installed.  The suites run as the user that owns the
# clusters (sql-edition/test/ci.sh: as the plain role that installed the
# SQL edition, then as a superuser, then the stress checker of stress/ as a
# role that is no superuser); ends with "N passed, N failed".

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The server and psql, and pg_regress and the isolation tester, which come
# with the headers (PostgreSQL 13's tester: see scripts/chroot.sh); the
# compiler and libpq's headers for the stress checker; not what the C
# edition's TAP tests start
DEBIAN_PACKAGES=("postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" gcc libpq-dev)
ensure_packages

WORK=$(make_work_dir)
trap 'rm -rf "$WORK"' EXIT
bindir=$("$PG_CONFIG" --bindir)
pkglibdir=$("$PG_CONFIG" --pkglibdir)
sharedir=$("$PG_CONFIG" --sharedir)
includedir=$("$PG_CONFIG" --includedir)
root=$WORK/pg
# the tree above the binaries, the libraries, the share and include dirs
for d in "$(dirname "$bindir")" "$pkglibdir" "$sharedir" "$includedir"; do
    mkdir -p "$root$(dirname "$d")"
    [ -e "$root$d" ] || cp -a "$d" "$root$d"
done
rm -f "$root$pkglibdir"/dlock.so "$root$sharedir"/extension/dlock.control \
    "$root$sharedir"/extension/dlock--*.sql
# Debian's pg_config of PostgreSQL 13 prints the paths it was built with
# wherever it is run from (its server and other programs do find theirs
# relative to where they are): there, the copy's pg_config becomes a
# wrapper that prints the copy's paths, so that the tests use the copy
if [ "$("$root$bindir/pg_config" --bindir)" != "$root$bindir" ]; then
    mv "$root$bindir/pg_config" "$root$bindir/pg_config.built"
    {
        echo '#!/bin/sh'
        printf '"%s" "$@" | sed' "$root$bindir/pg_config.built"
        for d in "$(dirname "$bindir")" "$sharedir" "$includedir"; do
            printf " -e 's|^%s|%s|'" "$d" "$root$d"
        done
        echo
    } >"$root$bindir/pg_config"
    chmod 755 "$root$bindir/pg_config"
    [ "$("$root$bindir/pg_config" --pkglibdir)" = "$root$pkglibdir" ] ||
        { echo "$root$bindir/pg_config does not print the copy's paths" >&2; exit 1; }
fi
mkdir "$WORK/src"
tar -C "$SRC_DIR" --exclude=.git --exclude='*.o' --exclude='*.so' -cf - sql-edition test/sql test/expected test/specs test/lib stress Makefile dlock.control |
    tar -C "$WORK/src" -xf -
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$WORK"
as_run_user env PG_CONFIG="$root$bindir/pg_config" TMPDIR="$WORK" \
    bash "$WORK/src/sql-edition/test/ci.sh"
