# Crashes: grants, renewals and releases under load, then an immediate
# shutdown; and kill -9 of a holder's and of a waiter's backend.  Every
# acknowledged change survives (a release that was its client's last
# acknowledged call may be lost whole: see test/t/008_lazy_release.pl), no token is
# ever issued twice, the next token is larger than all before, and nothing is
# left locked.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest qw(psql_script background_query locks_left);

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf('postgresql.conf', "restart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

note 'load, then pg_ctl stop -m immediate';

# Each client works through its own names: grant name i, renew it every
# third step, release the previous name every fifth step.  psql prints a
# line for each acknowledged call.
my $clients = 4;
my $steps = 3000;
my (@ops, @harness, @out);
foreach my $c (1 .. $clients)
{
	my (@list, $sql);
	foreach my $i (1 .. $steps)
	{
		push @list, [ 'G', "c$c-$i" ];
		push @list, [ 'R', "c$c-$i" ] if $i % 3 == 0;
		push @list, [ 'X', "c$c-" . ($i - 1) ] if $i % 5 == 0;
	}
	foreach my $op (@list)
	{
		my ($kind, $name) = @$op;
		$sql .=
			$kind eq 'G' ? "SELECT 'G', name, token, expires_at FROM dlock.acquire('$name', '1h', 'c$c');\n"
		  : $kind eq 'R' ? "SELECT 'R', name, token, expires_at FROM dlock.renew('$name', 'c$c', '2h');\n"
		  : "SELECT 'X', '$name', dlock.release('$name', 'c$c');\n";
	}
	push @ops, \@list;
	push @harness, psql_script($node, "client$c", "\\set ON_ERROR_STOP 1\n$sql", \$out[$c]);
}

# Let the load run, then crash the server in the middle of it
$node->poll_query_until('postgres',
	"SELECT count(*) > 400 FROM dlock.lease_state WHERE name LIKE 'c%'")
  or die 'load did not start';
$node->stop('immediate');
$_->finish foreach @harness;
$node->start;

my %table;
foreach my $line (split /\n/, $node->safe_psql('postgres',
	q{SELECT name, token, expires_at, ended_at IS NOT NULL FROM dlock.lease_state WHERE name LIKE 'c%'}))
{
	my ($name, $token, $expires, $ended) = split /\|/, $line;
	$table{$name} = { token => $token, expires => $expires, ended => $ended };
}

my ($acked, $bad, $dup) = (0, 0, 0);
my %seen_token;
my $max_token = 0;
foreach my $c (1 .. $clients)
{
	my @lines = split /\n/, $out[$c];
	my (%last, %granted);
	foreach my $line (@lines)
	{
		my ($kind, $name, $token, $expires) = split /\|/, $line;
		$acked++;
		if ($kind eq 'G')
		{
			$dup++ if $seen_token{$token}++;
			$max_token = $token if $token > $max_token;
			$granted{$name} = $token;
		}
		$last{$name} = [ $kind, $token, $expires ];
	}
	# The call after the last acknowledged one may have committed unseen
	my $inflight = $ops[ $c - 1 ]->[ scalar @lines ];
	my $inflight_name = $inflight ? $inflight->[1] : '';
	# A release commits without a flush of its own; the client's next call,
	# a grant, flushes it.  So only a release that was the last acknowledged
	# call may be lost, and then whole.
	my $last_line = @lines ? $lines[-1] : '';
	my ($last_kind, $last_name) = ((split /\|/, $last_line), '', '');

	foreach my $name (keys %last)
	{
		my ($kind, $token, $expires) = @{ $last{$name} };
		my $row = $table{$name};
		my $ok;
		if ($kind eq 'X')
		{
			$ok = $row && ($row->{ended} eq 't'
				|| $last_kind eq 'X' && $name eq $last_name
				&& $row->{token} eq ($granted{$name} // ''));
			note "client $c: the last acknowledged release, of $name, was lost whole"
			  if $ok && $row->{ended} ne 't';
		}
		else
		{
			$ok = $row && $row->{token} eq $token
			  && ($row->{expires} eq $expires && $row->{ended} eq 'f'
				|| $name eq $inflight_name);
		}
		if (!$ok)
		{
			$bad++;
			diag "client $c: $name acknowledged as $kind $token $expires, found "
			  . ($row ? join(' ', %$row) : 'nothing');
		}
	}
}
note "$acked acknowledged calls before the crash";
cmp_ok($acked, '>', 400, 'the load was running when the server crashed');
cmp_ok($acked, '<', scalar(map { @$_ } @ops), 'the crash came in the middle of the load');
is($bad, 0, 'every acknowledged grant, renewal and release survived the crash, but a last lazy release');
is($dup, 0, 'no token was acknowledged twice');
is($node->safe_psql('postgres',
	q{SELECT count(*) = count(DISTINCT token) FROM dlock.lease_state}),
	't', 'no token appears twice in the lease table');
my $table_max = $node->safe_psql('postgres', 'SELECT max(token) FROM dlock.lease_state');
my $next = $node->safe_psql('postgres', q{SELECT token FROM dlock.acquire('after-crash', '1h')});
cmp_ok($next, '>', $max_token, 'the next token is larger than every acknowledged one');
cmp_ok($next, '>', $table_max, 'the next token is larger than every one in the table');

note 'kill -9 of a holder backend in the middle of its transaction';
$node->safe_psql('postgres', q{SELECT dlock.acquire('kept', '1h', 'keeper')});
my $kept = $node->safe_psql('postgres',
	q{SELECT token || ' ' || expires_at FROM dlock.lease_state WHERE name = 'kept'});

my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT dlock.acquire('k', '1h', 'h')});
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
my $waiter = background_query($node, q{SELECT dlock.acquire('k', '1h', 'w');});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE '%dlock.acquire(''k''%' AND wait_event_type = 'Lock'})
  or die 'waiter did not wait';
