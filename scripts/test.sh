#!/usr/bin/env bash
# make test: the whole suite (the README's checks, pg_regress, isolation,
# TAP, the stress checker, the drivers' recipes) on throwaway clusters,
# ending with a line "N passed, N failed".
# The benchmarks' smoke runs are not part of it (they install Redis and
# gnuplot): .ci/run runs them after it.
#
# The source tree is copied to a temporary directory owned by the user that
# runs the clusters; pg_regress and pg_isolation_regress each start a private
# instance there (--temp-instance, unix socket only), and every TAP test
# starts its own.  Nothing is left running.

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ensure_packages
build_and_install

WORK=$(make_work_dir)
trap 'rm -rf "$WORK"' EXIT
copy_source_tree "$WORK/src"

passed=0
failed=0

# The README: at most 40,000 bytes, its links and those of docs/*.md
# resolve, its first SQL block prints UPDATE 1 on a fresh database
run_suite readme check-readme
# Each starts a private instance in the copy (TEMP_INSTANCE in the Makefile)
run_suite regress installcheck ISOLATION= TAP_TESTS=
run_suite isolation installcheck REGRESS= TAP_TESTS=
# Again with dlock preloaded: waiting.c then counts waiting sessions in
# shared memory and skips looking for waiters while there are none
run_suite isolation-preloaded installcheck REGRESS= TAP_TESTS= PRELOADED=1
# The test build (pause points, src/test_hooks.h): every spec, its own
# included, against a module built with DLOCK_TEST_HOOKS=1; then the normal
# build is installed again for the rest
say "building the test build"
as_run_user make -s -C "$WORK/src" PG_CONFIG="$PG_CONFIG" DLOCK_TEST_HOOKS=1 \
    PG_CFLAGS="-Wall -Wextra -Werror" >/dev/null
as_root make -s -C "$WORK/src" PG_CONFIG="$PG_CONFIG" DLOCK_TEST_HOOKS=1 install >/dev/null
run_suite isolation-test-build installcheck REGRESS= TAP_TESTS= DLOCK_TEST_HOOKS=1
as_run_user make -s -C "$WORK/src" PG_CONFIG="$PG_CONFIG" clean >/dev/null
build_and_install
# The clean took the copy's dlock command with it, which the TAP tests of
# the command run (test/t/007, 018, 024 skip without it): built again there
as_run_user make -s -C "$WORK/src" PG_CONFIG="$PG_CONFIG" cli/dlock >/dev/null
run_suite tap installcheck REGRESS= ISOLATION= PROVE_FLAGS=-v

# run_check TITLE SUMMARY-REGEX COMMAND...: the stress checker's runs,
# counted as one test by their exit status; a failure is followed by why,
# as TAP diagnostics, which a run's list of failures keeps
. "$SRC_DIR/stress/diagnostics.sh"
run_check() {
    local title=$1 summary=$2 out="$WORK/check.out"
    shift 2
    say "$title"
    if "$@" >"$out" 2>&1; then
        grep -E "$summary" "$out" || true
        tap_report ok "$title"
    else
        tail -n 40 "$out"
        tap_report fail "$title"
        stress_diagnostics "$out"
    fi
}

# The lock-guarded set, the permits of a counting semaphore, then every
# kind of lease on the same names: short fenced runs (no acknowledged write
# lost, never more fenced writers than permits, no conflicting kinds at
# once) and control runs without the fence (which must break them)
run_check "stress checker, fenced and control runs" \
    '^(mode=|attempts=|final_set=|tokens in|kinds: \((a|b|c|d)\)|kinds: errors|kinds: only|running again|RESULT|worker [0-9]+:|checker:)' \
    bash "$SRC_DIR/stress/run.sh"

# run_counted TITLE COMMAND...: a script that prints its own "N passed, N
# failed" last; those counts are added to the sums (tap_count)
run_counted() {
    local title=$1 out="$WORK/counted.out" rc
    shift
    say "$title"
    set +e
    "$@" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    set -e
    tap_count "$rc" "$out" summary
}

# The Prometheus alerting rules: promtool's checks and unit tests
run_counted "Prometheus alerting rules" bash "$SRC_DIR/scripts/check-alerts.sh"

# A connection opened before ALTER EXTENSION dlock UPDATE refuses to run
# the old module: two builds of different versions in one cluster
run_counted "the module's version against the extension's" \
    bash "$SRC_DIR/scripts/test-module-version.sh"

# The SQL edition (sql-edition/dlock.sql) against the same regression
# files and isolation specs and the stress checker, on a copy of the
# installation without dlock's files, as on a managed service
run_counted "the SQL edition" bash "$SRC_DIR/scripts/test-sql-edition.sh"

# The recipes of docs/drivers/ with real drivers, directly and through
# pgbouncer: its own "N passed, N failed" line is added to the sums
run_counted "drivers" bash "$SRC_DIR/test/drivers/run.sh"
# The same recipes against the SQL edition, installed by the database's
# owner on a server without the C edition's files
run_counted "drivers, SQL edition" env DLOCK_EDITION=sql bash "$SRC_DIR/test/drivers/run.sh"

tap_summary
