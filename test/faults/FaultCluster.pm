# FaultCluster - etcd and Patroni nodes in network namespaces, the processes
# started in them, and the faults put on them.
#
# The namespaces themselves are made by test/faults/run.sh: TAG-ROLE for the
# roles etcd, n1..n3 (Patroni and PostgreSQL), c1..c3 (clients) and ctl
# (this controller; never cut off), each with one address in 10.77.0.0/24
# on a bridge.  Every process is started in its namespace with ip netns
# exec and setpriv (which exec, so the pid we hold is the program's own),
# and stopped by that pid; run.sh's cleanup ends anything left in the
# namespaces.
#
# Faults, each undone by heal():
#  - partition(GROUPS): nftables rules in every namespace of the groups drop
#    packets to and from the addresses of the other groups; oneway(FROM, TO)
#    drops only what FROM sends to TO;
#  - loss(PERCENT, ROLES): nftables drops that share of the packets coming
#    into each role (numgen random);
#  - throttle(RATE, LATENCY, ROLES): each role's outgoing link is a slow
#    token bucket (tc tbf) whose queue delays packets and drops the excess;
#  - delay(MS, JITTER_MS, ROLES): each role's outgoing TCP packets are held
#    that long by delay.c, fed by an iptables NFQUEUE rule (tc netem's
#    delay does the same, but not every kernel has sch_netem, nor nftables'
#    queue expression: the iptables target is what works on both);
#  - pause/resume of processes (SIGSTOP, SIGCONT);
#  - clock(NODE, SPEC): the libfaketime setting of the node's PostgreSQL,
#    read again by its processes every second;
#  - kill -9 of a node's postmaster, or of the whole node.
#
# The process handling (start/stop by pid), psql, etcd's command line,
# the Patroni configuration and the REST queries are DlockHA.pm's
# (test/perl), shared with test/ha; what is here is the namespaces and the
# faults.

package FaultCluster;

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use JSON::PP;
use Time::HiRes qw(time sleep);

use DlockHA qw(child_pids etcd_command etcd_healthy patroni_yaml);

our %ADDR = (ctl => '10.77.0.2', etcd => '10.77.0.10', n1 => '10.77.0.11', n2 => '10.77.0.12',
	n3 => '10.77.0.13', c1 => '10.77.0.21', c2 => '10.77.0.22', c3 => '10.77.0.23');
our @NODES = qw(n1 n2 n3);
our @CLIENTS = qw(c1 c2 c3);

sub new
{
	my ($class, %a) = @_;
	my $self = bless {
		tag => $a{tag}, work => $a{work}, bindir => $a{bindir}, user => $a{user},
		patroni => $a{patroni}, etcd => $a{etcd}, faketime => $a{faketime}, delay => $a{delay},
		procs => DlockHA::Procs->new(logdir => "$a{work}/logs"), faults => {},
		cluster => DlockHA::Patroni->new(nodes => \@NODES,
			api => { map { $_ => "$ADDR{$_}:8008" } @NODES },
			conninfo => sub { FaultCluster->conninfo($_[0]) },
			psql => sub { DlockHA::psql($a{bindir}, $_[0], $_[1], 10) }),
	}, $class;
	mkdir "$self->{work}/logs";
	return $self;
}

sub ns { my ($self, $role) = @_; return "$self->{tag}-$role" }
sub addr { return $ADDR{ $_[1] } }

# cmd_in - the command line that runs @cmd in ROLE's namespace as USER
# (root when undef)
sub cmd_in
{
	my ($self, $role, $user, @cmd) = @_;
	my @as = defined $user
	  ? ('setpriv', "--reuid=$user", "--regid=$user", '--init-groups', '--')
	  : ();
	return ('ip', 'netns', 'exec', $self->ns($role), @as, @cmd);
}

