# FaultHistory - reads the histories the clients of test/faults record
# (see test/faults/client.c for the line format) and checks them against
# what the database holds at the end.
#
# An operation is an invoke line and the outcome line after it from the
# same process (each process does one thing at a time).  Times are the
# machine's clocks, which every namespace shares; the servers' clocks, which
# the clock nemesis moves, are never used.  NODE of an answer is
# "ADDRESS/TIMELINE": an epoch is one server on one timeline, the time it
# was primary.
#
# check() gives the verdicts and figures of one history:
#  - acknowledged: writes answered ok (one row came back: the fence held);
#  - lost: acknowledged writes whose element is not in the table at the end;
#  - phantom: rows whose write failed for certain (fail, not unknown);
#  - stale: writes acknowledged although a grant of the same name with a
#    larger token had been acknowledged before the write was sent (its
#    token was superseded when it committed);
#  - order: the table's rows of a name, in insertion order (id), do not
#    have growing tokens; or two acknowledged writes of a name, one
#    finished before the other started, have tokens the other way round;
#  - refused: writes the fence refused (0 rows);
#  - unknown: operations with an unknown outcome;
#  - two primaries: the longest time in which two epochs both acknowledged
#    fenced writes (the later one's first write before the earlier one's
#    last), and whether the tokens the earlier epoch granted are all below
#    those of the later one (token_order);
#  - gaps: for each run of "dlock run" that lost its lease, the time from
#    its child's stop to the first grant of its name to the contender
#    (measured from when the contender sent the try_acquire that got it:
#    the grant came after that, so the true gap is at least this); and
#    the time from the child's stop to the expiry the server returned for
#    the run's last successful renew (or its grant), the moment from which
#    the server may grant the name to another owner (expiry_gap).  The
#    stop is on the client's clock, the expiry on the server's: the two
#    compare while no clock fault is on, and the checker says which runs
#    had one (or a pause of dlock run itself, which no client timekeeping
#    survives) during their life.
#
# The nemeses are in the history too (a file nemesis.hist): "invoke" when
# a fault begins, "ok" when it is healed, F the nemesis's name.
# nemeses() gives their windows, per_step() the figures of each step of a
# schedule (from one step's fault to the next step's).

package FaultHistory;

use strict;
use warnings FATAL => 'all';

use List::Util qw(max min sum0);
use Time::Local qw(timegm);

# the nemeses whose windows make a dlock run's expiry gap a figure only
our $OUTSIDE_RUN_CLOCK = qr/^(clock-|pause-client)/;

# read_ops - the operations of every history file under DIR
sub read_ops
{
	my ($dir) = @_;
	my (@ops, %open);
	for my $file (sort glob "$dir/*.hist*")
	{
		open my $fh, '<', $file or die "$file: $!";
		while (my $line = <$fh>)
		{
			chomp $line;
			my ($wall, $mono, $proc, $type, $f, $name, $token, $elem, $node, $detail) = split / /, $line;
			next unless defined $detail;
			my $key = "$file $proc";
			if ($type eq 'invoke' || $type eq 'start')
			{
				my $op = { proc => $proc, f => $f, name => $name, token => $token, elem => $elem,
					node => $node, inv_wall => $wall, inv_mono => $mono, type => 'pending',
					start_detail => $detail };
				$op->{f} = 'start' if $type eq 'start';
				push @ops, $op;
				$open{$key} = $op unless $type eq 'start';
				next;
			}
			my $op = delete $open{$key};
			if (!$op || $op->{f} ne $f)
			{
				# an outcome without an invoke: the child's stop, which may
				# cut a write in flight (that one stays without an answer)
				$op = { proc => $proc, f => $f, name => $name, inv_wall => $wall, inv_mono => $mono };
				push @ops, $op;
			}
			@$op{qw(type end_wall end_mono detail)} = ($type, $wall, $mono, $detail);
			$op->{token} = $token if $token ne '-';
			$op->{node} = $node if $node ne '-';
		}
	}
	# an operation cut by the end of its process never got an answer
	$_->{type} = 'unknown', $_->{end_wall} = 9e9 for grep { $_->{type} eq 'pending' } @ops;
	return \@ops;
}

sub epoch_of { my ($node) = @_; return defined $node && $node =~ m{/} ? $node : undef }

