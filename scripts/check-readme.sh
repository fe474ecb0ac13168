#!/usr/bin/env bash
# make check-readme (and a suite of make test): what the README promises
# about itself.
#
#  1. README.md is at most 40,000 bytes, so that it reads in ten minutes;
#     the reference lives in docs/reference.md.
#  2. Every relative link of README.md and docs/*.md names a file of the
#     tree, and every #anchor of such a link (or within the same file) is a
#     heading of its target, by GitHub's rule for heading anchors.
#  3. The first ```sql block of README.md, pasted as it is into psql on a
#     fresh database of a throwaway cluster, runs without an error and
#     prints "UPDATE 1": the fenced write of Getting started succeeds.
#  4. The package files it names are of the version debian/changelog
#     builds, and its package install lines need no sudo.
#
# Needs dlock installed in PG_CONFIG's tree (make install); make test runs
# this after installing it.  Prints "ok N - ..." or "not ok N - ..." per
# check, then "N passed, N failed"; exits non-zero when one failed.

if [ -z "${PG_BINDIR:-}" ] && [ -n "${PG_CONFIG:-}" ]; then
    PG_BINDIR=$("$PG_CONFIG" --bindir)
fi
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

README=$SRC_DIR/README.md
MAX_BYTES=40000
passed=0
failed=0

# report ok|fail DESCRIPTION: one TAP line per check (scripts/tap.sh counts)
report() { tap_report "$@"; }

# 1. Size
bytes=$(wc -c <"$README")
if [ "$bytes" -le "$MAX_BYTES" ]; then
    report ok "README.md is $bytes bytes, at most $MAX_BYTES"
else
    report fail "README.md is $bytes bytes, more than $MAX_BYTES"
fi

# 2. Links.  Headings' anchors follow GitHub: the text lower-cased, every
# character that is not a letter, digit, space, hyphen or underscore
# removed, spaces made hyphens, and "-1", "-2", ... added to repeats.
# Fenced code blocks are skipped (neither headings nor links there).
link_errors=$(cd "$SRC_DIR" && perl -CSD -e '
    use strict;
    use warnings;
    use File::Basename qw(dirname);
    use File::Spec;
    my %anchors;
    sub lines_outside_code {
        my ($file) = @_;
        open(my $fh, "<:encoding(UTF-8)", $file) or return ();
        my ($in_code, @out) = (0);
        while (my $line = <$fh>) {
            if ($line =~ /^\s*(```|~~~)/) { $in_code = !$in_code; next; }
            push @out, $line unless $in_code;
        }
        return @out;
    }
    sub anchors_of {
        my ($file) = @_;
        return $anchors{$file} if $anchors{$file};
        my (%seen, %set);
        for my $line (lines_outside_code($file)) {
            next unless $line =~ /^#{1,6}\s+(.*?)\s*#*\s*$/;
            my $slug = lc $1;
            $slug =~ s/[^\p{L}\p{N} _-]//g;
            $slug =~ s/ /-/g;
            my $unique = $seen{$slug}++ ? "$slug-" . ($seen{$slug} - 1) : $slug;
            $set{$unique} = 1;
        }
        return $anchors{$file} = \%set;
    }
    my $bad = 0;
    for my $file (@ARGV) {
        my $lineno = 0;
        for my $line (lines_outside_code($file)) {
            # inline code holds no links
            (my $text = $line) =~ s/`[^`]*`//g;
            while ($text =~ /\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g) {
                my $target = $1;
                next if $target =~ m{^[a-z][a-z0-9+.-]*:}i;   # http:, mailto:, ...
                my ($path, $anchor) = split /#/, $target, 2;
                my $dest = $path eq "" ? $file
                         : File::Spec->canonpath(File::Spec->catfile(dirname($file), $path));
                if (!-e $dest) {
                    print "$file: link to a missing file: $target\n";
                    $bad++;
                    next;
                }
                next unless defined $anchor && $dest =~ /\.md$/;
                unless (anchors_of($dest)->{$anchor}) {
                    print "$file: no heading for the anchor: $target\n";
                    $bad++;
                }
            }
        }
    }
    exit($bad ? 1 : 0);
' README.md docs/*.md) && links_ok=yes || links_ok=no
if [ "$links_ok" = yes ]; then
    report ok "every relative link and anchor of README.md and docs/*.md resolves"
else
    printf '%s\n' "$link_errors"
    report fail "relative links or anchors that do not resolve: $(printf '%s\n' "$link_errors" | wc -l)"
fi

# 3. The first SQL block, on a fresh database of a throwaway cluster
if [ ! -f "$("$PG_BINDIR/pg_config" --sharedir)/extension/dlock.control" ]; then
    echo "dlock is not installed in $PG_BINDIR/../ (make install first)"
    report fail "the first sql block of README.md prints UPDATE 1"
else
    block=$(awk '/^```sql[[:space:]]*$/ { if (!done) { inside = 1; next } }
                 inside && /^```/ { inside = 0; done = 1 }
                 inside { print }' "$README")
    start_cluster "${CHECK_README_PORT:-54334}"
    as_run_user "$PG_BINDIR/createdb" -h "$PGHOST" -p "$PGPORT" -U postgres readme_check
    set +e
    out=$(printf '%s\n' "$block" |
        as_run_user "$PG_BINDIR/psql" -X -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" \
            -U postgres -d readme_check -f - 2>&1)
    rc=$?
    set -e
    if [ -z "$block" ]; then
        report fail "README.md has no \`\`\`sql block"
    elif [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -qx 'UPDATE 1'; then
        report ok "the first sql block of README.md runs in psql on a fresh database and prints UPDATE 1"
    else
        printf '%s\n' "$out" | sed 's/^/    /' | tail -n 30
        report fail "the first sql block of README.md (psql exit status $rc) does not print UPDATE 1"
    fi
fi

# 4. Every package file the README names is of the version that
# debian/changelog builds, and no install line needs sudo: a reader
# pastes them as root on a fresh machine
pkg_version=$(sed -nE '1s/^dlock \(([^)]+)\).*/\1/p' "$SRC_DIR/debian/changelog")
stale=$(grep -oE 'dlock_[0-9]+\.[0-9]+\.[0-9]+-[0-9]+' "$README" | sort -u | grep -vxF "dlock_$pkg_version" || true)
if [ -z "$stale" ]; then
    report ok "every package file README.md names is of version $pkg_version (debian/changelog)"
else
    report fail "README.md names package files of another version than $pkg_version: $(echo $stale)"
fi
sudo_lines=$(awk '/^### From the Debian packages/,/^### From source/' "$README" | grep -n 'sudo ' || true)
if [ -z "$sudo_lines" ]; then
    report ok "README.md's package install lines run as root, without sudo"
else
    report fail "README.md's package install lines use sudo: $sudo_lines"
fi

tap_summary
