=pod

=head1 NAME

DlockHA - what dlock's high-availability suites share (test/ha/auto_failover.pl,
test/ha/patroni/patroni.pl, test/faults)

=head1 SYNOPSIS

  use DlockHA qw(free_port psql poll_until lines_of child_pids postmaster_pid
	etcd_command etcd_healthy patroni_yaml);

  my $port = free_port();
  my ($ok, $out, $err) = psql($bindir, $conninfo, 'SELECT 1', 30);
  poll_until('the server answers', 60, sub { psql($bindir, $conninfo, 'SELECT 1') eq '1' });

  my $procs = DlockHA::Procs->new(logdir => "$base/logs");
  $procs->start('etcd', [ etcd_command($etcd, %etcd) ]);
  poll_until('etcd answers', 30, sub { etcd_healthy("127.0.0.1:$etcd{client_port}") });
  $procs->stop('etcd', 30);

  my $cluster = DlockHA::Patroni->new(nodes => \@nodes, api => \%api,
	conninfo => \&conninfo, psql => sub { psql($bindir, @_) });
  my $leader = $cluster->leader;

=head1 DESCRIPTION

The suites run real HA managers (pg_auto_failover, Patroni with etcd) in
the foreground under the test, each process started with IPC::Run and
stopped by its pid, and ask PostgreSQL through psql with a timeout.  Those
pieces are written once here; the suites keep what they test.  Nothing here
makes an assertion.

=cut

package DlockHA;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use Time::HiRes qw(time sleep);

our @EXPORT_OK = qw(free_port psql poll_until lines_of child_pids postmaster_pid
  etcd_command etcd_healthy patroni_yaml);

=pod

=head2 free_port()

A TCP port nobody listens on at 127.0.0.1, and that this process has not
handed out before.

=cut

my %taken;

sub free_port
{
	for my $port (map { 20000 + int(rand(20000)) } 1 .. 200)
	{
		next if $taken{$port};
		my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port,
			Proto => 'tcp', ReuseAddr => 0);
		next unless $sock;
		close $sock;
		$taken{$port} = 1;
		return $port;
	}
	die 'no free port';
}

=pod

=head2 psql($bindir, $conninfo, $sql, $timeout)

Runs C<$sql>, given on standard input so that it may be long, through
C<$bindir/psql -X -At -q> with ON_ERROR_STOP, within C<$timeout> seconds
(default 60).  Returns C<($ok, $out, $err)> in list context, C<$out> (its
last newline taken off) otherwise.  A psql that cannot connect exits before
reading its input, which must not kill the test with SIGPIPE.

=cut

