/*
 * run.c
 *	  dlock run: run a command as a child under a lease, renewing the lease
 *	  in the background and stopping the child as soon as the lease may be
 *	  lost.
 *
 * Timekeeping is on the client's monotonic clock, never on its wall clock:
 * after each successful acquire or renew, sent at local time t, the lease is
 * taken to be valid until t + (the remaining ttl the server reported) - a
 * drift allowance (1 % of the ttl + 2 ms, as Redlock clients compute it) - a
 * safety margin (a tenth of the ttl, at most 1 s).  Measuring from the moment
 * the request was *sent* errs on the safe side: the server's clock started
 * the ttl later than that.  A --ttl so short that this leaves the lease no
 * validity past the first renew at ttl/3 is refused as a usage error: the
 * child would count as lost the moment it started.
 *
 * The lease counts as lost when a renew says it is gone, or when that
 * validity deadline passes without a successful renew (the server is slow,
 * unreachable or restarting).  Then the child's process group gets SIGTERM
 * at once and SIGKILL after --kill-after.  Queries and connection attempts
 * are asynchronous and waited for with that deadline, so a server that does
 * not answer cannot hold the client past it.  A lost connection is
 * re-established with backoff while the lease may still be valid; a
 * session-bound lease ends with its connection, so for it a lost connection
 * is a lost lease.
 *
 * Waiting: --wait bounds all of the time before the child starts, reaching
 * the server as well as waiting for the lease.  Within it, a server that is
 * down at the start, or a wait cut by a restart, a failover or a terminated
 * backend, is retried with the same backoff (0.1 s doubling to 2 s), and
 * dlock.acquire is called again with what is left of the budget; libpq's
 * multi-host conninfo (host=a,b target_session_attrs=read-write) finds the
 * new primary.  Before the first connection the budget comes from the
 * client's own reading of the interval text; the server's reading replaces
 * it once connected.  Without --owner the client makes up the owner itself,
 * so that an acquire whose reply was lost with the connection can simply be
 * repeated: the same owner gets its own live lease back, with the same
 * token, instead of waiting behind it.  When the budget is spent, dlock
 * exits 69 if the server is still out of reach, or with the conflict exit
 * code if it answered that the lease is busy.  With the default --wait 0 a
 * server that is down is tried once, and the lease is asked for once with
 * dlock.try_acquire, which dlock.stats counts as a refusal when the lease is
 * busy; dlock.acquire, which counts a timeout when its wait runs out, is
 * for a run that waits.
 *
 * Busy: a run that exits with the conflict exit code says so on stderr in
 * one line, unless --quiet: the lease, and its live holders (or the lease
 * whose lock-delay runs) as dlock.leases shows them to the caller, with
 * their expiry; the owner only where dlock.leases shows it, that is to
 * roles with the privileges of the holder's role.  The holders are read
 * just after the refusal, with the same connection.
 *
 * Polling (--poll, behind a transaction pooler): try_acquire(..., queue =>
 * true) every --poll instead of one waiting acquire().  The server keeps the
 * poller's place in the queue for ttl from each poll, so a --poll longer
 * than a lease's validity after a renew (ttl less the drift allowance and
 * the safety margin) is refused as a usage error: the place would lapse
 * between polls, and an acquire() that came later would be served first.
 * A refusal is no row from a server at version 1.2 and a row of NULLs from
 * one at 1.0 or 1.1: the client reads both as busy.
 *
 * Signals before the child starts: SIGINT, SIGTERM, SIGHUP or SIGQUIT while
 * dlock connects or waits end the run at once.  The waiting dlock.acquire is
 * cancelled, and its answer awaited briefly, so that no waiter is left in
 * the server's queue (closing the connection would not do: the server
 * notices a vanished client only with client_connection_check_interval); a
 * lease granted at that very moment is released; nothing is run, and dlock
 * exits with 128 + the signal number.
 *
 * Signals while the child runs: forwarded to the child's process group;
 * dlock keeps renewing until the child exits, then releases the lease and
 * exits with the child's status.  The handled signals are blocked across
 * fork, and the child sets them back to their default action before it
 * unblocks them, so a signal that arrives between fork and exec is neither
 * swallowed by a copy of dlock's handler nor lost: the child gets it as soon
 * as it can act on it.
 *
 * Death of dlock: on Linux the child is given SIGTERM as its parent-death
 * signal (PR_SET_PDEATHSIG), so that when dlock is killed (SIGKILL, the OOM
 * killer) the child does not run on with nobody renewing its lease; a child
 * whose dlock died before that was set exits before exec.  This reaches the
 * direct child only, not its process group: a child that starts processes
 * of its own has to stop them when it gets SIGTERM.  The signal is not sent
 * to a set-user-ID or set-group-ID command.
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "dlock_cli.h"

#define RETRY_FIRST_S	0.1
#define RETRY_LAST_S	2.0

/* how long a cancelled acquire may take to answer before we hang up */
#define CANCEL_WAIT_S	2.0

/* how long past the --wait budget the server may take to answer an acquire */
#define ANSWER_GRACE_S	10.0

/* signals dlock handles; the child gets them back at their default action */
static const int handled_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};

#define N_HANDLED_SIGNALS (sizeof(handled_signals) / sizeof(handled_signals[0]))

static int	signal_pipe[2] = {-1, -1};
static volatile sig_atomic_t pending_signal = 0;

/* the last connection failure, for the message when dlock gives up */
static char connect_error[512] = "";

typedef struct Lease
{
	char	   *owner;			/* NULL until known: the server picks one */
	char	   *token;
	char	   *expires_at;
	double		ttl_s;
	double		valid_until;	/* monotonic seconds */
	double		next_renew;		/* monotonic seconds */
	double		retry_s;		/* current reconnect backoff */
	PGcancel   *late_cancel;	/* a renew left at its deadline, to cancel
								 * once the command is stopped */
} Lease;

