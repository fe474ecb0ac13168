# The history explorer: random histories of a primary and two asynchronous
# standbys (no WAL archive), drawn from the steps that can make a token
# come again, with the token properties of I1 (docs/internals.md) checked
# after every step on the server that grants then.
#
# Steps: grant a name (after forcing its lease off, so each grant supersedes
# the last holder), cut a standby off (stop it) and let it stream again,
# crash the primary, restart it, promote any running standby once no
# primary runs, rejoin a stopped old primary to the new one with
# pg_rewind, lose a stopped server for good, pg_dump the database, and
# later drop it and pg_restore that dump into the same cluster (or, with
# no primary running, into a new cluster that becomes the primary), take a
# base backup and later start it as it is (no recovery.signal) as the new
# primary.  A third of the histories start at version 1.1, with leases,
# and are updated first.  Every grant that returned is acknowledged.
# Synchronous replication and WAL archives are left to test/t/004, test/t/015 and
# test/t/020, whose histories they shape.
#
# Properties, over the whole history:
#   never twice  no token value is acknowledged to two grants, and no two
#                rows of the granting server share one
#   stale false  every acknowledged grant's token fences true on the
#                granting server only while that server holds that very
#                grant (same name, token and owner): a lost or superseded
#                holder's fence is false
#   ordered      every grant's token is above every token acknowledged
#                before it, on any server (all servers here share one clock)
#
# DLOCK_HISTORY_SEED replays a history (a failure prints its seed and its
# steps); DLOCK_HISTORIES says how many (default 6, about a minute; make
# test-histories runs 60); DLOCK_HISTORY_STEPS how many steps each (default 20).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $histories = $ENV{DLOCK_HISTORIES} // 6;
my $steps_per_history = $ENV{DLOCK_HISTORY_STEPS} // 20;
my $first_seed = $ENV{DLOCK_HISTORY_SEED} // (time() % 1000000);
my @names = map { "n$_" } 0 .. 3;

# One history's world: servers by name, each with its role
my (%server, %role, @log, %acked, @grants, $max_acked, %violations, $dump, $backup);
my $serial = 0;

sub pick { return @_ ? $_[ int(rand(scalar @_)) ] : undef }

# new_node NAME: a node on a port no server of the history has: a stopped
# server keeps its port (and its socket's lock file name) for its restart,
# though nothing listens there meanwhile
sub new_node
{
	my ($name) = @_;
	my %used = map { $_->port => 1 } values %server;
	my $port;
	do { $port = PostgreSQL::Test::Cluster::get_free_port() } while $used{$port};
	return PostgreSQL::Test::Cluster->new($name, port => $port);
}
sub with_role { my ($r) = @_; return sort grep { $role{$_} eq $r } keys %role }
sub primary { my @p = with_role('primary'); return @p ? $server{ $p[0] } : undef }

# started NODE: start a server of the history; one that does not start
# (PostgreSQL refusing the copy it was given, say) is lost for good, its
# log's end shown, and the history goes on without it
sub started
{
	my ($node) = @_;
	return 1 if $node->start(fail_ok => 1);
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
	diag('server ' . $node->name . " did not start; its log ends:\n" . substr($log, -2000));
	$role{ $node->name } = 'lost';
	return 0;
}

sub violation
{
	my ($property, $what) = @_;
	push @{ $violations{$property} }, "step " . scalar(@log) . ": $what";
}