sub psql
{
	my ($bindir, $conninfo, $sql, $timeout) = @_;
	my ($out, $err) = ('', '');
	local $SIG{PIPE} = 'IGNORE';
	my $ok = eval {
		IPC::Run::run([ "$bindir/psql", '-X', '-At', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $conninfo ],
			'<', \$sql, '>', \$out, '2>', \$err, IPC::Run::timeout($timeout // 60));
	};
	$err .= $@ if $@;
	chomp $out;
	return wantarray ? ($ok && $? == 0, $out, $err) : $out;
}

=pod

=head2 poll_until($what, $seconds, $check)

Calls C<$check> every quarter of a second until it returns true (an error
in it counts as false); dies with "timed out after N s: C<$what>" when
C<$seconds> have passed.

=cut

sub poll_until
{
	my ($what, $seconds, $check) = @_;
	my $until = time + $seconds;
	while (time < $until)
	{
		return 1 if eval { $check->() };
		sleep 0.25;
	}
	die "timed out after $seconds s: $what\n";
}

=pod

=head2 lines_of($file)

The lines of a file, without their newlines; none when it does not exist.

=cut

sub lines_of
{
	my ($file) = @_;
	return () unless -e $file;
	open my $fh, '<', $file or die "$file: $!";
	chomp(my @lines = <$fh>);
	return @lines;
}

=pod

=head2 child_pids($pid)

The pids of the processes whose parent is C<$pid>, from /proc.

=cut

sub child_pids
{
	my ($parent) = @_;
	return () unless $parent;
	my @kids;
	for my $stat (glob '/proc/[0-9]*/stat')
	{
		open my $fh, '<', $stat or next;
		my $line = <$fh> // next;
		my ($pid, $ppid) = $line =~ /^(\d+) \(.*\) \S+ (\d+)/ or next;
		push @kids, $pid if $ppid == $parent;
	}
	return @kids;
}

=pod

=head2 postmaster_pid($datadir)

The pid in C<$datadir/postmaster.pid>, or undef when there is none.

=cut

sub postmaster_pid
{
	my ($datadir) = @_;
	my ($pid) = eval { lines_of("$datadir/postmaster.pid") };
	return $pid;
}

=pod

=head2 etcd_command($etcd, name => N, data_dir => D, host => H, client_port => C, peer_port => P)

The command line of a single-node etcd cluster named N, its data in D,
listening for clients and its peer on H (default 127.0.0.1).

=cut

sub etcd_command
{
	my ($etcd, %a) = @_;
	my $host = $a{host} // '127.0.0.1';
	my ($client, $peer) = ("http://$host:$a{client_port}", "http://$host:$a{peer_port}");
	return ($etcd, '--name', $a{name}, '--data-dir', $a{data_dir},
		'--listen-client-urls', $client, '--advertise-client-urls', $client,
		'--listen-peer-urls', $peer, '--initial-advertise-peer-urls', $peer,
		'--initial-cluster', "$a{name}=$peer", '--log-level', 'warn');
}

=pod

=head2 etcd_healthy($host_port)

etcd at C<$host_port> says it is healthy.

=cut

sub etcd_healthy
{
	my ($host_port) = @_;
	my $r = HTTP::Tiny->new(timeout => 2)->get("http://$host_port/health");
	return ($r->{content} // '') =~ /"health":"true"/;
}

=pod

=head2 patroni_yaml(%settings)

A Patroni node's configuration: etcd3 as the DCS, dlock in
shared_preload_libraries, trust authentication from C<network> (and the
local socket), no watchdog.  Settings: C<scope>, C<namespace>, C<name>;
C<api> and C<listen>, the REST API's and PostgreSQL's host:port (each its
own connect address); C<etcd>, etcd's host:port; C<dcs>, a list of
key-value pairs for bootstrap.dcs; C<parameters>, more pairs for its
postgresql.parameters after shared_preload_libraries and wal_keep_size;
C<data_dir>, C<bin_dir>, C<pgpass>, C<socket_dir>; C<superuser>; C<rewind>,
a user for pg_rewind (none when undef); C<network>, the address range of
pg_hba.conf's host lines.

=cut

sub patroni_yaml
{
	my (%s) = @_;
	my $dcs = '';
	my @dcs = @{ $s{dcs} };
	while (my ($k, $v) = splice @dcs, 0, 2) { $dcs .= "    $k: $v\n" }
	my $parameters = '';
	my @parameters = @{ $s{parameters} };
	while (my ($k, $v) = splice @parameters, 0, 2) { $parameters .= "        $k: $v\n" }
	my $rewind = defined $s{rewind} ? "    rewind:\n      username: $s{rewind}\n" : '';
	return <<"EOF";
scope: $s{scope}
namespace: $s{namespace}
name: $s{name}
restapi:
  listen: $s{api}
  connect_address: $s{api}
etcd3:
  host: $s{etcd}
bootstrap:
  dcs:
${dcs}    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        shared_preload_libraries: dlock
        wal_keep_size: 256MB
${parameters}  initdb:
    - encoding: UTF8
    - auth: trust
postgresql:
  listen: $s{listen}
  connect_address: $s{listen}
  data_dir: $s{data_dir}
  bin_dir: $s{bin_dir}
  pgpass: $s{pgpass}
  authentication:
    superuser:
      username: $s{superuser}
    replication:
      username: replicator
${rewind}  parameters:
    unix_socket_directories: '$s{socket_dir}'
  pg_hba:
    - local all all trust
    - local replication all trust
    - host all all $s{network} trust
    - host replication all $s{network} trust
watchdog:
  mode: off
EOF
}

=pod

=head1 DlockHA::Procs

The processes a suite runs in the foreground, by name: started with
IPC::Run, their output appended to C<logdir/NAME.log>, and stopped by their
pid.

=over

=item new(logdir => DIR)

=item start($name, \@cmd, %options)

Starts C<@cmd>; returns its pid.  Dies when a process of that name runs
already.  Its standard input is /dev/null, as pg_ctl gives the server,
unless option C<stdin> says otherwise (as IPC::Run's C<< '<' >> takes
it).  That matters to PostgreSQL under an HA manager: a backend that
waited for a synchronous standby when its postmaster died stops talking to
its client and reads its next command from standard input.  At the end of
/dev/null it exits; on a pipe that stays open (C<\undef>) it waits for
ever, keeping the node's shared memory, so that the node cannot be
started again, and its client's connection, so that the client hangs.

=item pid_of($name), names()

The pid of a process started and not stopped (or undef); the names of those.

=item running($name)

The process has not exited (a zombie has: IPC::Run reaps it at finish).

=item signal($name, $signal)

Sends a signal to the process.

=item stop($name, $grace)

SIGTERM (a stopped process is continued first), then SIGKILL after
C<$grace> seconds (default 30); returns the exit status, undef for a name
not running.

=item kill9($name)

SIGKILL, and the process is reaped.

=back

=cut

package DlockHA::Procs;

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use Time::HiRes qw(time sleep);

sub new
{
	my ($class, %a) = @_;
	return bless { logdir => $a{logdir}, procs => {} }, $class;
}

sub start
{
	my ($self, $name, $cmd, %options) = @_;
	die "$name runs already" if $self->{procs}{$name};
	my $h = IPC::Run::start($cmd, '<', $options{stdin} // '/dev/null',
		'>>', "$self->{logdir}/$name.log", '2>&1');
	$self->{procs}{$name} = { h => $h, pid => $h->{KIDS}[0]{PID} };
	return $self->{procs}{$name}{pid};
}

sub pid_of { my ($self, $name) = @_; return $self->{procs}{$name} ? $self->{procs}{$name}{pid} : undef }

sub names { my ($self) = @_; return keys %{ $self->{procs} } }

sub running
{
	my ($self, $name) = @_;
	my $p = $self->{procs}{$name} or return 0;
	open my $fh, '<', "/proc/$p->{pid}/stat" or return 0;
	my $line = <$fh> // return 0;
	return $line !~ /^\d+ \(.*\) Z /;
}

sub signal
{
	my ($self, $name, $signal) = @_;
	my $pid = $self->pid_of($name) or return 0;
	return kill $signal, $pid;
}

sub stop
{
	my ($self, $name, $grace) = @_;
	my $p = $self->{procs}{$name} or return undef;
	kill 'CONT', $p->{pid};
	kill 'TERM', $p->{pid};
	my $until = time + ($grace // 30);
	sleep 0.1 while $self->running($name) && time < $until;
	kill 'KILL', $p->{pid} if $self->running($name);
	delete $self->{procs}{$name};
	eval { $p->{h}->finish };
	return $p->{h}->full_result;
}

sub kill9
{
	my ($self, $name) = @_;
	my $p = delete $self->{procs}{$name} or return;
	kill 'KILL', $p->{pid};
	eval { $p->{h}->finish };
}

=pod

=head1 DlockHA::Patroni

What a Patroni cluster says of itself, through the REST API of whichever
node answers.

=over

=item new(nodes => \@names, api => {name => 'host:port'}, conninfo => sub, psql => sub)

C<conninfo> gives a node's conninfo from its name; C<psql> runs SQL on a
conninfo and returns its output (as DlockHA::psql in scalar context).

=item members()

C<{name => {role, state, timeline, ...}}>, or C<{}> when no node answers.

=item describe()

"name:role/state ..." of every member, for notes.

=item leader()

The node Patroni names leader, running, whose PostgreSQL takes writes; or
undef.

=item replicas_streaming()

How many members are replicas (or standbys) that stream or run.

=item http()

The HTTP::Tiny it asks with (2 s timeout), for other requests to the API.

=back

=cut

package DlockHA::Patroni;

use strict;
use warnings FATAL => 'all';

use HTTP::Tiny;
use JSON::PP;

sub new
{
	my ($class, %a) = @_;
	return bless { %a, http => HTTP::Tiny->new(timeout => 2) }, $class;
}

sub http { return $_[0]{http} }

sub members
{
	my ($self) = @_;
	for my $node (@{ $self->{nodes} })
	{
		my $r = $self->{http}->get("http://$self->{api}{$node}/cluster");
		next unless $r->{success};
		return { map { $_->{name} => $_ } @{ decode_json($r->{content})->{members} } };
	}
	return {};
}

sub describe
{
	my ($self) = @_;
	my $m = $self->members;
	return join ' ', map { "$_:$m->{$_}{role}/$m->{$_}{state}" } sort keys %$m;
}

sub leader
{
	my ($self) = @_;
	my $m = $self->members;
	my ($l) = grep { $m->{$_}{role} eq 'leader' && $m->{$_}{state} eq 'running' } keys %$m;
	return undef unless $l;
	return $l if $self->{psql}->($self->{conninfo}->($l), 'SELECT NOT pg_is_in_recovery()') eq 't';
	return undef;
}

sub replicas_streaming
{
	my ($self) = @_;
	my $m = $self->members;
	return scalar grep { $m->{$_}{role} =~ /replica|standby/ && $m->{$_}{state} =~ /^(streaming|running)$/ }
	  keys %$m;
}

1;