typedef enum QueryOutcome
{
	QUERY_DONE,					/* a result (maybe an error) is in *res */
	QUERY_DEADLINE,				/* no answer before the deadline */
	QUERY_BROKEN,				/* the connection failed */
	QUERY_SIGNALLED				/* a signal ended the wait; *res is the
								 * cancelled query's answer, if it came */
} QueryOutcome;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * poll_timeout - milliseconds from now to deadline for poll(): -1 for no
 * deadline, and at most an hour, since callers look at the clock again
 */
static int
poll_timeout(double deadline)
{
	double		left = deadline - now_s();

	if (isinf(deadline))
		return -1;
	return (int) fmax(0, fmin(ceil(left * 1000), 3600 * 1000));
}

static void
on_signal(int sig)
{
	int			saved_errno = errno;

	if (sig != SIGCHLD)
		pending_signal = sig;
	/* wake the poll loop; a full pipe already has a wake-up in it */
	(void) !write(signal_pipe[1], "x", 1);
	errno = saved_errno;
}

static void
install_handlers(void)
{
	struct sigaction sa;

	if (pipe(signal_pipe) != 0)
	{
		complain("could not create a pipe: %s", strerror(errno));
		exit(EXIT_SOFTWARE);
	}
	for (int i = 0; i < 2; i++)
	{
		fcntl(signal_pipe[i], F_SETFL, fcntl(signal_pipe[i], F_GETFL) | O_NONBLOCK);
		fcntl(signal_pipe[i], F_SETFD, FD_CLOEXEC);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < N_HANDLED_SIGNALS; i++)
		sigaction(handled_signals[i], &sa, NULL);
}

static void
drain_signal_pipe(void)
{
	char		buf[64];

	while (read(signal_pipe[0], buf, sizeof(buf)) > 0)
		;
}

static void
signal_child(pid_t child, int sig)
{
	/* the whole process group: the child and whatever it started */
	if (kill(-child, sig) != 0 && errno == ESRCH)
		kill(child, sig);
}

/* forward_pending_signal - pass a signal sent to dlock on to the child */
static void
forward_pending_signal(pid_t child)
{
	int			sig = pending_signal;

	if (sig != 0 && child > 0)
	{
		pending_signal = 0;
		info("forwarding signal %d to the command", sig);
		signal_child(child, sig);
	}
}

/*
 * woken - the signal pipe was readable: empty it and forward a signal to a
 * running child; true when a signal should end what the caller waits for
 *
 * The handler sets pending_signal before it writes to the pipe, so a signal
 * that comes after the pipe was emptied wakes the next poll.
 */
static bool
woken(pid_t child, bool stop_on_signal)
{
	drain_signal_pipe();
	forward_pending_signal(child);
	return stop_on_signal && pending_signal != 0;
}

/*
 * sleep_until - sleep until deadline; false if a signal cut the sleep short
 * (there is no child yet, so a signal ends the wait)
 */
static bool
sleep_until(double deadline)
{
	while (pending_signal == 0 && now_s() < deadline)
	{
		struct pollfd fds[1];

		fds[0].fd = signal_pipe[0];
		fds[0].events = POLLIN;
		if (poll(fds, 1, poll_timeout(deadline)) > 0 && woken(0, true))
			return false;
	}
	return pending_signal == 0;
}

/* remember_connect_error - keep why the server was lost, on one line */
static void
remember_connect_error(const char *message)
{
	size_t		len;

	snprintf(connect_error, sizeof(connect_error), "%s", message);
	len = strlen(connect_error);
	while (len > 0 && connect_error[len - 1] == '\n')
		connect_error[--len] = '\0';
}

/*
 * connect_once - one connection attempt (every host of a multi-host
 * conninfo), given up at deadline, or at a signal when stop_on_signal;
 * signals for a running child are forwarded meanwhile.  A deadline already
 * passed sets no limit: the attempt then takes what libpq lets it.
 */
static PGconn *
connect_once(const char *dbname, double deadline, pid_t child, bool stop_on_signal)
{
	PGconn	   *conn = db_connect_start(dbname);
	PostgresPollingStatusType state = PGRES_POLLING_WRITING;

	if (conn == NULL)
	{
		remember_connect_error("out of memory");
		return NULL;
	}
	if (deadline <= now_s())
		deadline = INFINITY;

	while (PQstatus(conn) != CONNECTION_BAD && state != PGRES_POLLING_FAILED)
	{
		struct pollfd fds[2];

		if (state == PGRES_POLLING_OK)
			return conn;
		if (now_s() >= deadline)
		{
			remember_connect_error("timed out");
			info("could not connect: %s", connect_error);
			PQfinish(conn);
			return NULL;
		}
		if (stop_on_signal && pending_signal != 0)
		{
			PQfinish(conn);
			return NULL;
		}
		/* the socket changes as libpq moves from host to host */
		fds[0].fd = PQsocket(conn);
		fds[0].events = state == PGRES_POLLING_READING ? POLLIN : POLLOUT;
		fds[0].revents = 0;
		fds[1].fd = signal_pipe[0];
		fds[1].events = POLLIN;
		fds[1].revents = 0;
		if (poll(fds, 2, poll_timeout(deadline)) < 0 && errno != EINTR)
			break;
		if (fds[1].revents & POLLIN)
			(void) woken(child, stop_on_signal);
		if (fds[0].revents != 0)
			state = PQconnectPoll(conn);
	}
	remember_connect_error(PQerrorMessage(conn));
	info("could not connect: %s", connect_error);
	PQfinish(conn);
	return NULL;
}

/*
 * connect_until - connect, retrying with backoff until deadline; NULL when
 * the deadline passed, or a signal came, without a connection.  One attempt
 * is made even when the deadline has passed.
 */
