# shellcheck shell=bash
# The one place where results are counted: sourced (by scripts/common.sh,
# .ci/run and the scripts that count their own checks), not run.
#
# Every step of a test run answers in one of three ways, and tap_count
# reads any of them:
#
#   - result lines in its output, one a test: TAP ("ok N - name", "not ok
#     N - name", as prove -v and pg_regress from PostgreSQL 16 on print
#     them) or pg_regress up to 15 ("test name ... ok", "... FAILED");
#   - a last line "N passed, N failed": a script that counted its own
#     results with tap_count (the figures are taken as they are, rather
#     than its result lines counted again, because what it shows of a
#     failure may repeat result lines of the command that failed);
#   - neither: its exit status is its one result.
#
# Whatever the output says, a non-zero exit status with no failure counted
# is one failure, so that a step that broke before it could say so is not
# taken for a pass; so is the lack of a last line "N passed, N failed"
# from a script that prints one when it ends (tap_count's "summary").
#
# The sums are in passed and failed, which the sourcing script owns.

passed=${passed:-0}
failed=${failed:-0}
# the number of the last result line tap_check or tap_report printed
tap_n=${tap_n:-0}

# tap_results FILE: the result lines of FILE, as tap_count counts them
tap_results() {
    sed -nE '/\.\.\. (ok|FAILED)|^(not )?ok [0-9]+ /p' "$1"
}

# tap_count RC [FILE [summary]]: add the results of one step, which exited
# with RC and printed FILE (none: it printed nothing that counts), to passed
# and failed; with "summary", the step is a script that ends with "N
# passed, N failed", and it failed if it did not get there
tap_count() {
    local rc=$1 file=${2:-/dev/null} p f how
    # pg_regress "... ok" / "... FAILED"; TAP "ok N " / "not ok N " (a
    # line counts once for each pattern it matches, as grep -c would)
    # A script that counts its own results ends with its tally; make may
    # add its own "make: *** ... Error" lines after a failed one, which
    # do not hide the tally
    read -r p f how < <(awk '
        /\.\.\. ok|^ok [0-9]+ / { ok++ }
        /\.\.\. FAILED|^not ok [0-9]+ / { bad++ }
        /^[0-9]+ passed, [0-9]+ failed$/ { tally = $0; after = 0; next }
        NF && !/^make(\[[0-9]+\])?: / { after++ }
        END {
            if (tally != "" && after == 0) {
                split(tally, w, " ")
                print w[1] + 0, w[3] + 0, "summary"
            } else {
                print ok + 0, bad + 0, (ok + bad > 0 ? "lines" : "none")
            }
        }' "$file")
    if [ "${3:-}" = summary ] && [ "$how" != summary ]; then
        echo "# no \"N passed, N failed\" line at the end: it did not finish"
        rc=1
    fi
    if [ "$how" = none ]; then
        # no result line: the exit status is the result
        if [ "$rc" -eq 0 ]; then p=1 f=0; else p=0 f=1; fi
    fi
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$f" -gt 0 ] && [ -n "${TAP_FAILURES:-}" ] && [ "$file" != /dev/null ]; then
        tap_failure_excerpt "$file" >>"$TAP_FAILURES"
    fi
}

# tap_failure_excerpt FILE: what a failed step printed of its failures, for
# a run's closing list (TAP_FAILURES names the file that collects them, when
# the sourcing script keeps one): its failed result lines, each with the
# diagnostics that follow it (up to 40), and the lines of a test file that
# died; failing that, its last lines
tap_failure_excerpt() {
    local file=$1 lines
    echo "--- $(basename "$file")"
    lines=$(awk '
        /^not ok [0-9]+ |\.\.\. FAILED|^FAILED--|Dubious|^# no "N passed|did not finish|^Bail out!/ {
            print; diag = 40; next
        }
        diag > 0 && /^ *#/ { print; diag--; next }
        { diag = 0 }' "$file" | head -n 80)
    if [ -n "$lines" ]; then echo "$lines"; else tail -n 20 "$file"; fi
}

# tap_report ok|fail TITLE: one check whose outcome is known, printed as a
# TAP line and counted
tap_report() {
    tap_n=$((tap_n + 1))
    if [ "$1" = ok ]; then
        echo "ok $tap_n - $2"
        tap_count 0
    else
        echo "not ok $tap_n - $2"
        tap_count 1
        [ -z "${TAP_FAILURES:-}" ] || echo "not ok $tap_n - $2" >>"$TAP_FAILURES"
    fi
}

# tap_check TITLE COMMAND...: one check, COMMAND's exit status its outcome
tap_check() {
    local title=$1
    shift
    if "$@"; then tap_report ok "$title"; else tap_report fail "$title"; fi
}

# tap_summary: the last line, "N passed, N failed"; fails when one did
tap_summary() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
