=pod

=head1 NAME

DlockTest - what dlock's TAP tests (t/*.pl) share

=head1 SYNOPSIS

  use DlockTest qw(sync_pair psql_script background_query locks_left);

  my ($primary, $standby) = sync_pair('p', 's', synchronous_commit => 'remote_apply');
  my $client = psql_script($node, 'client1', $script, \$out);
  my $waiter = background_query($node, q{SELECT dlock.acquire('job', '1h', 'w')});
  is(locks_left($node), '', 'nothing is left in dlock.locks');

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

our @EXPORT_OK = qw(sync_pair psql_script background_query locks_left);

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

1;