# The steps; each returns false when it does not apply now
my %step;
$step{grant} = sub {
	my $p = primary() or return 0;
	my $name = pick(@names);
	my $owner = 'o' . ++$serial;
	my $token = $p->safe_psql('app', qq{SELECT dlock.force_release('$name');
		SELECT token FROM dlock.acquire('$name', '1h', '$owner', timeout => '5s')});
	$token = (split /\n/, $token)[-1];
	violation('never twice', "token $token acknowledged to $acked{$token} and to $name/$owner")
	  if exists $acked{$token};
	violation('ordered', "token $token of $name/$owner is not above $max_acked, acknowledged before")
	  if defined $max_acked && $token <= $max_acked;
	$acked{$token} = "$name/$owner";
	push @grants, [ $name, $token, $owner ];
	$max_acked = $token if !defined $max_acked || $token > $max_acked;
	return "grant $name to $owner on " . $p->name . ": $token";
};
$step{cut} = sub {
	my $s = pick(with_role('standby')) or return 0;
	$server{$s}->stop('fast');
	$role{$s} = 'stopped standby';
	return "cut standby $s off";
};
$step{reconnect} = sub {
	my $s = pick(with_role('stopped standby')) or return 0;
	return "standby $s did not start: lost" unless started($server{$s});
	$role{$s} = 'standby';
	return "standby $s streams again";
};
$step{crash} = sub {
	my $p = primary() or return 0;
	$p->stop('immediate');
	$role{ $p->name } = 'stopped primary';
	return 'crash primary ' . $p->name;
};
$step{restart} = sub {
	return 0 if primary();
	my $p = pick(with_role('stopped primary')) or return 0;
	return "$p did not restart: lost" unless started($server{$p});
	$role{$p} = 'primary';
	return "restart $p";
};
$step{promote} = sub {
	return 0 if primary();
	my $s = pick(with_role('standby')) or return 0;
	# A standby can have stopped by itself (PostgreSQL refusing a primary
	# whose history it does not follow, say): lost for good, as in started()
	if (PostgreSQL::Test::Utils::system_log('pg_ctl', '-D', $server{$s}->data_dir,
			'-l', $server{$s}->logfile, 'promote') != 0)
	{
		my $log = PostgreSQL::Test::Utils::slurp_file($server{$s}->logfile);
		diag("standby $s could not be promoted; its log ends:\n" . substr($log, -2000));
		$role{$s} = 'lost';
		return "standby $s could not be promoted: lost";
	}
	$server{$s}->poll_query_until('app', 'SELECT NOT pg_is_in_recovery()')
	  or die "$s was not promoted";
	$role{$s} = 'primary';
	return "promote $s";
};
$step{lose} = sub {
	my $s = pick(with_role('stopped primary'), with_role('stopped standby')) or return 0;
	$role{$s} = 'lost';
	return "lose $s for good";
};
$step{dump} = sub {
	my $p = primary() or return 0;
	$dump = $p->basedir . '/app-' . ++$serial . '.dump';
	system_or_bail('pg_dump', '-Fc', '-f', $dump, '-d', $p->connstr('app'));
	return 'dump ' . $p->name;
};
$step{restore_dump} = sub {
	my $p = primary() or return 0;
	return 0 unless defined $dump;
	$p->safe_psql('postgres', 'DROP DATABASE app WITH (FORCE)');
	$p->safe_psql('postgres', 'CREATE DATABASE app');
	system_or_bail('pg_restore', '-d', $p->connstr('app'), $dump);
	return 'restore the older dump into ' . $p->name;
};
$step{restore_elsewhere} = sub {
	return 0 if primary() || !defined $dump;
	my $n = new_node('other' . ++$serial);
	$n->init(allows_streaming => 1);
	$n->append_conf('postgresql.conf', "wal_log_hints = on\n");
	$n->start;
	$n->safe_psql('postgres', 'CREATE DATABASE app');
	system_or_bail('pg_restore', '-d', $n->connstr('app'), $dump);
	$server{ $n->name } = $n;
	$role{ $n->name } = 'primary';
	return 'restore the dump into a new cluster, ' . $n->name . ', the new primary';
};
$step{rejoin} = sub {
	my $p = primary() or return 0;
	my $o = pick(grep { $server{$_}->data_dir ne $p->data_dir } with_role('stopped primary')) or return 0;
	# a server of another cluster (a restore elsewhere) cannot be rewound
	# onto this one: it is given up
	if (!run_log([ 'pg_rewind', '-D', $server{$o}->data_dir, '--source-server', $p->connstr('postgres') ]))
	{
		$role{$o} = 'lost';
		return "lose $o for good (pg_rewind refused it)";
	}
	$server{$o}->enable_streaming($p);
	return "$o, rewound, did not start: lost" unless started($server{$o});
	$role{$o} = 'standby';
	return "rejoin $o as a standby of " . $p->name . ' with pg_rewind';
};
$step{backup} = sub {
	my $p = primary() or return 0;
	$backup = [ $p, 'b' . ++$serial ];
	$p->backup($backup->[1]);
	return 'base backup of ' . $p->name;
};
$step{start_backup} = sub {
	return 0 if primary() || !defined $backup;
	my $copy = new_node('copy' . ++$serial);
	$copy->init_from_backup(@$backup);
	$backup = undef;
	$server{ $copy->name } = $copy;
	return 'the base backup ' . $copy->name . ' did not start: lost' unless started($copy);
	$role{ $copy->name } = 'primary';
	return 'start the base backup of ' . $copy->name . ' as it is';
};
# grants come most often, so that every other step has tokens to lose
my @weighted = ((('grant') x 6), qw(cut reconnect crash crash restart promote promote lose
	  dump restore_dump restore_elsewhere rejoin backup start_backup));

