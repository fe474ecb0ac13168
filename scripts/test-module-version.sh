#!/usr/bin/env bash
# A connection opened before ALTER EXTENSION dlock UPDATE keeps the module
# it loaded (src/module_version.c): with two builds of different versions
# in one cluster, such a connection must refuse to run instead of running
# the old module under the new objects.
#
# Build A is this tree (its version, N); build B is the same code claiming
# the next version, N+1, with an update script N -> N+1 that changes
# nothing.  A throwaway cluster gets A, a connection calls dlock (loading
# A), then B is installed and the database updated to N+1 from another
# connection: the old connection's next call fails with 55000 and both
# versions in its detail, a new connection works, and the old one, once
# reconnected, works too.  A is installed again at the end.
#
# Needs root (it installs into PostgreSQL's tree).  Prints "ok N - ..." per
# check and ends with "N passed, N failed".

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ensure_packages
build_and_install

version=$(sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" "$SRC_DIR/dlock.control")
next="${version%%.*}.$(( ${version#*.} + 1 ))"

# Build B, in a copy of the tree
B=$(make_work_dir)
tar -C "$SRC_DIR" --exclude=.git --exclude='*.o' --exclude='*.bc' --exclude='*.so' \
    --exclude=cli/dlock --exclude=results --exclude=output_iso --exclude=tmp_check -cf - . |
    tar -C "$B" -xf -
sed -i "s/^default_version = .*/default_version = '$next'/" "$B/dlock.control"
perl -0pi -e "s/\"version\": \"\Q$version\E\.(\d+)\"/\"version\": \"$next.\$1\"/g" "$B/META.json"
printf '%s\n' "/* dlock--$version--$next.sql: no change, for the version check's test */" \
    "\\echo Use \"ALTER EXTENSION dlock UPDATE TO '$next'\" to load this file. \\quit" \
    >"$B/dlock--$version--$next.sql"
make -s -C "$B" PG_CONFIG="$PG_CONFIG" PG_CFLAGS="-Wall -Wextra -Werror" >/dev/null

passed=0
failed=0
# check TITLE COMMAND...: one TAP line per check (scripts/tap.sh counts)
check() { tap_check "$@"; }

start_cluster "${MODULE_VERSION_PORT:-54335}"
cleanup() {
    # A again in PostgreSQL's tree, B's extra script gone
    as_root rm -f "$("$PG_CONFIG" --sharedir)/extension/dlock--$version--$next.sql"
    as_root make -s -C "$SRC_DIR" PG_CONFIG="$PG_CONFIG" install >/dev/null
    rm -rf "$B"
    stop_cluster
}
trap cleanup EXIT
PSQL=(as_run_user "$PG_BINDIR/psql" -X -At -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U postgres)
"${PSQL[@]}" -q -c 'CREATE EXTENSION dlock'

# The old connection: a psql whose input stays open, each answer ended by a
# line "--done"; it loads module A with its first call
exec {to_old}> >(as_run_user "$PG_BINDIR/psql" -X -At -h "$PGHOST" -p "$PGPORT" -U postgres \
    >"$WORK/old.out" 2>&1)
ask_old() {
    local before
    before=$(grep -c -- '--done' "$WORK/old.out" 2>/dev/null || true)
    printf '%s\n\\echo --done\n' "$1" >&"$to_old"
    for _ in $(seq 1 200); do
        [ "$(grep -c -- '--done' "$WORK/old.out" 2>/dev/null || true)" -gt "$before" ] && return 0
        sleep 0.05
    done
    return 1
}
ask_old "\\set VERBOSITY verbose
SELECT count(*) FROM dlock.try_acquire('version:old', '1h', 'old');"
check "a connection runs module $version under extension $version" \
    grep -qx 1 "$WORK/old.out"

# Build B installed; the database updated from another connection
as_root make -s -C "$B" PG_CONFIG="$PG_CONFIG" install >/dev/null
"${PSQL[@]}" -q -c "ALTER EXTENSION dlock UPDATE TO '$next'"
check "a new connection runs module $next under extension $next" \
    test "$("${PSQL[@]}" -c "SELECT count(*) FROM dlock.try_acquire('version:new', '1h', 'new')")" = 1

: >"$WORK/old.out"
ask_old "SELECT count(*) FROM dlock.try_acquire('version:old2', '1h', 'old');"
check "the connection opened before the update refuses to run: 55000" \
    grep -q 'ERROR:  55000: dlock.s module in this connection is older than the extension in this database' "$WORK/old.out"
check "its detail names both versions ($version, $next)" \
    grep -q "DETAIL:  The connection runs module version $version; the database's extension is version $next" "$WORK/old.out"
check "its hint says to reconnect" grep -q 'HINT:  Reconnect' "$WORK/old.out"
check "it changed nothing: version:old2 was not granted" \
    test "$("${PSQL[@]}" -c "SELECT count(*) FROM dlock.leases WHERE name = 'version:old2'")" = 0
ask_old "\\connect
SELECT count(*) FROM dlock.try_acquire('version:old3', '1h', 'old');"
check "reconnected, it runs module $next" grep -qx 1 "$WORK/old.out"
exec {to_old}>&-

tap_summary
