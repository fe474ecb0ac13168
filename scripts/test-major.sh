#!/usr/bin/env bash
# test-major.sh: build and test dlock against one PostgreSQL major, the one
# PG_MAJOR names (15 by default), whose server and headers are installed
# (.ci/run runs it inside a chroot of that major's Debian release, see
# scripts/chroot.sh; the packages it needs are in that chroot).  Ends with
# "N passed, N failed".
#
#   - builds with -Wall -Wextra -Werror, installs, and checks that dlock.so
#     exports only its entry points (scripts/check-exports.sh)
#   - the regression suite and the isolation suite, each on an instance
#     without and with dlock in shared_preload_libraries (PRELOADED=1)
#   - the test build (DLOCK_TEST_HOOKS=1): the isolation suite with the
#     specs that drive its pause points, without and with dlock preloaded
#   - the SQL edition (sql-edition/dlock.sql): the regression files and
#     the isolation specs against it, on a copy of the major's installation
#     without dlock's files (scripts/test-sql-edition.sh)
#   - the TAP suite (the upgrade walk test/t/009_upgrade.pl among them) when
#     the major ships PostgreSQL::Test::Cluster (Debian's 13 does too, since
#     its minor release 13.13); DLOCK_TAP_TESTS narrows it to some files,
#     DLOCK_TAP_SKIP leaves some out (and says so)
#   - tap-editions: the TAP files of the dlock command and of the SQL
#     edition alone (test/t/007_cli.pl and test/t/*edition*.pl), for a
#     major on which CI runs no whole TAP suite
#
#   - the assert lane (assert): a build with -DUSE_ASSERT_CHECKING, whose
#     Asserts run (the conflict rule's table among them, at load), and the
#     regression and isolation suites against it
#
# DLOCK_SUITES names the suites to run; by default regress
# regress-preloaded isolation isolation-preloaded isolation-test-build
# isolation-test-build-preloaded sql-edition tap (not tap-editions, whose
# files tap runs too, nor assert).  The build, its
# warnings, its exports and its layers (scripts/check-layers.sh) are
# checked whatever it names.  The same names are in the suites column of
# .ci/majors, where .ci/run finds which of them to run on each major
# (`scripts/test-major.sh --suites` lists them).
#
# Every instance is private (pg_regress --temp-instance, or a TAP node) and
# is stopped by whoever started it.  Run as root or as the user that owns
# the clusters.

KNOWN_SUITES="regress regress-preloaded isolation isolation-preloaded isolation-test-build"
KNOWN_SUITES="$KNOWN_SUITES isolation-test-build-preloaded sql-edition tap tap-editions assert"
if [ "${1:-}" = --suites ]; then
    echo "$KNOWN_SUITES"
    exit 0
fi

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# what it needs, when missing (CI runs it on the host before make test, and
# in chroots that have them all)
ensure_packages

SUITES=" ${DLOCK_SUITES:-${KNOWN_SUITES% tap-editions assert}} "
for suite in $SUITES; do
    [[ " $KNOWN_SUITES " == *" $suite "* ]] ||
        { echo "DLOCK_SUITES: no suite \"$suite\"" >&2; exit 2; }
done

WORK=$(make_work_dir)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0

# build MAKE-ARGS...: build with the project's warnings and install
build() {
    as_run_user make -s -C "$WORK/src" PG_CONFIG="$PG_CONFIG" clean >/dev/null
    as_run_user make -s -C "$WORK/src" PG_CONFIG="$PG_CONFIG" \
        PG_CFLAGS="${EXTRA_CFLAGS:-} -Wall -Wextra -Werror" "$@" &&
        as_root make -s -C "$WORK/src" PG_CONFIG="$PG_CONFIG" "$@" install >/dev/null
}

# assert_build: the same with PostgreSQL's Assert()s compiled in
assert_build() { EXTRA_CFLAGS=-DUSE_ASSERT_CHECKING build; }

# run_suite (scripts/common.sh) says which major each suite ran on
SUITE_PREFIX="PostgreSQL $PG_MAJOR: "

mkdir "$WORK/src"
tar -C "$SRC_DIR" --exclude=.git --exclude='*.o' --exclude='*.bc' --exclude='*.so' \
    --exclude=cli/dlock --exclude=results --exclude=output_iso --exclude=tmp_check \
    --exclude=tmp_instance -cf - . | tar -C "$WORK/src" -xf -
[ "$(id -un)" = "$RUN_USER" ] || chown -R "$RUN_USER": "$WORK/src"

say "PostgreSQL $PG_MAJOR: building with -Wall -Wextra -Werror and installing"
tap_check "PostgreSQL $PG_MAJOR: dlock builds without warning and installs" build
[ "$failed" -eq 0 ] || { tap_summary || exit 1; }
tap_check "PostgreSQL $PG_MAJOR: dlock.so exports only its entry points" \
    bash "$WORK/src/scripts/check-exports.sh" "$WORK/src/dlock.so"
