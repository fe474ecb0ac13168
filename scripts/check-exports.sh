#!/usr/bin/env bash
# check-exports.sh DLOCK_SO [SQL-SCRIPT...]: dlock.so exports exactly what
# the server looks up in it: the magic block, _PG_init, and each C function
# that the extension's SQL scripts name, with its pg_finfo_ info function.
# A missing one fails CREATE EXTENSION or a call; an extra one is an
# internal function in the backend's namespace (src/dlock_compat.h).
set -euo pipefail
so=$1
shift
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ $# -gt 0 ] || set -- dlock--*.sql

want=$(mktemp) have=$(mktemp)
trap 'rm -f "$want" "$have"' EXIT
{
    echo Pg_magic_func
    echo _PG_init
    # AS 'MODULE_PATHNAME', 'symbol' (every C function names its symbol)
    grep -ohE "'MODULE_PATHNAME' *, *'[A-Za-z0-9_]+'" "$@" |
        sed -E "s/.*, *'([A-Za-z0-9_]+)'/\1/" |
        while read -r f; do echo "$f"; echo "pg_finfo_$f"; done
} | sort -u >"$want"
nm -D --defined-only "$so" | awk '{ print $NF }' | sort -u >"$have"

if grep -qE "'MODULE_PATHNAME' *(\)|;|$)" "$@"; then
    echo "a C function in the SQL scripts does not name its symbol" >&2
    exit 1
fi
missing=$(comm -23 "$want" "$have")
extra=$(comm -13 "$want" "$have")
[ -z "$missing" ] || echo "not exported, but looked up by the server:" $missing
[ -z "$extra" ] || echo "exported, but not an entry point:" $extra
[ -z "$missing$extra" ] && echo "$(wc -l <"$want") symbols exported, all entry points"
