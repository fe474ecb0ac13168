# Checks a kept segment of test/faults again: the history files and the
# rows.txt of one segment's directory (perl -Itest/faults
# test/faults/check.pl DIR).  Synchronous mode's verdicts; the figures.
use strict;
use warnings;

use FaultHistory;

my $dir = shift or die "usage: check.pl SEGMENT-DIR\n";
open my $fh, '<', "$dir/rows.txt" or die "$dir/rows.txt: $!";
my @rows = map { chomp; [ split /\|/ ] } grep { /\|/ } <$fh>;
my $ops = FaultHistory::read_ops($dir);
my $r = FaultHistory::check(ops => $ops, rows => \@rows, runs => FaultHistory::runs($ops));
printf "%d operations, %d acknowledged, %d lost, %d phantom, %d stale, %d out of order, %d refused, "
  . "%d unknown, two primaries %.1f s, %d epoch pairs with tokens out of order\n",
  @$r{qw(operations acknowledged lost phantom stale order refused unknown two_primaries token_order)};
print "lost: $_->{elem} $_->{name} $_->{token} $_->{node}\n" for @{ $r->{lost_list} };
print "stale: $_->{write}{elem} under $_->{write}{token}, superseded by $_->{grant}{token}\n" for @{ $r->{stale_list} };
print "order: $_\n" for @{ $r->{order_list} };
print "tokens: $_\n" for @{ $r->{token_order_list} };
printf "dlock run %s: child stopped %.3f, name granted again %s\n", $_->{proc}, $_->{stop} // 0,
  defined $_->{gap} ? sprintf('%.3f s later', $_->{gap}) : 'never' for @{ $r->{gaps} };
exit($r->{lost} || $r->{phantom} || $r->{stale} || $r->{order} ? 1 : 0);