# check: the properties on the server that grants now
sub check
{
	my $p = primary() or return;
	my $shared = $p->safe_psql('app',
		'SELECT count(*) FROM (SELECT token FROM dlock.lease_state GROUP BY token HAVING count(*) > 1) d');
	violation('never twice', "$shared token values held by two rows on " . $p->name) if $shared;
	return unless @grants;
	my $values = join(',', map { "('$_->[0]', $_->[1], '$_->[2]')" } @grants);
	my $stale = $p->safe_psql('app', qq{
		SELECT string_agg(g.name || '/' || g.owner || ' ' || g.token, ', ')
		  FROM (VALUES $values) g(name, token, owner)
		 WHERE dlock.fence(g.name, g.token)
		   AND NOT EXISTS (SELECT FROM dlock.lease_state s
		                    WHERE s.name = g.name AND s.token = g.token AND s.owner = g.owner)});
	violation('stale false', "fence true on " . $p->name . " for grants it does not hold: $stale")
	  if $stale ne '';
}

for my $h (0 .. $histories - 1)
{
	my $seed = $first_seed + $h;
	srand($seed);
	(%server, %role, @log, %acked, @grants, %violations) = ();
	($max_acked, $dump, $backup) = (undef, undef, undef);

	my $p = PostgreSQL::Test::Cluster->new("h${seed}_p");
	$p->init(allows_streaming => 1);
	$p->append_conf('postgresql.conf', "wal_log_hints = on\n");    # for pg_rewind
	$p->start;
	$p->safe_psql('postgres', 'CREATE DATABASE app');
	# A third of the histories start at 1.1 with leases, updated before
	# anything else happens: their tokens must keep their place
	my $from_1_1 = rand() < 1 / 3;
	$p->safe_psql('app', $from_1_1 ? "CREATE EXTENSION dlock VERSION '1.1'" : 'CREATE EXTENSION dlock');
	$p->backup('start');
	%server = ($p->name => $p);
	%role = ($p->name => 'primary');
	for my $s ('a', 'b')
	{
		my $n = PostgreSQL::Test::Cluster->new("h${seed}_$s");
		$n->init_from_backup($p, 'start', has_streaming => 1);
		$n->start;
		$server{ $n->name } = $n;
		$role{ $n->name } = 'standby';
	}

	if ($from_1_1)
	{
		push @log, $step{grant}->() for 1 .. 3;
		$p->safe_psql('app', 'ALTER EXTENSION dlock UPDATE');
		$p->wait_for_catchup($server{$_}) for with_role('standby');
		push @log, 'ALTER EXTENSION dlock UPDATE from 1.1';
		check();
	}
	my $idle = 0;
	while (@log < $steps_per_history)
	{
		my $did = $step{ pick(@weighted) }->();
		# a history where no step applies any more (every server lost) ends
		if (!$did)
		{
			last if ++$idle > 200;
			next;
		}
		$idle = 0;
		push @log, $did;
		check();
	}
	my $replay = "seed $seed (DLOCK_HISTORY_SEED=$seed DLOCK_HISTORIES=1), steps:\n  "
	  . join("\n  ", @log);
	for my $property ('never twice', 'stale false', 'ordered')
	{
		my $found = $violations{$property} // [];
		ok(!@$found, "history $seed: $property")
		  or diag(join("\n", @$found) . "\n$replay");
	}
	note $replay;
	for my $name (keys %server)
	{
		$server{$name}->stop('immediate') if $role{$name} eq 'primary' || $role{$name} eq 'standby';
	}
}

done_testing();
