# Checks a kept segment of test/faults again: the history files (the
# clients', dlock run's, the nemeses'), rows.txt (the tables at the end) and
# mode (sync or async) of one segment's directory:
#
#   perl -Itest/faults test/faults/check.pl DIR
#
# Prints the figures, the nemeses with the figures of each step, every
# dlock run that lost its lease with its gaps, and the verdicts that failed;
# exits 1 when one did.  The verdicts are faults.pl's: in synchronous mode
# no acknowledged element lost, no write under a superseded token, each
# name's writes in token order; in both modes no element present whose
# write failed, the table's rows of each name in token order, and every
# dlock run that lost its lease stopped its child before the expiry of its
# last renew on the server (but for runs that lived through a clock fault
# or a pause of dlock run, which are figures).
use strict;
use warnings;

use FaultHistory;

my $dir = shift or die "usage: check.pl SEGMENT-DIR\n";
open my $fh, '<', "$dir/rows.txt" or die "$dir/rows.txt: $!";
my @rows = map { chomp; [ split /\|/ ] } grep { /\|/ } <$fh>;
close $fh;
my $mode = 'sync';
if (open my $mh, '<', "$dir/mode") { chomp($mode = <$mh> // 'sync') }
my $ops = FaultHistory::read_ops($dir);
my @lost_runs = grep { defined $_->{lost} } @{ FaultHistory::runs($ops) };
my ($first) = FaultHistory::nemeses($ops);
my $r = FaultHistory::check(ops => $ops, rows => \@rows, runs => \@lost_runs,
	fault_at => $first ? $first->{from} : undef);

printf "%s mode: %d operations, %d acknowledged, %d lost, %d phantom, %d stale, %d out of order, %d refused, "
  . "%d unknown, failover %s, two primaries %.1f s, %d epoch pairs with tokens out of order\n", $mode,
  @$r{qw(operations acknowledged lost phantom stale order refused unknown)},
  defined $r->{failover} ? sprintf('%.1f s', $r->{failover}) : '-', @$r{qw(two_primaries token_order)};
my $k = 0;
for my $st (@{ FaultHistory::per_step($ops, $r) })
{
	printf "step %d: %s: %d operations, %d acknowledged, %d lost, %d stale, %d refused, %d unknown, failover %s\n",
	  ++$k, join('+', @{ $st->{names} }), @$st{qw(operations acknowledged lost stale refused unknown)},
	  defined $st->{failover} ? sprintf('%.1f s', $st->{failover}) : '-';
}
print "lost: $_->{elem} $_->{name} $_->{token} $_->{node}\n" for @{ $r->{lost_list} };
print "phantom: $_->{elem} $_->{name} $_->{token}\n" for @{ $r->{phantom_list} };
print "stale: $_->{write}{elem} under $_->{write}{token}, superseded by $_->{grant}{token}\n" for @{ $r->{stale_list} };
print "order: $_\n" for @{ $r->{order_list} };
print "tokens: $_\n" for @{ $r->{token_order_list} };
for my $g (@{ $r->{gaps} })
{
	printf "dlock run %s (token %s, %d renews) lost its lease: child stopped %.3f, %s before the expiry of its last renew%s; "
	  . "name granted again %s\n", $g->{proc}, $g->{token}, $g->{renews}, $g->{stop},
	  defined $g->{expiry_gap} ? sprintf('%.3f s', $g->{expiry_gap}) : '?',
	  $g->{outside} ? " (during $g->{outside}: a figure)" : '',
	  defined $g->{gap} ? sprintf('%.3f s later', $g->{gap}) : 'never';
}

my @failed;
push @failed, 'phantom' if $r->{phantom};
push @failed, 'table order' if grep { /^\S+: \d+ after/ } @{ $r->{order_list} };
push @failed, 'expiry gap' if grep { defined $_->{expiry_gap} && !$_->{outside} && $_->{expiry_gap} < 0 } @{ $r->{gaps} };
if ($mode eq 'sync')
{
	push @failed, 'lost' if $r->{lost};
	push @failed, 'stale' if $r->{stale};
	push @failed, 'order' if $r->{order};
}
print @failed ? 'failed: ' . join(', ', @failed) . "\n" : "every verdict holds\n";
exit(@failed ? 1 : 0);