# start - a process in ROLE's namespace, logged to logs/NAME.log; its pid.
# Its standard input is /dev/null (DlockHA::Procs's default): Patroni hands
# its own to the postmaster, and a backend that waited for a synchronous
# standby when its postmaster was killed reads its next command from there.
# At the end of /dev/null it exits; an open pipe would keep it, with the
# node's shared memory, and Patroni could not start the node again.
sub start
{
	my ($self, $name, $role, $user, $env, @cmd) = @_;
	my @env = map { "$_=$env->{$_}" } sort keys %{ $env // {} };
	return $self->{procs}->start($name, [ $self->cmd_in($role, $user, 'env', @env, @cmd) ]);
}

# by name, as DlockHA::Procs: pid_of, running, stop (SIGTERM, then SIGKILL
# after GRACE seconds; the exit status) and kill9
sub pid_of { my ($self, $name) = @_; return $self->{procs}->pid_of($name) }
sub running { my ($self, $name) = @_; return $self->{procs}->running($name) }
sub stop { my ($self, $name, $grace) = @_; return $self->{procs}->stop($name, $grace) }
sub kill9 { my ($self, $name) = @_; return $self->{procs}->kill9($name) }

sub stop_all
{
	my ($self) = @_;
	my @names = $self->{procs}->names;
	$self->heal;
	kill 'CONT', map { $self->pid_of($_) } @names;
	$self->stop($_, 10) for grep { !/^(etcd|patroni-)/ } @names;
	$self->stop($_, 60) for grep { /^patroni-/ } $self->{procs}->names;
	$self->stop($_, 10) for $self->{procs}->names;
}

# in_ns - run a command in ROLE's namespace and return its output
sub in_ns
{
	my ($self, $role, @cmd) = @_;
	my ($in, $out, $err) = (ref $cmd[-1] eq 'SCALAR' ? ${ pop @cmd } : '', '', '');
	IPC::Run::run([ $self->cmd_in($role, undef, @cmd) ], '<', \$in, '>', \$out, '2>', \$err,
		IPC::Run::timeout(30));
	die "@cmd in $role failed: $err" if $?;
	return $out;
}

# ---- PostgreSQL ----

sub conninfo
{
	my ($self, $node) = @_;
	return "host=$ADDR{$node} port=5432 dbname=postgres user=postgres connect_timeout=3";
}

# the clients' conninfo: every node, the one that takes writes; a dead TCP
# peer is noticed within seconds (unacknowledged data, then keepalives)
sub client_conninfo
{
	my $hosts = join ',', map { $ADDR{$_} } @NODES;
	return "host=$hosts port=5432 dbname=postgres user=postgres target_session_attrs=read-write "
	  . 'connect_timeout=2 tcp_user_timeout=3000 keepalives=1 keepalives_idle=1 '
	  . 'keepalives_interval=1 keepalives_count=2';
}

# psql - SQL on stdin; (ok, out, err) in list context, out otherwise
sub psql
{
	my ($self, $conninfo, $sql, $timeout) = @_;
	return DlockHA::psql($self->{bindir}, $conninfo, $sql, $timeout // 30);
}

# ---- etcd and Patroni ----

sub patroni_settings
{
	return (ttl => 10, loop_wait => 1, retry_timeout => 3, maximum_lag_on_failover => 16777216,
		primary_start_timeout => 0, failsafe_mode => 'false');
}

sub start_etcd
{
	my ($self) = @_;
	my $a = $ADDR{etcd};
	mkdir "$self->{work}/etcd";
	$self->chown("$self->{work}/etcd");
	$self->start('etcd', 'etcd', $self->{user}, {}, etcd_command($self->{etcd}, name => 'faults',
		data_dir => "$self->{work}/etcd/data", host => $a, client_port => 2379, peer_port => 2380));
	$self->poll_until('etcd answers', 30, sub { etcd_healthy("$a:2379") });
}

sub chown
{
	my ($self, @paths) = @_;
	my (undef, undef, $uid, $gid) = getpwnam($self->{user});
	chown $uid, $gid, @paths;
}

sub write_file
{
	my ($self, $path, $text, $mode) = @_;
	open my $fh, '>', $path or die "$path: $!";
	print $fh $text;
	close $fh;
	chmod $mode, $path if defined $mode;
	$self->chown($path);
}

# the node's bin_dir: the server's programs, with postgres a wrapper that
# preloads libfaketime, whose setting each process reads from a file every
# second (so that a clock can be set while the node runs).  Patroni starts
# the postmaster from bin_dir directly; the other programs are links.
sub make_bindir
{
	my ($self, $node) = @_;
	my $dir = "$self->{work}/$node/bin";
	mkdir $dir;
	opendir my $dh, $self->{bindir} or die $!;
	for my $prog (grep { !/^\./ && $_ ne 'postgres' } readdir $dh)
	{
		symlink "$self->{bindir}/$prog", "$dir/$prog" or die "$dir/$prog: $!";
	}
	closedir $dh;
	$self->write_file("$self->{work}/$node/faketime", "+0\n", 0644);
	$self->write_file("$dir/postgres", <<"EOF", 0755);
#!/bin/sh
# PostgreSQL with the node's clock set by libfaketime (test/faults)
LD_PRELOAD=$self->{faketime} FAKETIME_TIMESTAMP_FILE=$self->{work}/$node/faketime \\
FAKETIME_CACHE_DURATION=1 DONT_FAKE_MONOTONIC=1 exec $self->{bindir}/postgres "\$@"
EOF
	return $dir;
}

sub node_config
{
	my ($self, $node, $sync) = @_;
	my $a = $ADDR{$node};
	my %s = patroni_settings();
	my $w = "$self->{work}/$node";
	my $sm = $sync ? 'true' : 'false';
	return patroni_yaml(scope => 'faults', namespace => '/dlock-faults/', name => $node,
		api => "$a:8008", etcd => "$ADDR{etcd}:2379",
		dcs => [ (map { $_ => $s{$_} } qw(ttl loop_wait retry_timeout maximum_lag_on_failover
					primary_start_timeout failsafe_mode)),
			synchronous_mode => $sm, synchronous_mode_strict => $sm ],
		parameters => [ max_connections => 100, wal_log_hints => "'on'" ],
		listen => "$a:5432", data_dir => "$w/data", bin_dir => "$w/bin", pgpass => "$w/pgpass",
		superuser => 'postgres', rewind => 'postgres', socket_dir => $w, network => '10.77.0.0/24');
}

sub start_node
{
	my ($self, $node) = @_;
	$self->start("patroni-$node", $node, $self->{user}, { HOME => "$self->{work}/$node" },
		$self->{patroni}, "$self->{work}/$node/patroni.yml");
}

sub start_cluster
{
	my ($self, %a) = @_;
	$self->start_etcd;
	for my $node (@NODES)
	{
		mkdir "$self->{work}/$node";
		$self->chown("$self->{work}/$node");
		$self->make_bindir($node);
		$self->write_file("$self->{work}/$node/patroni.yml", $self->node_config($node, $a{sync}));
	}
	$self->start_node($_) for @NODES;
	$self->healthy(180, $a{sync});
}

sub poll_until { my ($self, @args) = @_; return DlockHA::poll_until(@args) }

# members, describe, leader: DlockHA::Patroni's
sub members { my ($self) = @_; return $self->{cluster}->members }
sub describe { my ($self) = @_; return $self->{cluster}->describe }
sub leader { my ($self) = @_; return $self->{cluster}->leader }

# healthy - a writable leader, two replicas streaming, and with synchronous
# mode a synchronous standby; dies after SECONDS
sub healthy
{
	my ($self, $seconds, $sync) = @_;
	$self->poll_until('a leader, two streaming replicas' . ($sync ? ' and a synchronous standby' : ''), $seconds, sub {
		my $m = $self->members;
		my $replicas = $self->{cluster}->replicas_streaming;
		my $syncs = grep { $m->{$_}{role} eq 'sync_standby' } keys %$m;
		return 0 unless $replicas == 2 && (!$sync || $syncs >= 1);
		my $l = $self->leader or return 0;
		# each replica replays from the leader's current timeline
		my $lag = $self->psql($self->conninfo($l),
			"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'", 10);
		return $lag eq '2';
	});
}

# set_mode - synchronous_mode and synchronous_mode_strict, through the
# REST API's PATCH /config; waits until the leader follows
sub set_mode
{
	my ($self, $sync) = @_;
	my $body = encode_json({ synchronous_mode => $sync ? JSON::PP::true : JSON::PP::false,
			synchronous_mode_strict => $sync ? JSON::PP::true : JSON::PP::false });
	my $l = $self->leader or die 'no leader';
	my $r = $self->{cluster}->http->request('PATCH', "http://$ADDR{$l}:8008/config", { content => $body });
	die "PATCH /config: $r->{status} $r->{content}" unless $r->{success};
	$self->poll_until('the leader follows the synchronous mode', 60, sub {
		my $l2 = $self->leader or return 0;
		my $names = $self->psql($self->conninfo($l2), 'SHOW synchronous_standby_names', 10);
		return $sync ? $names =~ /\S/ : $names eq '';
	});
	$self->healthy(120, $sync);
}

sub postmaster_pid
{
	my ($self, $node) = @_;
	return DlockHA::postmaster_pid("$self->{work}/$node/data");
}

# postgres_pids - every PostgreSQL process of the node (the postmaster and
# its children)
sub postgres_pids
{
	my ($self, $node) = @_;
	my $pm = $self->postmaster_pid($node) or return ();
	return ($pm, child_pids($pm));
}

# ---- faults ----

# nft - replace this suite's table in ROLE's namespace with RULES (lines
# of the input and output chains); no rules: the table is removed
sub nft
{
	my ($self, $role, $input, $output) = @_;
	my $text = "table inet dlfaults\ndelete table inet dlfaults\n";
	if (@{ $input // [] } || @{ $output // [] })
	{
		$text .= "table inet dlfaults {\n"
		  . "  chain input { type filter hook input priority 0; policy accept;\n"
		  . join('', map { "    $_\n" } @{ $input // [] }) . "  }\n"
		  . "  chain output { type filter hook output priority 0; policy accept;\n"
		  . join('', map { "    $_\n" } @{ $output // [] }) . "  }\n}\n";
	}
	$self->in_ns($role, 'nft', '-f', '-', \$text);
	$self->{faults}{nft}{$role} = 1;
}

# partition - GROUPS is a list of lists of roles; each role drops packets
# from and to the roles of the other groups (roles in no group, such as
# the controller, keep talking to everyone)
sub partition
{
	my ($self, @groups) = @_;
	my %rules;
	for my $g (@groups)
	{
		my @others = map { $ADDR{$_} } grep { my $r = $_; !grep { $_ eq $r } @$g } map { @$_ } @groups;
		next unless @others;
		my $set = '{ ' . join(', ', @others) . ' }';
		for my $role (@$g)
		{
			push @{ $rules{$role}{in} }, "ip saddr $set drop";
			push @{ $rules{$role}{out} }, "ip daddr $set drop";
		}
	}
	$self->nft($_, $rules{$_}{in}, $rules{$_}{out}) for keys %rules;
}

# oneway - what FROM sends to the roles TO is dropped; the other way works
sub oneway
{
	my ($self, $from, @to) = @_;
	$self->nft($from, [], [ 'ip daddr { ' . join(', ', map { $ADDR{$_} } @to) . ' } drop' ]);
}

# loss - PERCENT of the packets coming into each of ROLES are dropped
sub loss
{
	my ($self, $percent, @roles) = @_;
	$self->nft($_, [ "meta l4proto tcp numgen random mod 100 < $percent drop" ], []) for @roles;
}

# throttle - the egress of each of ROLES through a token bucket of RATE
# (tc tbf): a slow, congested link whose queue delays packets by up to
# LATENCY and drops what does not fit.  This stands in for tc netem's
# fixed delay, which kernels built without sch_netem lack.
sub throttle
{
	my ($self, $rate, $latency, @roles) = @_;
	for my $role (@roles)
	{
		$self->in_ns($role, 'tc', 'qdisc', 'replace', 'dev', 'eth0', 'root', 'tbf', 'rate', $rate,
			'burst', '16kb', 'latency', $latency);
		$self->{faults}{tc}{$role} = 1;
	}
}

# delay - every TCP packet each of ROLES sends is held MS milliseconds,
# plus up to JITTER_MS (never reordered), by a delay.c of its namespace
# (root: it answers the kernel's queue); the rule lets packets by when the
# program is not there
sub delay
{
	my ($self, $ms, $jitter, @roles) = @_;
	die 'no delay program' unless $self->{delay};
	for my $role (@roles)
	{
		$self->start("delay-$role", $role, undef, {}, $self->{delay}, 7, $ms, $jitter);
		$self->{faults}{delay}{$role} = 1;
		$self->in_ns($role, 'iptables', '-w', '-A', 'OUTPUT', '-p', 'tcp', '-j', 'NFQUEUE',
			'--queue-num', 7, '--queue-bypass');
	}
}

# pause - SIGSTOP to the pids; resume (or heal) sends SIGCONT
sub pause
{
	my ($self, @pids) = @_;
	@pids = grep { defined } @pids;
	kill 'STOP', @pids;
	push @{ $self->{faults}{paused} }, @pids;
}

sub resume
{
	my ($self) = @_;
	my @pids = @{ delete $self->{faults}{paused} // [] };
	kill 'CONT', @pids if @pids;
}

# clock - the node's PostgreSQL clock, as libfaketime reads it: "+5"
# (ahead by 5 s), "-3.5", "+0 x1.05" (from now on 5 % fast)
sub clock
{
	my ($self, $node, $spec) = @_;
	$self->write_file("$self->{work}/$node/faketime", "$spec\n", 0644);
	$self->{faults}{clock}{$node} = 1;
}

# heal - undo every network, pause and clock fault
sub heal
{
	my ($self) = @_;
	$self->resume;
	for my $role (keys %{ $self->{faults}{nft} // {} })
	{
		eval { $self->nft($role); 1 } or warn $@;
	}
	delete $self->{faults}{nft};
	for my $role (keys %{ $self->{faults}{tc} // {} })
	{
		eval { $self->in_ns($role, 'tc', 'qdisc', 'del', 'dev', 'eth0', 'root'); 1 } or warn $@;
	}
	delete $self->{faults}{tc};
	for my $role (keys %{ $self->{faults}{delay} // {} })
	{
		eval { $self->in_ns($role, 'iptables', '-w', '-F', 'OUTPUT'); 1 } or warn $@;
		$self->stop("delay-$role", 5);
	}
	delete $self->{faults}{delay};
	for my $node (keys %{ $self->{faults}{clock} // {} })
	{
		$self->write_file("$self->{work}/$node/faketime", "+0\n", 0644);
	}
	delete $self->{faults}{clock};
}

1;
