#!/usr/bin/env bash
# Stress check: a Jepsen-style lock-guarded set on a throwaway cluster, then
# the same schedule on the permits of a counting semaphore, then every kind
# of lease on the same names at once (see the headers of stress/checker.c
# and stress/kinds.c for what is checked and why).
#
#   bash stress/run.sh          # set: 25 s fenced + 10 s control runs;
#                               # semaphore: 15 s fenced + 8 s control runs;
#                               # kinds: 30 s fenced + 8 s control runs
#   bash stress/run.sh --soak   # the fenced runs 300 s, controls as above
#   bash stress/run.sh --workers 16 --seconds 60 --seed 7
#   STRESS_ONLY=kinds bash stress/run.sh    # one mode: set, semaphore or kinds
#
# Options go to the checker for all the runs.  The semaphore runs add
# --permits $PERMITS (default 3; a --workers given must be more) and take
# --seconds $SEMAPHORE_SECONDS (default 15) unless the options give a
# length; the control runs add --no-fence --seconds $CONTROL_SECONDS
# (default 10) or $SEMAPHORE_CONTROL_SECONDS (default 8), which override
# the options.  The kinds runs add --kinds and take --seconds
# $KINDS_SECONDS (default 30) unless the options give a length, and
# --workers from the options only (the mode's default is its own); its
# control adds --no-fence --seconds $KINDS_CONTROL_SECONDS (default 8).
# The fenced runs must pass: no acknowledged element lost, tokens in commit
# order strictly increasing, and never more than $PERMITS fenced writers at
# once.  The control runs, the same schedules without dlock.fence(), must
# detect lost elements, tokens out of order or too many writers (the kinds
# control: holders of conflicting kinds inside at once); if one does not,
# the checker cannot tell a broken lock from a working one, and this script
# fails as well.  The kinds fenced run must see no conflicting holders
# inside at once, nothing of the kind in dlock.leases, no lease lost before
# its expiry, no XX000 or other error, and enough of each kind to count.

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

CONTROL_SECONDS=${CONTROL_SECONDS:-10}
PERMITS=${PERMITS:-3}
SEMAPHORE_SECONDS=${SEMAPHORE_SECONDS:-15}
SEMAPHORE_CONTROL_SECONDS=${SEMAPHORE_CONTROL_SECONDS:-8}
KINDS_SECONDS=${KINDS_SECONDS:-30}
KINDS_CONTROL_SECONDS=${KINDS_CONTROL_SECONDS:-8}
STRESS_ONLY=${STRESS_ONLY:-}
case $STRESS_ONLY in
    ''|set|semaphore|kinds) ;;
    *) echo "STRESS_ONLY must be set, semaphore or kinds, not \"$STRESS_ONLY\"" >&2; exit 2 ;;
esac
for arg in "$@"; do
    case $arg in
        --no-fence)
            echo "run.sh runs the control itself; run the checker directly for a single --no-fence run" >&2
            exit 2 ;;
        --permits)
            echo "run.sh runs the semaphore mode itself (PERMITS=N sets its permits); run the checker directly for a single --permits run" >&2
            exit 2 ;;
        --kinds)
            echo "run.sh runs the kinds mode itself (STRESS_ONLY=kinds runs it alone); run the checker directly for a single --kinds run" >&2
            exit 2 ;;
        -h|--help)
            sed -n '2,33p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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
    "$SRC_DIR/stress/checker.c" "$SRC_DIR/stress/kinds.c" "$SRC_DIR/test/lib/dlock_client.c" \
    -L"$("$PG_CONFIG" --libdir)" -lpq
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$BIN"

run() { as_run_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER=postgres PGDATABASE=postgres "$@"; }

wanted() { [ -z "$STRESS_ONLY" ] || [ "$STRESS_ONLY" = "$1" ]; }
reasons=()

if wanted set; then
    say "fenced run"
    fenced_rc=0
    run "$BIN/checker" "$@" || fenced_rc=$?

    echo
    say "control run without dlock.fence() (must detect lost writes)"
    control_rc=0
    run "$BIN/checker" "$@" --no-fence --seconds "$CONTROL_SECONDS" || control_rc=$?
    [ "$fenced_rc" -eq 0 ] || reasons+=("fenced run failed")
    [ "$control_rc" -eq 0 ] || reasons+=("control run did not detect the unfenced anomalies")
    echo
fi

# The options come after the default length, so that --seconds or --soak
# given to this script lengthen the semaphore's fenced run too
if wanted semaphore; then
    say "semaphore run: $PERMITS permits, fenced"
    sem_fenced_rc=0
    run "$BIN/checker" --seconds "$SEMAPHORE_SECONDS" "$@" --permits "$PERMITS" ||
        sem_fenced_rc=$?

    echo
    say "semaphore control run without dlock.fence() (must detect more than $PERMITS writers)"
    sem_control_rc=0
    run "$BIN/checker" "$@" --permits "$PERMITS" --no-fence \
        --seconds "$SEMAPHORE_CONTROL_SECONDS" || sem_control_rc=$?

    echo
    if [ "$sem_fenced_rc" -eq 0 ] && [ "$sem_control_rc" -eq 0 ]; then
        echo "semaphore: PASS (at most $PERMITS fenced writers at once, every acknowledged write kept; the control caught more)"
    else
        echo "semaphore: FAIL"
    fi
    [ "$sem_fenced_rc" -eq 0 ] || reasons+=("semaphore fenced run failed")
    [ "$sem_control_rc" -eq 0 ] || reasons+=("semaphore control run did not detect the unfenced anomalies")
    echo
fi

if wanted kinds; then
    say "kinds run: exclusive, shared, permits and sets on the same names, fenced"
    kinds_fenced_rc=0
    run "$BIN/checker" --seconds "$KINDS_SECONDS" "$@" --kinds || kinds_fenced_rc=$?

    echo
    say "kinds control run without dlock.fence() (must see conflicting holders inside at once)"
    kinds_control_rc=0
    run "$BIN/checker" "$@" --kinds --no-fence --seconds "$KINDS_CONTROL_SECONDS" ||
        kinds_control_rc=$?

    echo
    if [ "$kinds_fenced_rc" -eq 0 ] && [ "$kinds_control_rc" -eq 0 ]; then
        echo "kinds: PASS (no conflicting kinds live or inside at once; the control caught them)"
    else
        echo "kinds: FAIL"
    fi
    [ "$kinds_fenced_rc" -eq 0 ] || reasons+=("kinds fenced run failed")
    [ "$kinds_control_rc" -eq 0 ] || reasons+=("kinds control run did not detect conflicting holders")
fi

if [ ${#reasons[@]} -eq 0 ]; then
    echo "stress: PASS (fenced runs kept every acknowledged write in token order, the semaphore's within its permits, and no conflicting kinds at once; control runs caught the unfenced anomalies) in ${SECONDS}s"
    exit 0
fi
echo "stress: FAIL ($(IFS=';'; echo "${reasons[*]}" | sed 's/;/; /g')) in ${SECONDS}s"
exit 1
