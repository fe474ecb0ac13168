# stress/diagnostics.sh: sourced by the scripts that run the stress checker
# and count it as TAP checks (scripts/test.sh, sql-edition/test/ci.sh).
#
# stress_diagnostics FILE: the checker's output in FILE, for a check that
# failed, as TAP diagnostics ("# " lines after its "not ok"): first the
# lines that say why it failed, then its summary.  Why comes first because
# a run's closing list of failures keeps only the first 40 of them.
stress_diagnostics() {
    {
        grep -E 'RESULT: (FAIL|UNDECIDED)|only [0-9]+ .* needed|tested nothing|^worker [0-9]+:|^checker:|^[a-z]+: FAIL' "$1" |
            grep -v 'expected for --no-fence'
        grep -E '^(mode=|attempts=|final_set=|tokens in|kinds: [a-z(]|running again)' "$1"
    } | sed 's/^/# /'
}
