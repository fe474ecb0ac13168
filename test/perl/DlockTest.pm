=pod

=head1 NAME

DlockTest - what dlock's TAP tests (test/t/*.pl) share

=head1 SYNOPSIS

  use DlockTest qw(sync_pair psql_script background_query locks_left);

  my ($primary, $standby) = sync_pair('p', 's', synchronous_commit => 'remote_apply');
  my $client = psql_script($node, 'client1', $script, \$out);
  my $waiter = background_query($node, q{SELECT dlock.acquire('job', '1h', 'w')});
  is(locks_left($node), '', 'nothing is left in dlock.locks');
  my @tokens = grant_many($node, 'job:', 100);
  my ($granted, $fenced) = regrant_checks($node, 'job:1', $lost_token);

=head1 DESCRIPTION

A few helpers over PostgreSQL::Test::Cluster, each written once here instead
of pasted into every test that needs it.  They check nothing themselves: the
tests make the assertions.

=cut

package DlockTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT_OK = qw(sync_pair psql_script background_query locks_left
	  grant_many max_of regrant_checks lost_holder clock_ticks sql_edition_install);

=pod

=head2 sync_pair($primary_name, $standby_name, %options)

A primary with dlock installed and a streaming standby made from its base
backup, which the primary waits for as its synchronous standby before this
returns.  Options: C<conf>, lines for the primary's postgresql.conf before it
starts (the standby inherits them); C<synchronous_commit>, set on the
primary once the standby runs (default: left at C<on>).  Returns
C<($primary, $standby)>, both running; dies if the standby does not become
synchronous.

=cut

sub sync_pair
{
	my ($primary_name, $standby_name, %options) = @_;

	my $primary = PostgreSQL::Test::Cluster->new($primary_name);
	$primary->init(allows_streaming => 1);
	$primary->append_conf('postgresql.conf', $options{conf}) if defined $options{conf};
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION dlock');
	$primary->backup('base');

	my $standby = PostgreSQL::Test::Cluster->new($standby_name);
	$standby->init_from_backup($primary, 'base', has_streaming => 1);
	$standby->start;

	my $conf = "synchronous_standby_names = '$standby_name'\n";
	$conf .= "synchronous_commit = $options{synchronous_commit}\n"
	  if defined $options{synchronous_commit};
	$primary->append_conf('postgresql.conf', $conf);
	$primary->reload;
	$primary->poll_query_until('postgres', qq{SELECT sync_state = 'sync'
		FROM pg_stat_replication WHERE application_name = '$standby_name'})
	  or die "standby $standby_name did not become synchronous";
	return ($primary, $standby);
}

=pod

=head2 psql_script($node, $name, $script, \$out)

A client that runs C<$script> through C<psql -XAtq -f> against database
postgres of C<$node>, in the background: the script is written to
C<$name.sql> in the node's base directory, and psql's standard output (one
line per row, fields separated by C<|>) accumulates in C<$out>.  Returns the
IPC::Run harness; call C<finish> on it (after a crash of the server as well).
Standard error is discarded: put C<\set ON_ERROR_STOP 1> in the script when an
error must end the client.

=cut

sub psql_script
{
	my ($node, $name, $script, $out) = @_;
	my $file = $node->basedir . "/$name.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $script);
	$$out = '';
	return IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-q', '-f', $file, '-d', $node->connstr('postgres') ],
		'>', $out, '2>', \my $err);
}

=pod

=head2 background_query($node, $sql, %params)

A background psql session (PostgreSQL::Test::BackgroundPsql; C<%params> as for
C<background_psql>, database postgres) that has been sent C<$sql> and has
started to run it: the call returns while the statements may still wait.
Read their outcome with C<< $session->query_until(qr/.../, '') >>, for
instance on a marker the statements C<\echo>.

=cut

sub background_query
{
	my ($node, $sql, %params) = @_;
	my $session = $node->background_psql('postgres', %params);
	$session->query_until(qr/sent/, "\\echo sent\n$sql\n");
	return $session;
}

=pod

=head2 locks_left($node, %options)

dlock's locks in pg_locks, read through the view C<dlock.locks> so that every
lock space counts (name, queue, session, watch, pin and claim): one line
C<pid|kind|mode|granted> per lock, in a stable order, or the empty string when
there is none.  Tests compare it with C<''>, so that a failure shows what was
left.  Options: C<dbname> (default postgres); C<pid>, only that backend's.

=cut

sub locks_left
{
	my ($node, %options) = @_;
	my $where = defined $options{pid} ? "WHERE pid = $options{pid}" : '';
	return $node->safe_psql($options{dbname} // 'postgres',
		"SELECT pid, kind, mode, granted FROM dlock.locks $where ORDER BY 1, 2, 3, 4");
}