static PGconn *
connect_until(const char *dbname, double deadline)
{
	double		backoff = RETRY_FIRST_S;

	for (;;)
	{
		PGconn	   *conn = connect_once(dbname, deadline, 0, true);
		double		pause;

		if (conn != NULL || pending_signal != 0)
			return conn;
		pause = fmin(backoff, deadline - now_s());
		if (pause <= 0)
			return NULL;
		info("retrying in %.1fs", pause);
		if (!sleep_until(now_s() + pause))
			return NULL;
		backoff = fmin(backoff * 2, RETRY_LAST_S);
	}
}

/* cancel_query - ask the server to cancel what conn is running */
static void
cancel_query(PGconn *conn)
{
	PGcancel   *cancel = PQgetCancel(conn);
	char		errbuf[256];

	if (cancel != NULL)
	{
		PQcancel(cancel, errbuf, sizeof(errbuf));
		PQfreeCancel(cancel);
	}
}

/*
 * query_until - run a parameterized query, waiting at most until deadline
 * (monotonic seconds).  Signals for a running child are forwarded
 * meanwhile; with stop_on_signal a signal cancels the query instead.  At
 * the deadline the query is cancelled, unless cancel_at_deadline is false:
 * a cancel waits for the server with no limit of its own (PQcancel), which
 * a caller that must stop its command by the deadline cannot afford first.
 */
static QueryOutcome
query_until(PGconn *conn, const char *sql, int nparams, const char *const *params,
			double deadline, pid_t child, bool stop_on_signal, bool cancel_at_deadline,
			PGresult **res)
{
	QueryOutcome outcome = QUERY_DONE;	/* or QUERY_SIGNALLED, once it is */

	*res = NULL;
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK ||
		!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
		return QUERY_BROKEN;

	for (;;)
	{
		struct pollfd fds[2];

		if (!PQconsumeInput(conn))
			return outcome == QUERY_SIGNALLED ? outcome : QUERY_BROKEN;
		if (!PQisBusy(conn))
			break;
		if (outcome == QUERY_DONE && stop_on_signal && pending_signal != 0)
		{
			/*
			 * Wait a little for the answer to the cancel, so that the server
			 * has ended the query when we go, and a grant that came first is
			 * seen and can be given back.
			 */
			cancel_query(conn);
			outcome = QUERY_SIGNALLED;
			deadline = now_s() + CANCEL_WAIT_S;
			stop_on_signal = false;
		}
		if (now_s() >= deadline)
		{
			if (outcome == QUERY_SIGNALLED)
				return outcome;
			if (cancel_at_deadline)
				cancel_query(conn);
			return QUERY_DEADLINE;
		}
		fds[0].fd = PQsocket(conn);
		fds[0].events = POLLIN;
		fds[1].fd = signal_pipe[0];
		fds[1].events = POLLIN;
		fds[1].revents = 0;
		if (poll(fds, 2, poll_timeout(deadline)) < 0 && errno != EINTR)
			return outcome == QUERY_SIGNALLED ? outcome : QUERY_BROKEN;
		if (fds[1].revents & POLLIN)
		{
			/* a SIGCHLD is seen again by the main loop through waitpid */
			(void) woken(child, stop_on_signal);
		}
	}

	/*
	 * One statement: the first result is the answer, then NULL, unless an
	 * error follows it.  The rows of an autocommit statement arrive before
	 * its commit; an error after them (the backend terminated while its
	 * commit waited for a synchronous standby, the connection cut) means
	 * the statement may not be durable, and a renewal that may be lost in a
	 * failover must not extend the lease: the error is the answer.
	 */
	*res = PQgetResult(conn);
	for (PGresult *extra; (extra = PQgetResult(conn)) != NULL;)
	{
		if (*res != NULL && PQresultStatus(*res) != PGRES_FATAL_ERROR &&
			PQresultStatus(extra) == PGRES_FATAL_ERROR)
		{
			PQclear(*res);
			*res = extra;
		}
		else
			PQclear(extra);
	}
	if (*res == NULL && outcome == QUERY_DONE)
		return QUERY_BROKEN;
	return outcome;
}

/*
 * connection_lost - did this failed query fail because the server went away
 * (a restart, a failover, a terminated backend) rather than on its own?
 */
static bool
connection_lost(PGconn *conn, PGresult *res)
{
	const char *state = db_sqlstate(res);

	/* errors libpq makes up itself, such as a closed connection, have none */
	return PQstatus(conn) != CONNECTION_OK || state[0] == '\0' ||
		strncmp(state, "08", 2) == 0 ||	/* connection_exception */
		strcmp(state, "57P01") == 0 ||	/* admin_shutdown */
		strcmp(state, "57P02") == 0 ||	/* crash_shutdown */
		strcmp(state, "57P03") == 0;	/* cannot_connect_now */
}

/* validity_s - how long after sending a request a lease is taken to be valid */
static double
validity_s(double ttl_s, double remaining_s)
{
	double		drift = ttl_s * 0.01 + 0.002;
	double		margin = fmin(ttl_s / 10, 1.0);

	return remaining_s - drift - margin;
}

/* set_validity - a renew or acquire sent at sent_at succeeded */
static void
set_validity(Lease *lease, double sent_at, double remaining_s)
{
	lease->valid_until = sent_at + validity_s(lease->ttl_s, remaining_s);
	lease->next_renew = sent_at + lease->ttl_s / 3;
	lease->retry_s = RETRY_FIRST_S;
}

static char *
copy_value(PGresult *res, int col)
{
	return strdup(PQgetvalue(res, 0, col));
}

/*
 * random_owner - 32 hex digits from the system's random source, like the
 * owners the server makes up; NULL if there is none (then the server picks)
 */
static char *
random_owner(void)
{
	unsigned char bytes[16];
	char	   *owner;
	FILE	   *f = fopen("/dev/urandom", "rb");
	size_t		got = f != NULL ? fread(bytes, 1, sizeof(bytes), f) : 0;

	if (f != NULL)
		fclose(f);
	if (got != sizeof(bytes) || (owner = malloc(2 * sizeof(bytes) + 1)) == NULL)
		return NULL;
	for (size_t i = 0; i < sizeof(bytes); i++)
		sprintf(owner + 2 * i, "%02x", bytes[i]);
	return owner;
}

