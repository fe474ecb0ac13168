#!/usr/bin/env bash
# make dist: the PGXN archive dlock-VERSION.zip of the committed tree (git
# archive of HEAD) in DIST_DIR (the top of the tree by default), after
# checking META.json: it parses, names dlock, and its version and the
# version it gives the extension are one, whose major.minor is
# dlock.control's default_version (1.1 -> 1.1.N), and the files it names
# exist.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dist_dir=${DIST_DIR:-.}

default_version=$(sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" dlock.control)
[ -n "$default_version" ] || { echo "dlock.control has no default_version" >&2; exit 1; }

version=$(perl -MJSON::PP -e '
    local $/;
    open my $fh, "<", "META.json" or die "META.json: $!\n";
    my $m = JSON::PP->new->decode(<$fh>);
    my ($dv) = @ARGV;
    my @bad;
    push @bad, "name is not dlock" unless ($m->{name} // "") eq "dlock";
    my $v = $m->{version} // "";
    my $p = $m->{provides}{dlock} // {};
    push @bad, "provides.dlock.version ($p->{version}) is not version ($v)"
        unless ($p->{version} // "") eq $v;
    push @bad, "version $v is not $dv.N (dlock.control default_version $dv)"
        unless $v =~ /^\Q$dv\E\.[0-9]+$/;
    for my $f (grep { defined } $p->{file}, $p->{docfile}) {
        push @bad, "$f, named by META.json, does not exist" unless -e $f;
    }
    push @bad, "no meta-spec version" unless $m->{"meta-spec"}{version};
    die map { "META.json: $_\n" } @bad if @bad;
    print $v;
' "$default_version")

git rev-parse --git-dir >/dev/null 2>&1 || { echo "make dist archives the committed tree: no git repository here" >&2; exit 1; }
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
    echo "note: uncommitted changes are not in the archive (git archive HEAD)" >&2
archive=$dist_dir/dlock-$version.zip
git archive --format=zip --prefix="dlock-$version/" -o "$archive" HEAD
echo "$archive: dlock $version (dlock.control $default_version)"