# check - ROWS: [elem, name, token, id] of the table at the end
sub check
{
	my (%a) = @_;
	my $ops = $a{ops};
	my %row = map { $_->[0] => $_ } @{ $a{rows} };
	my @writes = grep { $_->{f} eq 'write' } @$ops;
	my @acked = grep { $_->{type} eq 'ok' } @writes;
	my @grants = sort { $a->{end_wall} <=> $b->{end_wall} }
	  grep { $_->{f} eq 'acquire' && $_->{type} eq 'ok' } @$ops;
	my %r;

	$r{operations} = scalar grep { $_->{f} =~ /^(acquire|write|release)$/ } @$ops;
	$r{acknowledged} = scalar @acked;
	$r{acked_list} = \@acked;
	$r{refused_list} = [ grep { $_->{type} eq 'fail' && ($_->{detail} // '') eq 'fenced' } @writes ];
	$r{refused} = scalar @{ $r{refused_list} };
	$r{unknown_list} = [ grep { $_->{type} eq 'unknown' && $_->{f} =~ /^(acquire|write|release)$/ } @$ops ];
	$r{unknown} = scalar @{ $r{unknown_list} };
	$r{lost_list} = [ grep { !$row{ $_->{elem} } } @acked ];
	$r{lost} = scalar @{ $r{lost_list} };
	$r{phantom_list} = [ grep { $_->{type} eq 'fail' && $row{ $_->{elem} } } @writes ];
	$r{phantom} = scalar @{ $r{phantom_list} };

	# stale: a larger token of the same name was acknowledged before the
	# write was sent.  Per name, the grants in the order they were answered
	# and the largest token so far (with its grant): a write looks up the
	# last grant answered before it was sent.
	my (%grants_of, %max_of);
	push @{ $grants_of{ $_->{name} } }, $_ for @grants;
	for my $name (keys %grants_of)
	{
		my $best;
		$max_of{$name} = [ map { $best = $_ if !$best || $_->{token} > $best->{token}; $best } @{ $grants_of{$name} } ];
	}
	my @stale;
	for my $w (@acked)
	{
		my $g = $grants_of{ $w->{name} } or next;
		my ($lo, $hi) = (0, scalar @$g);    # the first grant answered at or after the write was sent
		while ($lo < $hi)
		{
			my $mid = int(($lo + $hi) / 2);
			if ($g->[$mid]{end_wall} < $w->{inv_wall}) { $lo = $mid + 1 } else { $hi = $mid }
		}
		next unless $lo > 0;
		my $best = $max_of{ $w->{name} }[ $lo - 1 ];
		push @stale, { write => $w, grant => $best } if $best->{token} > $w->{token};
	}
	$r{stale_list} = \@stale;
	$r{stale} = scalar @stale;

	# order in the table, per name
	my (%last, @disorder);
	for my $row (sort { $a->[3] <=> $b->[3] } @{ $a{rows} })
	{
		my ($elem, $name, $token) = @$row;
		push @disorder, "$name: $token after $last{$name}" if defined $last{$name} && $token < $last{$name};
		$last{$name} = $token;
	}
	# order in the history: a write that finished before another started
	my %acked_of;
	push @{ $acked_of{ $_->{name} } }, $_ for sort { $a->{end_wall} <=> $b->{end_wall} } @acked;
	for my $name (keys %acked_of)
	{
		my @w = @{ $acked_of{$name} };
		my $max_before = -1;
		my $j = 0;
		for my $w (sort { $a->{inv_wall} <=> $b->{inv_wall} } @w)
		{
			while ($j < @w && $w[$j]{end_wall} < $w->{inv_wall}) { $max_before = max($max_before, $w[$j]{token}); $j++ }
			push @disorder, "$name: $w->{elem} wrote $w->{token} after an acknowledged $max_before"
			  if $w->{token} < $max_before;
		}
	}
	$r{order_list} = \@disorder;
	$r{order} = scalar @disorder;

	# epochs: first and last acknowledged write, tokens granted
	my %ep;
	for my $w (@acked)
	{
		my $e = epoch_of($w->{node}) or next;
		$ep{$e}{first} = min($ep{$e}{first} // 9e9, $w->{end_wall});
		$ep{$e}{last} = max($ep{$e}{last} // 0, $w->{end_wall});
	}
	for my $g (@grants)
	{
		my $e = epoch_of($g->{node}) or next;
		$ep{$e}{first_grant} = min($ep{$e}{first_grant} // 9e9, $g->{end_wall});
		$ep{$e}{min_token} = min($ep{$e}{min_token} // 9e18, $g->{token});
		$ep{$e}{max_token} = max($ep{$e}{max_token} // 0, $g->{token});
	}
	my @epochs = sort { ($ep{$a}{first_grant} // $ep{$a}{first} // 9e9) <=> ($ep{$b}{first_grant} // $ep{$b}{first} // 9e9) } keys %ep;
	$r{epochs} = [ map { { name => $_, %{ $ep{$_} } } } @epochs ];
	$r{two_primaries} = 0;
	$r{token_order_list} = [];
	for my $i (0 .. $#epochs)
	{
		for my $j ($i + 1 .. $#epochs)
		{
			my ($o, $n) = @ep{ @epochs[ $i, $j ] };
			if (defined $o->{last} && defined $n->{first} && $n->{first} < $o->{last})
			{
				$r{two_primaries} = max($r{two_primaries}, $o->{last} - $n->{first});
			}
			if (defined $o->{max_token} && defined $n->{min_token} && $o->{max_token} >= $n->{min_token})
			{
				push @{ $r{token_order_list} }, "$epochs[$i] granted $o->{max_token}, $epochs[$j] later granted $n->{min_token}";
			}
		}
	}
	$r{token_order} = scalar @{ $r{token_order_list} };

	# the longest time without an acknowledged write
	my @t = sort { $a <=> $b } map { $_->{end_wall} } @acked;
	$r{longest_pause} = @t > 1 ? max(map { $t[$_] - $t[ $_ - 1 ] } 1 .. $#t) : 0;

	# failover: from FAULT_AT to the first write acknowledged by another
	# epoch than the one that had the last write before it
	if (defined $a{fault_at})
	{
		my ($before) = reverse grep { $_->{end_wall} < $a{fault_at} } sort { $a->{end_wall} <=> $b->{end_wall} } @acked;
		my ($after) = grep { $_->{end_wall} > $a{fault_at} && $before && epoch_of($_->{node}) && epoch_of($before->{node})
			  && $_->{node} ne $before->{node} } sort { $a->{end_wall} <=> $b->{end_wall} } @acked;
		$r{failover} = $after ? $after->{end_wall} - $a{fault_at} : undef;
	}

	# dlock run: gap between the child's stop and the next grant of its
	# name, and between the stop and the lease's expiry on the server
	my @windows = nemeses($ops);
	my @gaps;
	for my $run (@{ $a{runs} // [] })
	{
		next unless defined $run->{token} && defined $run->{stop};
		my ($g) = sort { $a->{inv_wall} <=> $b->{inv_wall} }
		  grep { $_->{name} eq $run->{name} && $_->{token} > $run->{token} && $_->{proc} =~ /contend/ } @grants;
		my @outside = map { $_->{name} } grep { $_->{name} =~ $OUTSIDE_RUN_CLOCK
			  && $_->{from} < $run->{stop} && ($_->{to} // 9e9) > ($run->{start} // 0) } @windows;
		push @gaps, { %$run, grant_at => $g ? $g->{inv_wall} : undef, gap => $g ? $g->{inv_wall} - $run->{stop} : undef,
			grant_node => $g ? $g->{node} : undef,
			expiry_gap => defined $run->{expires} ? $run->{expires} - $run->{stop} : undef,
			outside => join(',', @outside) };
	}
	$r{gaps} = \@gaps;
	return \%r;
}

# parse_ts - seconds since the epoch of a timestamptz as PostgreSQL writes
# it, with "T" for the space: 2026-12-03T13:01:02.123456+00 (or +05:30)
sub parse_ts
{
	my ($text) = @_;
	my ($y, $mo, $d, $h, $mi, $s, $frac, $sign, $oh, $om) =
	  ($text // '') =~ /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?([-+])(\d\d)(?::?(\d\d))?$/
	  or return undef;
	my $t = timegm($s, $mi, $h, $d, $mo - 1, $y) + ($frac // 0);
	my $offset = ($oh * 3600 + ($om // 0) * 60) * ($sign eq '-' ? -1 : 1);
	return $t - $offset;
}

# nemeses - the faults in OPS: {name, from, to} (to undef: never healed)
sub nemeses
{
	my ($ops) = @_;
	return sort { $a->{from} <=> $b->{from} }
	  map { { name => $_->{f}, from => $_->{inv_wall}, to => $_->{type} eq 'ok' ? $_->{end_wall} : undef, proc => $_->{proc} } }
	  grep { $_->{proc} =~ /^nemesis\./ } @$ops;
}

# per_step - the figures of each step of a schedule: the nemeses that
# began at the same time make a step, which lasts until the next one
# begins (its fault, the heal and the way back).  R is check()'s answer
# for the whole history.  Each write counts in the step in which it was
# answered; failover is from the step's beginning to the first write
# acknowledged by another epoch than the one of the last write before it.
sub per_step
{
	my ($ops, $r) = @_;
	my (@steps, $cur);
	for my $n (nemeses($ops))
	{
		if ($cur && abs($n->{from} - $cur->{from}) < 1.0) { push @{ $cur->{names} }, $n->{name}; next }
		$cur = { from => $n->{from}, names => [ $n->{name} ] };
		push @steps, $cur;
	}
	my @acked = sort { $a->{end_wall} <=> $b->{end_wall} } @{ $r->{acked_list} };
	for my $i (0 .. $#steps)
	{
		my $st = $steps[$i];
		my ($from, $to) = ($st->{from}, $i < $#steps ? $steps[ $i + 1 ]{from} : 9e9);
		my $in = sub { my $t = shift; return defined $t && $t >= $from && $t < $to };
		$st->{operations} = scalar grep { $_->{f} =~ /^(acquire|write|release)$/ && $in->($_->{inv_wall}) } @$ops;
		$st->{acknowledged} = scalar grep { $in->($_->{end_wall}) } @acked;
		$st->{lost} = scalar grep { $in->($_->{end_wall}) } @{ $r->{lost_list} };
		$st->{stale} = scalar grep { $in->($_->{write}{end_wall}) } @{ $r->{stale_list} };
		$st->{refused} = scalar grep { $in->($_->{end_wall}) } @{ $r->{refused_list} };
		$st->{unknown} = scalar grep { $in->($_->{inv_wall}) } @{ $r->{unknown_list} };
		my ($before) = reverse grep { $_->{end_wall} < $from && epoch_of($_->{node}) } @acked;
		my ($after) = grep { $in->($_->{end_wall}) && $before && epoch_of($_->{node}) && $_->{node} ne $before->{node} } @acked;
		$st->{failover} = $after ? $after->{end_wall} - $from : undef;
	}
	return \@steps;
}

# runs - the dlock run children in OPS: {name, token, start, stop,
# expires, lost}: expires is the server's expiry of the lease after its
# grant or the last renew that succeeded before the child's stop (seconds
# since the epoch), lost the time dlock run gave the lease up (undef when
# it did not: the run was stopped, or its command ended)
sub runs
{
	my ($ops) = @_;
	my (%by, %renews);
	for my $op (grep { $_->{f} =~ /^(start|stop|renew|lost)$/ } @$ops)
	{
		my $r = $by{ $op->{proc} } //= { proc => $op->{proc}, name => $op->{name} };
		if ($op->{f} eq 'start')
		{
			$r->{token} = $op->{token};
			$r->{start} = $op->{inv_wall};
			$r->{granted_expires} = parse_ts($op->{start_detail});
		}
		elsif ($op->{f} eq 'renew') { push @{ $renews{ $op->{proc} } }, [ $op->{end_wall}, parse_ts($op->{detail}) ] }
		elsif ($op->{f} eq 'lost') { $r->{lost} = $op->{end_wall} }
		else { $r->{stop} = $op->{end_wall} // $op->{inv_wall} }
	}
	for my $r (values %by)
	{
		my @before = grep { defined $_->[1] && (!defined $r->{stop} || $_->[0] <= $r->{stop}) } @{ $renews{ $r->{proc} } // [] };
		$r->{expires} = @before ? max(map { $_->[1] } @before) : delete $r->{granted_expires};
		delete $r->{granted_expires};
		$r->{renews} = scalar @before;
	}
	return [ grep { defined $_->{token} } values %by ];
}

1;