/*
 * spawn_child - start the command in its own process group.  Returns the
 * child's pid; -1 if fork failed; 0 if a signal came before the fork, in
 * which case nothing was started.
 */
static pid_t
spawn_child(const RunOptions *opts, const Lease *lease)
{
	pid_t		parent = getpid();
	pid_t		child;
	sigset_t	handled;
	sigset_t	saved_mask;

	setenv("DLOCK_NAME", opts->name, 1);
	setenv("DLOCK_TOKEN", lease->token, 1);
	setenv("DLOCK_OWNER", lease->owner, 1);
	setenv("DLOCK_EXPIRES_AT", lease->expires_at, 1);

	/*
	 * Until the child has its own dispositions, a signal must wait: in the
	 * child it would run our handler, which only sets a flag in the child's
	 * copy of dlock.  Blocked, it is delivered after the reset instead.
	 */
	sigemptyset(&handled);
	for (size_t i = 0; i < N_HANDLED_SIGNALS; i++)
		sigaddset(&handled, handled_signals[i]);
	sigprocmask(SIG_BLOCK, &handled, &saved_mask);
	if (pending_signal != 0)
	{
		sigprocmask(SIG_SETMASK, &saved_mask, NULL);
		return 0;
	}

	child = fork();
	if (child < 0)
	{
		complain("could not fork: %s", strerror(errno));
		sigprocmask(SIG_SETMASK, &saved_mask, NULL);
		return -1;
	}
	if (child == 0)
	{
		struct sigaction sa;

		setpgid(0, 0);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = SIG_DFL;
		for (size_t i = 0; i < N_HANDLED_SIGNALS; i++)
			sigaction(handled_signals[i], &sa, NULL);
#ifdef __linux__
		/* nobody renews the lease once dlock is gone: stop with it */
		(void) prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
		/* dlock died before that took effect: do not start at all */
		if (getppid() != parent)
			_exit(128 + SIGTERM);
		sigprocmask(SIG_SETMASK, &saved_mask, NULL);
		execvp(opts->command[0], opts->command);
		fprintf(stderr, "%s: could not run \"%s\": %s\n", progname,
				opts->command[0], strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	/* also here, so that signalling the group cannot race the child's setpgid */
	setpgid(child, child);
	/* a signal that came meanwhile is now handled, and forwarded */
	sigprocmask(SIG_SETMASK, &saved_mask, NULL);
	return child;
}

static int
child_exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return EXIT_SOFTWARE;
}

/*
 * parse_duration - the common forms of interval text, read on the client:
 * a bare number of seconds, or numbers with units ('500ms', '20s',
 * '1 min 30 s', '2h', '1d').  It only bounds the connection retries before
 * the server can read the text; false for anything else.
 */
static bool
parse_duration(const char *text, double *seconds)
{
	static const struct
	{
		const char *unit;
		double		seconds;
	}			units[] = {
		{"us", 1e-6}, {"usec", 1e-6}, {"usecs", 1e-6},
		{"microsecond", 1e-6}, {"microseconds", 1e-6},
		{"ms", 1e-3}, {"msec", 1e-3}, {"msecs", 1e-3},
		{"millisecond", 1e-3}, {"milliseconds", 1e-3},
		{"s", 1}, {"sec", 1}, {"secs", 1}, {"second", 1}, {"seconds", 1},
		{"m", 60}, {"min", 60}, {"mins", 60}, {"minute", 60}, {"minutes", 60},
		{"h", 3600}, {"hr", 3600}, {"hrs", 3600}, {"hour", 3600}, {"hours", 3600},
		{"d", 86400}, {"day", 86400}, {"days", 86400},
		{"w", 604800}, {"week", 604800}, {"weeks", 604800}
	};
	const char *p = text;
	double		total = 0;
	bool		any = false;

	for (;;)
	{
		char	   *end;
		double		n;
		size_t		len = 0;
		bool		known = false;

		while (isspace((unsigned char) *p))
			p++;
		if (*p == '\0')
			break;
		n = strtod(p, &end);
		if (end == p || !isfinite(n) || n < 0)
			return false;
		p = end;
		while (isspace((unsigned char) *p))
			p++;
		while (isalpha((unsigned char) p[len]))
			len++;
		if (len == 0)
		{
			/* a bare number is seconds, and must stand alone */
			if (any || *p != '\0')
				return false;
			total = n;
			any = true;
			break;
		}
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		{
			if (strlen(units[i].unit) == len && strncasecmp(p, units[i].unit, len) == 0)
			{
				total += n * units[i].seconds;
				known = true;
				break;
			}
		}
		if (!known)
			return false;
		p += len;
		any = true;
	}
	if (!any)
		return false;
	*seconds = total;
	return true;
}

/* check_duration - parse an interval option on the server; exit 64 if bad */
static double
check_duration(PGconn *conn, const char *option, const char *text, bool positive)
{
	double		seconds;

	if (!db_duration(conn, text, &seconds) || seconds < 0 || (positive && seconds <= 0))
	{
		/* not the text's fault when the server went away just now */
		if (PQstatus(conn) != CONNECTION_OK)
		{
			complain("lost the connection to the database: %s", PQerrorMessage(conn));
			PQfinish(conn);
			exit(EXIT_UNAVAILABLE);
		}
		complain("invalid %s \"%s\": give a %s PostgreSQL interval such as 30s or '5 min'",
				 option, text, positive ? "positive" : "non-negative");
		PQfinish(conn);
		exit(EXIT_USAGE);
	}
	return seconds;
}

/* stopped - the run ends on a signal before the command was started */
static int
stopped(const RunOptions *opts)
{
	int			sig = pending_signal;

	complain("signal %d before the command started; not running it (lease \"%s\")",
			 sig, opts->name);
	return 128 + sig;
}

/*
 * describe_holder - append one holder of a busy lease to buf: "owner O of
 * role R until T (in S s)"; dlock.leases shows the owner only to roles
 * with the holder role's privileges, so for others "a holder of role R"
 */
static void
describe_holder(char *buf, size_t size, const PGresult *res, int row)
{
	size_t		len = strlen(buf);

	if (PQgetisnull(res, row, 0))
		len += snprintf(buf + len, size - len, "a holder of role %s",
						PQgetvalue(res, row, 1));
	else
		len += snprintf(buf + len, size - len, "owner %s of role %s",
						PQgetvalue(res, row, 0), PQgetvalue(res, row, 1));
	if (len < size)
		snprintf(buf + len, size - len, " until %s (in %s s)",
				 PQgetvalue(res, row, 3), PQgetvalue(res, row, 4));
}

/*
 * say_busy - the one line of a run that did not get the lease, on stderr
 * unless --quiet: which lease, and, as far as dlock.leases shows them to
 * this role, who holds it and until when.  The holders are read after the
 * refusal, so they may have changed meanwhile; without a connection (conn
 * NULL or broken) or an answer the line names the lease only.
 */
static void
say_busy(PGconn *conn, const RunOptions *opts)
{
	const char *params[1] = {opts->name};
	PGresult   *res = NULL;
	char		line[1024] = "";
	int			rows = 0;

	if (verbosity == VERBOSITY_QUIET)
		return;

	/* live holders first, newest first; else a lease in its lock-delay */
	if (conn != NULL &&
		query_until(conn,
					"SELECT owner, holder_role::text, state,"
					"       to_char(t, 'YYYY-MM-DD HH24:MI:SS.MSOF'),"
					"       round(extract(epoch FROM t - clock_timestamp())::numeric, 1)::text,"
					"       count(*) FILTER (WHERE state = 'live') OVER ()"
					"  FROM dlock.leases,"
					"       LATERAL (SELECT CASE WHEN state = 'live' THEN expires_at"
					"                            ELSE grantable_at END AS t) u"
					" WHERE name = $1"
					"   AND (state = 'live' OR grantable_at > clock_timestamp())"
					" ORDER BY state <> 'live', token DESC"
					" LIMIT 3",
					1, params, now_s() + CANCEL_WAIT_S, 0, false, true, &res) == QUERY_DONE &&
		db_result_ok(res))
		rows = PQntuples(res);

	if (rows == 0)
		snprintf(line, sizeof(line), "%s",
				 res == NULL || !db_result_ok(res) ? "" :
				 ": it has no holder now (others wait for it ahead, or it has just been freed)");
	else if (strcmp(PQgetvalue(res, 0, 5), "0") == 0)
	{
		/* no live holder: the last lease ended and its lock-delay runs */
		snprintf(line, sizeof(line), ": its last lease (%s %s) %s, and its lock-delay runs "
				 "until %s (in %s s)",
				 PQgetisnull(res, 0, 0) ? "of role" : "owner",
				 PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 1) : PQgetvalue(res, 0, 0),
				 strcmp(PQgetvalue(res, 0, 2), "expired") == 0 ? "expired" :
				 strcmp(PQgetvalue(res, 0, 2), "force_released") == 0 ? "was force-released" :
				 "ended",
				 PQgetvalue(res, 0, 3), PQgetvalue(res, 0, 4));
	}
	else
	{
		long		holders = strtol(PQgetvalue(res, 0, 5), NULL, 10);
		int			shown = 0;

		snprintf(line, sizeof(line), ": held by ");
		if (holders > 1)
			snprintf(line + strlen(line), sizeof(line) - strlen(line), "%ld holders: ", holders);
		for (; shown < rows && strcmp(PQgetvalue(res, shown, 2), "live") == 0; shown++)
		{
			if (shown > 0)
				strncat(line, "; ", sizeof(line) - strlen(line) - 1);
			describe_holder(line, sizeof(line), res, shown);
		}
		if (holders > shown)
			snprintf(line + strlen(line), sizeof(line) - strlen(line), "; and %ld more",
					 holders - shown);
	}
	/* one line, whatever the owners and role names hold */
	for (char *c = line; *c; c++)
		if ((unsigned char) *c < 0x20)
			*c = '?';
	note("lease \"%s\" is busy%s", opts->name, line);
	PQclear(res);
}

