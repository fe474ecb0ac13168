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
 * at once and SIGKILL after --kill-after.  Queries are sent asynchronously
 * and waited for with that deadline, so a server that does not answer cannot
 * hold the client past it.  A lost connection is re-established with
 * backoff while the lease may still be valid; a session-bound lease ends
 * with its connection, so for it a lost connection is a lost lease.
 *
 * Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT to dlock are forwarded to the
 * child's process group; dlock keeps renewing until the child exits, then
 * releases the lease and exits with the child's status.  The handled signals
 * are blocked across fork, and the child sets them back to their default
 * action before it unblocks them, so a signal that arrives between fork and
 * exec is neither swallowed by a copy of dlock's handler nor lost: the child
 * gets it as soon as it can act on it.
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

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* signals dlock handles; the child gets them back at their default action */
static const int handled_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};

#define N_HANDLED_SIGNALS (sizeof(handled_signals) / sizeof(handled_signals[0]))

static int	signal_pipe[2] = {-1, -1};
static volatile sig_atomic_t pending_signal = 0;

typedef struct Lease
{
	char	   *owner;
	char	   *token;
	char	   *expires_at;
	double		ttl_s;
	double		valid_until;	/* monotonic seconds */
	double		next_renew;		/* monotonic seconds */
	double		retry_s;		/* current reconnect backoff */
} Lease;

typedef enum QueryOutcome
{
	QUERY_DONE,					/* a result (maybe an error) is in *res */
	QUERY_DEADLINE,				/* no answer before the deadline */
	QUERY_BROKEN				/* the connection failed */
} QueryOutcome;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
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
 * query_until - run a parameterized query, waiting at most until deadline
 * (monotonic seconds); signals for the child are forwarded meanwhile
 */
static QueryOutcome
query_until(PGconn *conn, const char *sql, int nparams, const char *const *params,
			double deadline, pid_t child, PGresult **res)
{
	*res = NULL;
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK ||
		!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0))
		return QUERY_BROKEN;

	for (;;)
	{
		struct pollfd fds[2];
		double		left = deadline - now_s();

		if (!PQconsumeInput(conn))
			return QUERY_BROKEN;
		if (!PQisBusy(conn))
			break;
		if (left <= 0)
		{
			PGcancel   *cancel = PQgetCancel(conn);
			char		errbuf[256];

			if (cancel != NULL)
			{
				PQcancel(cancel, errbuf, sizeof(errbuf));
				PQfreeCancel(cancel);
			}
			return QUERY_DEADLINE;
		}
		fds[0].fd = PQsocket(conn);
		fds[0].events = POLLIN;
		fds[1].fd = signal_pipe[0];
		fds[1].events = POLLIN;
		if (poll(fds, 2, (int) ceil(left * 1000)) < 0 && errno != EINTR)
			return QUERY_BROKEN;
		if (fds[1].revents & POLLIN)
		{
			drain_signal_pipe();
			forward_pending_signal(child);
			/* a SIGCHLD is seen again by the main loop through waitpid */
		}
	}

	/* one statement: the first result is the answer, then NULL */
	*res = PQgetResult(conn);
	for (PGresult *extra; (extra = PQgetResult(conn)) != NULL;)
		PQclear(extra);
	if (*res == NULL)
		return QUERY_BROKEN;
	return QUERY_DONE;
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

/* spawn_child - start the command in its own process group */
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

/* check_duration - parse an interval option on the server; exit 64 if bad */
static double
check_duration(PGconn *conn, const char *option, const char *text, bool positive)
{
	double		seconds;

	if (!db_duration(conn, text, &seconds) || seconds < 0 || (positive && seconds <= 0))
	{
		complain("invalid %s \"%s\": give a %s PostgreSQL interval such as 30s or '5 min'",
				 option, text, positive ? "positive" : "non-negative");
		PQfinish(conn);
		exit(EXIT_USAGE);
	}
	return seconds;
}

/*
 * acquire - take the lease; on a busy lease exit with the conflict code
 */
static void
acquire(PGconn *conn, const RunOptions *opts, Lease *lease)
{
	const char *params[6] = {
		opts->name, opts->ttl, opts->owner, opts->wait, opts->lock_delay,
		opts->session_bound ? "true" : "false"
	};
	double		sent_at = now_s();
	PGresult   *res = db_exec(conn,
							  "SELECT owner, token, expires_at,"
							  "       extract(epoch FROM expires_at - clock_timestamp())"
							  "  FROM dlock.acquire($1, $2::interval, $3, $4::interval,"
							  "                     $5::interval, $6::boolean)",
							  6, params);

	if (!db_result_ok(res))
	{
		const char *state = db_sqlstate(res);
		int			code = EXIT_SOFTWARE;

		if (strcmp(state, "55P03") == 0)
		{
			info("lease \"%s\" is busy", opts->name);
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
		PQfinish(conn);
		exit(code);
	}
	lease->owner = copy_value(res, 0);
	lease->token = copy_value(res, 1);
	lease->expires_at = copy_value(res, 2);
	set_validity(lease, sent_at, strtod(PQgetvalue(res, 0, 3), NULL));
	PQclear(res);
	info("acquired lease \"%s\" with token %s, owner %s", opts->name, lease->token, lease->owner);
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
		*conn = db_connect(opts->dbname, false);
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
						  3, params, lease->valid_until, child, &res);
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
	if (outcome != QUERY_DONE || PQstatus(*conn) != CONNECTION_OK)
	{
		PQfinish(*conn);
		*conn = NULL;
	}
	lease->next_renew = now_s() + lease->retry_s;
	lease->retry_s = fmin(lease->retry_s * 2, RETRY_LAST_S);
	return true;
}

/* release - give the lease back after the child has exited */
static void
release(PGconn **conn, const RunOptions *opts, Lease *lease)
{
	const char *params[2] = {opts->name, lease->owner};
	PGresult   *res = NULL;

	if (*conn == NULL || PQstatus(*conn) != CONNECTION_OK)
	{
		PQfinish(*conn);
		*conn = db_connect(opts->dbname, false);
	}
	if (*conn != NULL &&
		query_until(*conn, "SELECT dlock.release($1, $2)", 2, params,
					now_s() + 10, 0, &res) == QUERY_DONE && db_result_ok(res))
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

int
run_command(const RunOptions *opts)
{
	PGconn	   *conn = db_connect(opts->dbname, true);
	Lease		lease = {0};
	double		kill_after;
	double		kill_at = 0;
	pid_t		child;
	int			status = 0;
	const char *lost = NULL;
	bool		killed = false;

	lease.ttl_s = check_duration(conn, "--ttl", opts->ttl, true);
	if (opts->wait != NULL)
		(void) check_duration(conn, "--wait", opts->wait, false);
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

	install_handlers();
	acquire(conn, opts, &lease);
	child = spawn_child(opts, &lease);
	if (child < 0)
	{
		release(&conn, opts, &lease);
		PQfinish(conn);
		return EXIT_SOFTWARE;
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
		if (poll(fds, 1, (int) fmax(0, ceil((wake - now) * 1000))) > 0)
			drain_signal_pipe();
	}

	if (lost == NULL)
		release(&conn, opts, &lease);
	PQfinish(conn);
	free(lease.owner);
	free(lease.token);
	free(lease.expires_at);
	close(signal_pipe[0]);
	close(signal_pipe[1]);

	if (lost != NULL)
		return EXIT_LEASE_LOST;
	return child_exit_code(status);
}
