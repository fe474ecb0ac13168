#!/usr/bin/env bash
# dlock-on-path.sh DLOCK: say which dlock command a shell finds first on
# PATH, unless DLOCK is the only one there.
#
# make install-cli (and so make install) calls it with the command it has
# just installed, and make demo with the build tree's command, which the demo
# runs.  A dlock that comes earlier on PATH than another one shadows it: a
# copy in /usr/local/bin hides the package's /usr/bin/dlock, and every
# crontab line that says "dlock" runs the first.  This prints, on stderr,
# every dlock on PATH in PATH's order with its version, and which one
# "dlock" runs.  It only reports: its exit status is 0 either way.
set -u
mine=$1

# version FILE: the first line of "FILE --version"; commands before 1.2 have
# no --version
version() {
    local v
    v=$("$1" --version 2>/dev/null | head -n 1)
    case $v in
        "dlock "*) printf '%s\n' "$v" ;;
        *) echo "dlock, a version before 1.2 (no --version)" ;;
    esac
}

# Every dlock on PATH, in PATH's order, each file once (a directory can be
# on PATH twice, or be a link to another)
found=()
IFS=: read -r -a dirs <<<"${PATH:-}"
for dir in "${dirs[@]}"; do
    f=${dir:-.}/dlock
    [ -f "$f" ] && [ -x "$f" ] || continue
    for g in "${found[@]}"; do
        [ "$f" -ef "$g" ] && continue 2
    done
    found+=("$f")
done

# The plain case: the only dlock on PATH is this one
if [ ${#found[@]} -eq 1 ] && [ "${found[0]}" -ef "$mine" ]; then
    exit 0
fi

{
    echo "=================================================================="
    if [ ${#found[@]} -eq 0 ]; then
        echo "NOTE: no dlock is on PATH; run this one as $mine"
    elif [ "${found[0]}" -ef "$mine" ]; then
        echo "NOTE: $mine comes first on PATH:"
        echo "      \"dlock\" runs it, not the other dlock below, which it shadows"
    else
        echo "WARNING: \"dlock\" on PATH runs ${found[0]},"
        echo "         not $mine"
    fi
    for f in "${found[@]}"; do
        mark="  "
        [ "$f" -ef "${found[0]}" ] && mark="->"
        echo "  $mark $f: $(version "$f")"
    done
    echo "=================================================================="
} >&2
exit 0