/* release - give the lease back */
static void
release(PGconn **conn, const RunOptions *opts, Lease *lease)
{
	const char *params[2] = {opts->name, lease->owner};
	PGresult   *res = NULL;

	if (*conn == NULL || PQstatus(*conn) != CONNECTION_OK)
	{
		PQfinish(*conn);
		*conn = connect_once(opts->dbname, now_s() + 10, 0, false);
	}
	if (*conn != NULL &&
		query_until(*conn, "SELECT dlock.release($1, $2)", 2, params,
					now_s() + 10, 0, false, true, &res) == QUERY_DONE && db_result_ok(res))
	{
		if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
			info("released lease \"%s\"", opts->name);
		else
			complain("lease \"%s\" was no longer held when the command ended", opts->name);
	}
	else
		complain("could not release lease \"%s\"; it ends at its expiry", opts->name);
	PQclear(res);
}

/*
 * granted - did this answer of try_acquire or acquire grant the lease?  A
 * refusal of try_acquire is no row from a server at version 1.2 (it
 * returns SETOF dlock.lease), and a row whose token is NULL from one at
 * 1.0 or 1.1.
 */
static bool
granted(PGresult *res)
{
	return db_result_ok(res) && PQntuples(res) == 1 && !PQgetisnull(res, 0, 1);
}

/* took_lease - fill in the lease from a successful acquire sent at sent_at */
static void
took_lease(PGresult *res, double sent_at, const RunOptions *opts, Lease *lease)
{
	free(lease->owner);
	lease->owner = copy_value(res, 0);
	lease->token = copy_value(res, 1);
	lease->expires_at = copy_value(res, 2);
	set_validity(lease, sent_at, strtod(PQgetvalue(res, 0, 3), NULL));
	info("acquired lease \"%s\" with token %s, owner %s", opts->name, lease->token, lease->owner);
}