kill 'KILL', $holder_pid;
$node->poll_query_until('postgres', 'SELECT true') or die 'server did not recover';
eval { $holder->quit };
eval { $waiter->quit };

is($node->safe_psql('postgres',
	q{SELECT token || ' ' || expires_at FROM dlock.lease_state WHERE name = 'kept'}),
	$kept, 'a lease committed before the crash survives it');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.lease_state WHERE name = 'k'}),
	'0', 'the killed holder\'s uncommitted grant is gone');
is(locks_left($node), '', 'nothing is left locked after the crash');
is($node->safe_psql('postgres', q{SELECT owner FROM dlock.acquire('k', '1h', 'w', timeout => '5s')}),
	'w', 'the waiter, retrying, is granted at once');

note 'kill -9 of a waiter backend';
my $waiter2 = background_query($node, q{SELECT dlock.acquire('k', '1h', 'w2');});
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE '%dlock.acquire(''k''%' AND state = 'active'
	  AND wait_event_type IN ('Lock', 'Extension')})
  or die 'second waiter did not wait';
my $waiter2_pid = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
	WHERE query LIKE '%dlock.acquire(''k''%' AND state = 'active' AND pid <> pg_backend_pid()});
my $k_before = $node->safe_psql('postgres',
	q{SELECT owner || ' ' || token || ' ' || expires_at FROM dlock.lease_state WHERE name = 'k'});
kill 'KILL', $waiter2_pid;
$node->poll_query_until('postgres', 'SELECT true') or die 'server did not recover';
eval { $waiter2->quit };
is($node->safe_psql('postgres',
	q{SELECT owner || ' ' || token || ' ' || expires_at FROM dlock.lease_state WHERE name = 'k'}),
	$k_before, 'the holder\'s lease is untouched by the killed waiter');
is(locks_left($node), '', 'nothing is left locked');
is($node->safe_psql('postgres', q{SELECT dlock.release('k', 'w')}), 't', 'the holder releases');
is($node->safe_psql('postgres', q{SELECT owner FROM dlock.acquire('k', '1h', 'w3', timeout => '5s')}),
	'w3', 'a new waiter is granted at once');
cmp_ok($node->safe_psql('postgres', q{SELECT token FROM dlock.leases WHERE name = 'k'}), '>', $next,
	'tokens keep growing across the crashes');

$node->stop;
done_testing();
