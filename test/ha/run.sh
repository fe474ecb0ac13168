#!/usr/bin/env bash
# make test-ha: dlock under pg_auto_failover (Debian's
# postgresql-15-auto-failover), a monitor and two data nodes on 127.0.0.1,
# with a graceful switchover and a crash of the primary; see the header of
# test/ha/auto_failover.pl for what is checked.  Then dlock under Patroni
# (test/ha/patroni/run.sh).  Installs what it needs, runs as the
# unprivileged user (pg_autoctl refuses root), leaves nothing running, and
# ends with a line "N passed, N failed" that sums both.  HA_ONLY=patroni or
# HA_ONLY=auto_failover runs one of them.

. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

WORK=$(make_work_dir)
trap 'rm -rf "$WORK"' EXIT
: > "$WORK/ha.log"
failures=0

if [ "${HA_ONLY:-auto_failover}" = auto_failover ]; then
    DEBIAN_PACKAGES+=("postgresql-$PG_MAJOR-auto-failover" libpq-dev)
    ensure_packages
    build_and_install

    cc -std=c99 -O2 -Wall -Wextra -Werror -I"$("$PG_CONFIG" --includedir)" \
        -o "$WORK/ha_workload" "$SRC_DIR/test/ha/ha_workload.c" "$SRC_DIR/test/lib/dlock_client.c" \
        -L"$("$PG_CONFIG" --libdir)" -lpq
    cp "$SRC_DIR/test/ha/auto_failover.pl" "$SRC_DIR/test/perl/DlockHA.pm" "$SRC_DIR/cli/dlock" "$WORK/"
    [ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$WORK"

    say "pg_auto_failover: monitor and two nodes, switchover, crash of the primary"
    set +e
    (cd "$WORK" && as_run_user env TMPDIR="$WORK" PG_BINDIR="$PG_BINDIR" \
        PG_AUTOCTL="$(command -v pg_autoctl)" DLOCK_CLI="$WORK/dlock" HA_WORKLOAD="$WORK/ha_workload" \
        prove -v -I "$WORK" "$WORK/auto_failover.pl") 2>&1 | tee "$WORK/auto_failover.log"
    rc=${PIPESTATUS[0]}
    set -e
    cat "$WORK/auto_failover.log" >> "$WORK/ha.log"
    [ "$rc" -eq 0 ] || grep -qE '^not ok [0-9]+' "$WORK/auto_failover.log" || failures=$((failures + 1))
fi

if [ "${HA_ONLY:-patroni}" = patroni ]; then
    set +e
    bash "$SRC_DIR/test/ha/patroni/run.sh" 2>&1 | tee "$WORK/patroni.log"
    rc=${PIPESTATUS[0]}
    set -e
    cat "$WORK/patroni.log" >> "$WORK/ha.log"
    [ "$rc" -eq 0 ] || grep -qE '^not ok [0-9]+' "$WORK/patroni.log" || failures=$((failures + 1))
fi

passed=$(grep -cE '^ok [0-9]+' "$WORK/ha.log" || true)
failed=$(( $(grep -cE '^not ok [0-9]+' "$WORK/ha.log" || true) + failures ))
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