/*
 * lease_arguments - the named arguments of try_acquire or acquire that
 * were asked for, appended to params (from *nparams on) and to sql, so
 * that a server at version 1.0, which lacks them, still works when they
 * are not used
 */
static void
lease_arguments(const RunOptions *opts, char *sql, size_t size,
				const char **params, int *nparams)
{
	size_t		len = strlen(sql);

	if (opts->value != NULL)
	{
		params[(*nparams)++] = opts->value;
		len += snprintf(sql + len, size - len, ", value => $%d", *nparams);
	}
	if (opts->shared)
	{
		params[(*nparams)++] = "true";
		len += snprintf(sql + len, size - len, ", shared => $%d::boolean", *nparams);
	}
	if (opts->max_holders != NULL)
	{
		params[(*nparams)++] = opts->max_holders;
		snprintf(sql + len, size - len, ", max_holders => $%d::integer", *nparams);
	}
}

/*
 * acquire_by_polling - take the lease with try_acquire(..., queue => true)
 * every poll_s until wait_deadline, holding no server connection between
 * polls (behind a transaction pooler); the place in the queue is given up
 * when the wait ends without the lease.  Returns as acquire() does.
 *
 * Polls are sent poll_s apart, counted from when the previous one was
 * sent, so that a slow answer does not stretch the time between them: the
 * caller has made sure that poll_s keeps the place alive (the server keeps
 * it for ttl from each poll).  A poll delayed by a lost connection may
 * find the place lapsed; the poller then takes a new place at the back.
 */
static int
acquire_by_polling(PGconn **conn, const RunOptions *opts, Lease *lease,
				   double wait_deadline, double poll_s)
{
	for (;;)
	{
		const char *params[9] = {
			opts->name, opts->ttl, lease->owner, opts->lock_delay,
			opts->session_bound ? "true" : "false"
		};
		int			nparams = 5;
		char		sql[512] = "SELECT owner, token, expires_at,"
			"       extract(epoch FROM expires_at - clock_timestamp())"
			"  FROM dlock.try_acquire($1, $2::interval, $3, $4::interval,"
			"                         $5::boolean, queue => true";
		double		sent_at;
		double		next_poll;
		PGresult   *res;
		QueryOutcome outcome;

		if (pending_signal != 0)
		{
			release(conn, opts, lease);		/* gives up the place */
			return stopped(opts);
		}
		if (*conn == NULL)
		{
			*conn = connect_until(opts->dbname, wait_deadline);
			if (pending_signal != 0)
				return stopped(opts);
			if (*conn == NULL)
			{
				complain("could not reach the database before --wait ran out: %s", connect_error);
				return EXIT_UNAVAILABLE;
			}
		}
		lease_arguments(opts, sql, sizeof(sql), params, &nparams);
		strncat(sql, ")", sizeof(sql) - strlen(sql) - 1);
		sent_at = now_s();
		outcome = query_until(*conn, sql, nparams, params,
							  now_s() + ANSWER_GRACE_S + lease->ttl_s, 0, true, true, &res);

		/* a refusal, in either form (see granted), is "busy" */
		if (outcome == QUERY_DONE && granted(res))
		{
			took_lease(res, sent_at, opts, lease);
			PQclear(res);
			return EXIT_OK;
		}
		if (outcome == QUERY_DONE && !db_result_ok(res) && !connection_lost(*conn, res))
		{
			const char *state = db_sqlstate(res);

			complain("could not acquire lease \"%s\": %s", opts->name, PQresultErrorMessage(res));
			PQclear(res);
			return strncmp(state, "22", 2) == 0 ? EXIT_USAGE : EXIT_SOFTWARE;
		}
		PQclear(res);
		if (outcome != QUERY_DONE || PQstatus(*conn) != CONNECTION_OK)
		{
			PQfinish(*conn);
			*conn = NULL;
		}
		/* from when this poll was sent: the server's ttl started later */
		next_poll = sent_at + poll_s;
		if (next_poll > wait_deadline)
		{
			say_busy(*conn, opts);
			release(conn, opts, lease);		/* gives up the place */
			return opts->conflict_exit_code;
		}
		info("lease \"%s\" is busy; polling again in %.3f s", opts->name,
			 fmax(0, next_poll - now_s()));
		if (!sleep_until(next_poll))
			continue;			/* a signal: handled at the top */
	}
}

/*
 * acquire - take the lease, waiting until wait_deadline (INFINITY: no limit)
 * and reconnecting meanwhile as needed.  Returns 0 with the lease held, or
 * the exit code of a run that ends without it.  *conn is NULL or connected.
 *
 * A run that is not to wait at all (try_once: --wait 0, the default) asks
 * with dlock.try_acquire, not with dlock.acquire(timeout => 0): the answer
 * is the same, but the server counts a refused try_acquire in dlock.stats
 * as a refusal and an acquire that ran out of time as a timeout, and a
 * cron job that finds its name busy has been refused, not timed out.
 */