# quietly COMMAND...: its output only when it fails
quietly() { local out; out=$("$@" 2>&1) || { printf '%s\n' "$out"; return 1; }; }
tap_check "PostgreSQL $PG_MAJOR: no call of src/ goes up a layer or in a circle (scripts/check-layers.sh)" \
    quietly bash "$WORK/src/scripts/check-layers.sh" "$WORK/src/src"
tap_check "PostgreSQL $PG_MAJOR: the layer check fails on a planted upward call and circle" \
    quietly bash "$WORK/src/scripts/check-layers.sh" --self-test

# wanted SUITE: DLOCK_SUITES names it
wanted() { [[ " $SUITES " == *" $1 "* ]]; }

wanted regress && run_suite regress installcheck ISOLATION= TAP_TESTS=
wanted regress-preloaded && run_suite regress-preloaded installcheck ISOLATION= TAP_TESTS= PRELOADED=1
wanted isolation && run_suite isolation installcheck REGRESS= TAP_TESTS=
wanted isolation-preloaded && run_suite isolation-preloaded installcheck REGRESS= TAP_TESTS= PRELOADED=1

if wanted isolation-test-build || wanted isolation-test-build-preloaded; then
    say "PostgreSQL $PG_MAJOR: the test build (DLOCK_TEST_HOOKS=1)"
    tap_check "PostgreSQL $PG_MAJOR: the test build builds without warning and installs" \
        build DLOCK_TEST_HOOKS=1
    wanted isolation-test-build &&
        run_suite isolation-test-build installcheck REGRESS= TAP_TESTS= DLOCK_TEST_HOOKS=1
    wanted isolation-test-build-preloaded &&
        run_suite isolation-test-build-preloaded installcheck REGRESS= TAP_TESTS= \
            DLOCK_TEST_HOOKS=1 PRELOADED=1
    # what is left installed, and what the TAP suite runs, is the normal build
    tap_check "PostgreSQL $PG_MAJOR: the normal build installs again" build
fi

if wanted assert; then
    say "PostgreSQL $PG_MAJOR: the assert lane (-DUSE_ASSERT_CHECKING)"
    tap_check "PostgreSQL $PG_MAJOR: the assert build builds without warning and installs" \
        assert_build
    run_suite regress-assert installcheck ISOLATION= TAP_TESTS=
    run_suite isolation-assert installcheck REGRESS= TAP_TESTS=
    tap_check "PostgreSQL $PG_MAJOR: the normal build installs again" build
fi

# The SQL edition needs no build: its script runs on a copy of the
# installation that has dlock's files taken out, as a managed service has
# none (what the builds above installed is left as it is)
if wanted sql-edition; then
    say "PostgreSQL $PG_MAJOR: sql-edition"
    out=$WORK/sql-edition.out
    set +e
    env PG_MAJOR="$PG_MAJOR" PG_CONFIG="$PG_CONFIG" bash "$WORK/src/scripts/test-sql-edition.sh" >"$out" 2>&1
    rc=$?
    set -e
    tap_results "$out"
    failed_before=$failed
    tap_count "$rc" "$out" summary
    # a failure: what it said besides its result lines (the diffs among it)
    if [ "$failed" -gt "$failed_before" ]; then
        grep -vE '\.\.\. ok|^ok [0-9]+ ' "$out" | head -n 300 || true
    fi
fi

if wanted tap || wanted tap-editions; then
    if [ -f "$(dirname "$("$PG_CONFIG" --pgxs)")/../test/perl/PostgreSQL/Test/Cluster.pm" ]; then
        tap_args=(PROVE_FLAGS=-v)
        tests=${DLOCK_TAP_TESTS:-}
        if [ -z "$tests" ] && ! wanted tap; then
            tests=$(cd "$WORK/src" && ls test/t/007_cli.pl test/t/*edition*.pl | tr '\n' ' ')
            say "PostgreSQL $PG_MAJOR: tap-editions: $tests"
        fi
        if [ -n "${DLOCK_TAP_SKIP:-}" ]; then
            tests=$(cd "$WORK/src" && ls ${tests:-test/t/*.pl} | grep -vxF -f <(tr ' ' '\n' <<<"$DLOCK_TAP_SKIP") | tr '\n' ' ')
            say "PostgreSQL $PG_MAJOR: TAP files not run here: $DLOCK_TAP_SKIP"
        fi
        [ -z "$tests" ] || tap_args+=("PROVE_TESTS=$tests")
        if wanted tap; then title=tap; else title=tap-editions; fi
        run_suite "$title" installcheck REGRESS= ISOLATION= "${tap_args[@]}"
    else
        say "PostgreSQL $PG_MAJOR ships no PostgreSQL::Test::Cluster: no TAP tests"
    fi
fi

tap_summary
