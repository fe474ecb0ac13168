#!/usr/bin/env bash
# Stress check: a Jepsen-style lock-guarded set on a throwaway cluster (see
# the header of stress/checker.c for what is checked and why).
#
#   bash stress/run.sh                    # 25 s fenced run + 10 s control run
#   bash stress/run.sh --soak             # 300 s fenced run + 10 s control run
#   bash stress/run.sh --workers 16 --seconds 60 --seed 7
#
# Options go to the checker for both runs; the control run then adds
# --no-fence --seconds $CONTROL_SECONDS (default 10), which override them.
# The fenced run must pass: no acknowledged element lost, tokens in commit
# order strictly increasing.  The control run, the same schedule without
# dlock.fence(), must detect lost elements or tokens out of order; if it does
# not, the checker cannot tell a broken lock from a working one, and this
# script fails as well.

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

CONTROL_SECONDS=${CONTROL_SECONDS:-10}
for arg in "$@"; do
    case $arg in
        --no-fence)
            echo "run.sh runs the control itself; run the checker directly for a single --no-fence run" >&2
            exit 2 ;;
        -h|--help)
            sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0 ;;
    esac
done

ensure_packages
build_and_install

say "starting a throwaway cluster (unix socket only)"
start_cluster 54331
BIN=$WORK/bin
mkdir -p "$BIN"
cc -std=c99 -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" -o "$BIN/checker" \
    "$SRC_DIR/stress/checker.c" -L"$("$PG_CONFIG" --libdir)" -lpq
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$BIN"

run() { as_run_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres PGDATABASE=postgres "$@"; }

say "fenced run"
fenced_rc=0
run "$BIN/checker" "$@" || fenced_rc=$?

echo
say "control run without dlock.fence() (must detect lost writes)"
control_rc=0
run "$BIN/checker" "$@" --no-fence --seconds "$CONTROL_SECONDS" || control_rc=$?

echo
if [ "$fenced_rc" -eq 0 ] && [ "$control_rc" -eq 0 ]; then
    echo "stress: PASS (fenced run kept every acknowledged write in token order; control run caught the unfenced anomalies) in ${SECONDS}s"
    exit 0
fi
reasons=()
[ "$fenced_rc" -eq 0 ] || reasons+=("fenced run failed")
[ "$control_rc" -eq 0 ] || reasons+=("control run did not detect the unfenced anomalies")
echo "stress: FAIL ($(IFS=';'; echo "${reasons[*]}" | sed 's/;/; /g')) in ${SECONDS}s"
exit 1