static int
acquire(PGconn **conn, const RunOptions *opts, Lease *lease, double wait_deadline,
		bool try_once)
{
	for (;;)
	{
		char		timeout[64];
		const char *params[9] = {opts->name, opts->ttl, lease->owner};
		int			nparams = 3;
		char		sql[512] = "SELECT owner, token, expires_at,"
			"       extract(epoch FROM expires_at - clock_timestamp())";
		double		sent_at;
		PGresult   *res;
		QueryOutcome outcome;

		if (pending_signal != 0)
			return stopped(opts);
		if (*conn == NULL)
		{
			if (now_s() >= wait_deadline)
			{
				complain("lost the connection to the database while waiting for lease \"%s\", "
						 "and --wait ran out: %s", opts->name, connect_error);
				return EXIT_UNAVAILABLE;
			}
			*conn = connect_until(opts->dbname, wait_deadline);
			if (pending_signal != 0)
				return stopped(opts);
			if (*conn == NULL)
			{
				complain("could not reach the database before --wait ran out: %s", connect_error);
				return EXIT_UNAVAILABLE;
			}
			info("reconnected");
		}

		if (try_once)
			strncat(sql, "  FROM dlock.try_acquire($1, $2::interval, $3, $4::interval,"
					"                         $5::boolean",
					sizeof(sql) - strlen(sql) - 1);
		else
		{
			/* what is left of the budget; NULL waits without limit */
			params[nparams++] = NULL;
			if (!isinf(wait_deadline))
			{
				snprintf(timeout, sizeof(timeout), "%.6f seconds",
						 fmax(0, wait_deadline - now_s()));
				params[nparams - 1] = timeout;
			}
			strncat(sql, "  FROM dlock.acquire($1, $2::interval, $3, $4::interval,"
					"                     $5::interval, $6::boolean",
					sizeof(sql) - strlen(sql) - 1);
		}
		params[nparams++] = opts->lock_delay;
		params[nparams++] = opts->session_bound ? "true" : "false";
		lease_arguments(opts, sql, sizeof(sql), params, &nparams);
		strncat(sql, ")", sizeof(sql) - strlen(sql) - 1);
		sent_at = now_s();
		outcome = query_until(*conn, sql, nparams, params,
							  wait_deadline + ANSWER_GRACE_S, 0, true, true, &res);

		if (outcome == QUERY_SIGNALLED)
		{
			/* the grant won the race with the cancel: give it back */
			if (granted(res))
			{
				took_lease(res, sent_at, opts, lease);
				release(conn, opts, lease);
			}
			PQclear(res);
			return stopped(opts);
		}
		if (outcome == QUERY_DONE && granted(res))
		{
			took_lease(res, sent_at, opts, lease);
			PQclear(res);
			return EXIT_OK;
		}
		if (outcome == QUERY_DONE && db_result_ok(res))
		{
			/* try_acquire refused: the name is busy */
			say_busy(*conn, opts);
			PQclear(res);
			return opts->conflict_exit_code;
		}
		if (outcome == QUERY_DONE && !connection_lost(*conn, res))
		{
			const char *state = db_sqlstate(res);
			int			code = EXIT_SOFTWARE;

			if (strcmp(state, "55P03") == 0)
			{
				say_busy(*conn, opts);
				code = opts->conflict_exit_code;
			}
			else
			{
				complain("could not acquire lease \"%s\": %s", opts->name, PQresultErrorMessage(res));
				/* the server rejected an argument: a usage error */
				if (strncmp(state, "22", 2) == 0)
					code = EXIT_USAGE;
			}
			PQclear(res);
			return code;
		}

		/*
		 * The server went away (or did not answer past the budget).  A grant
		 * may have been made whose answer we did not get; the same owner's
		 * next acquire returns it.
		 */
		remember_connect_error(outcome == QUERY_DONE ? PQresultErrorMessage(res) :
							   outcome == QUERY_DEADLINE ? "no answer in time" :
							   PQerrorMessage(*conn));
		info("the wait for lease \"%s\" was cut; reconnecting", opts->name);
		PQclear(res);
		PQfinish(*conn);
		*conn = NULL;
	}
}

/*
 * renew - one renewal attempt; false when the lease is known to be gone
 */
static bool
renew(PGconn **conn, const RunOptions *opts, Lease *lease, pid_t child, const char **why)
{
	const char *params[3] = {opts->name, lease->owner, opts->ttl};
	double		sent_at;
	PGresult   *res;
	QueryOutcome outcome;

	if (*conn == NULL || PQstatus(*conn) != CONNECTION_OK)
	{
		if (opts->session_bound)
		{
			*why = "the connection of the session-bound lease was lost";
			return false;
		}
		PQfinish(*conn);
		*conn = connect_once(opts->dbname, lease->valid_until, child, false);
		if (*conn == NULL)
		{
			info("reconnect failed; retrying in %.1fs", lease->retry_s);
			lease->next_renew = now_s() + lease->retry_s;
			lease->retry_s = fmin(lease->retry_s * 2, RETRY_LAST_S);
			return true;
		}
		info("reconnected");
	}

	sent_at = now_s();
	outcome = query_until(*conn,
						  "SELECT extract(epoch FROM expires_at - clock_timestamp()), expires_at"
						  "  FROM dlock.renew($1, $2, $3::interval)",
						  3, params, lease->valid_until, child, false, false, &res);
	if (outcome == QUERY_DONE && db_result_ok(res))
	{
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			*why = "the server says the lease is gone";
			return false;
		}
		set_validity(lease, sent_at, strtod(PQgetvalue(res, 0, 0), NULL));
		info("renewed lease \"%s\" until %s", opts->name, PQgetvalue(res, 0, 1));
		PQclear(res);
		return true;
	}

	/* no answer: the deadline check in the main loop decides */
	info("renew failed: %s", outcome == QUERY_DONE ? PQresultErrorMessage(res) :
		 outcome == QUERY_DEADLINE ? "no answer in time" : PQerrorMessage(*conn));
	PQclear(res);
	if (outcome == QUERY_DEADLINE && lease->late_cancel == NULL)
		lease->late_cancel = PQgetCancel(*conn);
	if (outcome != QUERY_DONE || PQstatus(*conn) != CONNECTION_OK)
	{
		PQfinish(*conn);
		*conn = NULL;
	}
	lease->next_renew = now_s() + lease->retry_s;
	lease->retry_s = fmin(lease->retry_s * 2, RETRY_LAST_S);
	return true;
}

/*
 * cancel_late_renew - cancel the renew that was left at the lease's
 * deadline, now that the command has been told to stop: the cancel may wait
 * for an unresponsive server as long as it likes (PQcancel has no limit),
 * and a renew that the server would still commit would only keep the lease
 * held, by nobody, until its ttl
 */
