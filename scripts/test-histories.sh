#!/usr/bin/env bash
# make test-histories: the token history explorer (test/t/022_token_explorer.pl)
# at length: DLOCK_HISTORIES random histories (default 60, about six
# minutes), from DLOCK_HISTORY_SEED if given (printed either way), on
# throwaway clusters; ends with a line "N passed, N failed".  make test
# runs a few of them with the rest of the TAP suite.

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ensure_packages
build_and_install

WORK=$(make_work_dir)
trap 'rm -rf "$WORK"' EXIT
copy_source_tree "$WORK/src"

passed=0
failed=0
seed=${DLOCK_HISTORY_SEED:-$((RANDOM * 32768 + RANDOM))}
say "histories from seed $seed"
run_suite histories installcheck REGRESS= ISOLATION= PROVE_FLAGS=-v \
    PROVE_TESTS=test/t/022_token_explorer.pl DLOCK_HISTORY_SEED="$seed" \
    DLOCK_HISTORIES="${DLOCK_HISTORIES:-60}"
tap_summary