=pod

=head2 sql_edition_install($node, $db, $owner, @roles)

The SQL edition as on a managed service: the roles C<$owner> and C<@roles>
(C<LOGIN>, no other right), database C<$db> owned by C<$owner>, and the SQL
edition installed in it by C<$owner> with psql, one test.  The script is
C<DLOCK_SQL_EDITION_SCRIPT>'s (a changed copy under test), or else
F<sql-edition/dlock.sql> of the source tree; returns its path.

=cut

sub sql_edition_install
{
	my ($node, $db, $owner, @roles) = @_;
	my $script = $ENV{DLOCK_SQL_EDITION_SCRIPT} // "$ENV{TESTDIR}/sql-edition/dlock.sql";
	$node->safe_psql('postgres',
		join('', map { "CREATE ROLE $_ LOGIN;\n" } $owner, @roles) . "CREATE DATABASE $db OWNER $owner;\n");
	$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-U', $owner,
			'-d', $node->connstr($db), '-f', $script ],
		'the database owner installs the SQL edition');
	return $script;
}

=pod

=head2 grant_many($node, $prefix, $n, %options)

Grants C<$n> names C<$prefix>1 .. C<$prefix>C<$n> (owner C<h>I<i>, ttl 1h) in
one statement and returns their tokens, in name order.  Options: C<dbname>
(default postgres).

=cut

sub grant_many
{
	my ($node, $prefix, $n, %options) = @_;
	my $tokens = $node->safe_psql($options{dbname} // 'postgres', qq{
		SELECT string_agg((SELECT token FROM dlock.acquire('$prefix' || i, '1h', 'h' || i,
		                                                    timeout => '10s'))::text, ' ')
		  FROM generate_series(1, $n) i});
	return split / /, $tokens;
}

=pod

=head2 max_of(@numbers)

The largest of a list of numbers.

=cut

sub max_of { my $m = shift; for (@_) { $m = $_ if $_ > $m } return $m }

=pod

=head2 regrant_checks($node, $name, $token, %options)

Grants C<$name> again 40 times in a row on C<$node> (each time after a
C<force_release>), and checks C<dlock.fence($name, $token)> after each grant.
Returns two counts: the grants whose token was larger than C<$token>, and
the grants after which C<$token> fenced true.  A lost or superseded holder's
token must give C<(40, 0)>: a counter that came back below the lost token
would reach it within the 40 grants when the test has chosen a token close
enough above the counter.  Options: C<dbname> (default postgres).

=cut

sub regrant_checks
{
	my ($node, $name, $token, %options) = @_;
	my $result = $node->safe_psql($options{dbname} // 'postgres', qq{
		CREATE TEMP TABLE regrants (i int, token bigint, fences boolean);
		DO \$\$
		DECLARE t bigint;
		BEGIN
		  FOR i IN 1 .. 40 LOOP
		    PERFORM dlock.force_release('$name');
		    SELECT token INTO t FROM dlock.acquire('$name', '1h', 'again-' || i, timeout => '5s');
		    INSERT INTO regrants VALUES (i, t, dlock.fence('$name', $token));
		  END LOOP;
		  PERFORM dlock.force_release('$name');
		END \$\$;
		SELECT count(*) FILTER (WHERE token > $token) || ' ' || count(*) FILTER (WHERE fences)
		  FROM regrants});
	return split / /, $result;
}

=pod

=head2 lost_holder($node, $prefix, @lost)

Of grants C<$prefix>1 .. C<$prefix>N lost to C<$node> (made elsewhere, with
tokens C<@lost> in name order), the one (name and token) that C<$node>'s
counter, as it stands, would reach within the 40 grants of
C<regrant_checks> if nothing moved it up: the first lost token at least 20
above the counter's value now (or the last one).

=cut

sub lost_holder
{
	my ($node, $prefix, @lost) = @_;
	my $counter = $node->safe_psql('postgres', 'SELECT last_value FROM dlock.token_seq');
	for my $i (0 .. $#lost)
	{
		return ("$prefix" . ($i + 1), $lost[$i]) if $lost[$i] >= $counter + 20;
	}
	return ("$prefix" . scalar(@lost), $lost[-1]);
}

=pod

=head2 clock_ticks($node)

The server's clock now in the unit tokens follow (docs/internals.md, I1):
2^22 ticks a second since 2026-01-01 00:00 UTC.

=cut

sub clock_ticks
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SELECT ((extract(epoch FROM clock_timestamp())
		         - extract(epoch FROM timestamptz '2026-01-01 00:00:00+00')) * 4194304)::bigint});
}

1;