static void
cancel_late_renew(Lease *lease)
{
	char		errbuf[256];

	if (lease->late_cancel == NULL)
		return;
	(void) PQcancel(lease->late_cancel, errbuf, sizeof(errbuf));
	PQfreeCancel(lease->late_cancel);
	lease->late_cancel = NULL;
}

static void
free_lease(Lease *lease)
{
	free(lease->owner);
	free(lease->token);
	free(lease->expires_at);
	if (lease->late_cancel != NULL)
		PQfreeCancel(lease->late_cancel);
}

int
run_command(const RunOptions *opts)
{
	double		started = now_s();
	double		wait_deadline = started;
	double		wait_s;
	PGconn	   *conn;
	Lease		lease = {0};
	double		kill_after;
	double		poll_s = 0;
	double		kill_at = 0;
	pid_t		child;
	int			status = 0;
	int			code;
	const char *lost = NULL;
	bool		killed = false;
	bool		try_once = false;	/* --wait 0: no waiting at all */

	install_handlers();

	/*
	 * The budget for reaching the server, until the server can read --wait
	 * itself; text the client cannot read allows a single attempt.
	 */
	if (opts->wait == NULL)
		wait_deadline = INFINITY;
	else if (parse_duration(opts->wait, &wait_s))
		wait_deadline = started + wait_s;
	conn = connect_until(opts->dbname, wait_deadline);
	if (pending_signal != 0)
	{
		PQfinish(conn);
		return stopped(opts);
	}
	if (conn == NULL)
	{
		complain("could not connect to the database: %s", connect_error);
		return EXIT_UNAVAILABLE;
	}

	lease.ttl_s = check_duration(conn, "--ttl", opts->ttl, true);
	if (opts->wait != NULL)
	{
		wait_s = check_duration(conn, "--wait", opts->wait, false);
		wait_deadline = started + wait_s;
		try_once = wait_s == 0;
	}
	if (opts->lock_delay != NULL)
		(void) check_duration(conn, "--lock-delay", opts->lock_delay, false);
	kill_after = check_duration(conn, "--kill-after", opts->kill_after, false);

	/* a lease that would be lost before its first renew is no lease */
	if (validity_s(lease.ttl_s, lease.ttl_s) <= lease.ttl_s / 3)
	{
		complain("--ttl \"%s\" is too short: after the drift allowance and the safety margin "
				 "the lease would be valid for %.1f ms, not past its first renew at ttl/3 "
				 "(%.1f ms); give a longer ttl",
				 opts->ttl, validity_s(lease.ttl_s, lease.ttl_s) * 1000, lease.ttl_s / 3 * 1000);
		PQfinish(conn);
		return EXIT_USAGE;
	}

	/*
	 * The server keeps a poller's place for ttl from its latest poll: a
	 * --poll that does not come back within that, by the same reckoning as
	 * a renew, would let the place lapse between polls, and a later
	 * acquire() overtake the poller.
	 */
	if (opts->poll != NULL)
	{
		poll_s = check_duration(conn, "--poll", opts->poll, true);
		if (poll_s > validity_s(lease.ttl_s, lease.ttl_s))
		{
			complain("--poll \"%s\" is too long for --ttl \"%s\": the server keeps the place in "
					 "the queue for ttl from each poll, so after the drift allowance and the "
					 "safety margin polls must come at most %.1f ms apart; give a shorter --poll "
					 "or a longer --ttl",
					 opts->poll, opts->ttl, validity_s(lease.ttl_s, lease.ttl_s) * 1000);
			PQfinish(conn);
			return EXIT_USAGE;
		}
	}

	lease.owner = opts->owner != NULL ? strdup(opts->owner) : random_owner();
	if (opts->poll != NULL)
		code = acquire_by_polling(&conn, opts, &lease, wait_deadline, poll_s);
	else
		code = acquire(&conn, opts, &lease, wait_deadline, try_once);
	if (code != EXIT_OK)
	{
		PQfinish(conn);
		free_lease(&lease);
		return code;
	}

	child = spawn_child(opts, &lease);
	if (child <= 0)
	{
		code = child == 0 ? stopped(opts) : EXIT_SOFTWARE;
		release(&conn, opts, &lease);
		PQfinish(conn);
		free_lease(&lease);
		return code;
	}

	for (;;)
	{
		double		now = now_s();
		double		wake;
		pid_t		done;
		struct pollfd fds[1];

		forward_pending_signal(child);
		done = waitpid(child, &status, WNOHANG);
		if (done == child)
			break;

		if (lost == NULL)
		{
			if (now >= lease.valid_until)
				lost = "no renew succeeded before the lease's expiry";
			else if (now >= lease.next_renew)
				(void) renew(&conn, opts, &lease, child, &lost);
			if (lost != NULL)
			{
				complain("lease \"%s\" lost: %s; stopping the command", opts->name, lost);
				signal_child(child, SIGTERM);
				kill_at = now_s() + kill_after;
				cancel_late_renew(&lease);
			}
		}
		else if (!killed && now >= kill_at)
		{
			info("the command did not stop within --kill-after; sending SIGKILL");
			signal_child(child, SIGKILL);
			killed = true;
		}

		now = now_s();
		wake = lost == NULL ? fmin(lease.next_renew, lease.valid_until)
			: killed ? now + 1 : kill_at;
		fds[0].fd = signal_pipe[0];
		fds[0].events = POLLIN;
		if (poll(fds, 1, poll_timeout(wake)) > 0)
			drain_signal_pipe();
	}

	if (lost == NULL)
		release(&conn, opts, &lease);
	PQfinish(conn);
	free_lease(&lease);
	close(signal_pipe[0]);
	close(signal_pipe[1]);

	if (lost != NULL)
		return EXIT_LEASE_LOST;
	return child_exit_code(status);
}
