/*
 * client.c
 *	  The clients of the fault suite (test/faults/faults.pl): they record
 *	  every operation they make, with its outcome, for the checker.
 *
 * Every operation leaves two lines in the history file: one when it is
 * sent (invoke) and one when its outcome is known, which is one of
 *
 *	ok		the server acknowledged it
 *	fail	it certainly did not take effect: an ERROR on a connection that
 *			is still up (the statement's transaction rolled back), or a
 *			fenced write that matched no row (the fence said no)
 *	unknown	the connection broke, the server sent FATAL, or no answer came
 *			before the operation's deadline: it may or may not have taken
 *			effect
 *
 * A line is
 *
 *	WALL MONO PROCESS TYPE F NAME TOKEN ELEMENT NODE DETAIL
 *
 * WALL and MONO are CLOCK_REALTIME and CLOCK_MONOTONIC in seconds (every
 * namespace of the suite shares the machine's clocks, so both compare
 * across processes); F is acquire, write, release or stop; "-" stands for
 * what is not known.  NODE is the address of the server that answered
 * (inet_server_addr()), or of the one the operation was sent to.
 *
 * A query is never cancelled: a cancel that reaches a commit waiting for a
 * synchronous standby turns it into a success that was not replicated.
 * One that has no answer by its deadline has its connection closed and
 * counts as unknown.
 *
 * Modes:
 *
 *	client set CONNINFO HISTORY PROCESS WORKERS NAMES TTL
 *		WORKERS processes loop until SIGTERM: acquire a random name of NAMES
 *		(owner of their own, ttl TTL), insert a unique element into
 *		fault_set under dlock.fence(), release.  Worker W writes
 *		HISTORY.W.
 *	client contend CONNINFO HISTORY PROCESS NAME
 *		loop until SIGTERM: try_acquire NAME every 50 ms, release it at once
 *		when granted; every grant is in the history, with the time its try
 *		was sent.
 *	client child HISTORY PROCESS
 *		the command of "dlock run": records its start (its token, and as
 *		DETAIL the lease's expiry, $DLOCK_EXPIRES_AT with "T" for the
 *		space), loops writing rows of fault_child under
 *		dlock.fence($DLOCK_NAME, $DLOCK_TOKEN) through $FAULTS_CONNINFO; on
 *		SIGTERM it records "stop" and exits at once.
 */
#define _DEFAULT_SOURCE

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "../lib/dlock_client.h"

/* how long an operation may go unanswered before it counts as unknown */
#define OP_DEADLINE_S 8.0

/* the answering server and its timeline: ADDRESS/TIMELINE, an epoch */
#define NODE_SQL "host(inet_server_addr()) || '/' || " \
	"substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8)"

typedef enum Outcome
{
	OUT_OK,
	OUT_FAIL,
	OUT_UNKNOWN
} Outcome;

static const char *conninfo;
static const char *process;
static FILE *history;
static volatile sig_atomic_t stopping = 0;
static bool stop_at_once = false;	/* the child: SIGTERM ends a query too */

/* record - one history line, written through at once */
static void
record(const char *type, const char *f, const char *name, const char *token,
	   const char *elem, const char *node, const char *detail)
{
	fprintf(history, "%.6f %.6f %s %s %s %s %s %s %s %s\n",
			dlc_wall_s(), dlc_mono_s(), process, type, f,
			name ? name : "-", token && *token ? token : "-", elem ? elem : "-",
			node && *node ? node : "-", detail && *detail ? detail : "-");
	fflush(history);
}

static void
on_term(int signo)
{
	(void) signo;
	stopping = 1;
}

/* append_number - decimal digits of v into buf at *len (signal-safe) */
static void
append_number(char *buf, size_t *len, unsigned long long v, int min_digits)
{
	char		digits[24];
	int			n = 0;

	do
	{
		digits[n++] = '0' + v % 10;
		v /= 10;
	} while (v > 0 || n < min_digits);
	while (n > 0)
		buf[(*len)++] = digits[--n];
}

static char child_tail[256];	/* " PROCESS ok stop NAME TOKEN - - sigterm\n" */
static int	history_fd = -1;

/*
 * on_term_child - the command of dlock run stops at the signal itself,
 * wherever it is (a connection attempt does not look at flags): the stop
 * is recorded with one write(2) and the process exits
 */
static void
on_term_child(int signo)
{
	char		line[400];
	size_t		len = 0;
	struct timespec wall,
				mono;

	(void) signo;
	clock_gettime(CLOCK_REALTIME, &wall);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	append_number(line, &len, wall.tv_sec, 1);
	line[len++] = '.';
	append_number(line, &len, wall.tv_nsec / 1000, 6);
	line[len++] = ' ';
	append_number(line, &len, mono.tv_sec, 1);
	line[len++] = '.';
	append_number(line, &len, mono.tv_nsec / 1000, 6);
	for (const char *t = child_tail; *t && len < sizeof(line); t++)
		line[len++] = *t;
	(void) !write(history_fd, line, len);
	_exit(0);
}

/* a connection, or NULL after a short pause */
static PGconn *
connect_db(void)
{
	return dlc_connect_or_pause(conninfo, 200);
}

/*
 * run - one statement, answered by its deadline or counted unknown; *res
 * holds the result when OUT_OK (the caller clears it).  On OUT_UNKNOWN the
 * connection is closed and *conn set to NULL.
 *
 * The outcome is known only once the server says it is ready for the next
 * query: with the extended protocol an autocommit statement's rows and
 * CommandComplete come before its commit, which may then wait for a
 * synchronous standby, or fail (a shutdown ends the wait with FATAL).  So
 * the results are read to the end, within the same deadline, and an error
 * after the rows decides the outcome.
 */
static Outcome
run(PGconn **conn, const char *sql, int nparams, const char *const *params,
	PGresult **res, char *detail, size_t detail_size)
{
	double		deadline = dlc_mono_s() + OP_DEADLINE_S;
	PGresult   *r = NULL;
	Outcome		out;

	*res = NULL;
	snprintf(detail, detail_size, "-");
	if (!PQsendQueryParams(*conn, sql, nparams, NULL, params, NULL, NULL, 0))
		goto broken;
	for (;;)
	{
		PGresult   *next;

		for (;;)
		{
			struct pollfd pfd;
			double		left;

			if (!PQconsumeInput(*conn))
				goto broken;
			if (!PQisBusy(*conn))
				break;
			left = deadline - dlc_mono_s();
			if (stop_at_once && stopping)
			{
				snprintf(detail, detail_size, "stopped");
				goto drop;
			}
			if (left <= 0)
			{
				snprintf(detail, detail_size, "deadline");
				goto drop;
			}
			pfd.fd = PQsocket(*conn);
			pfd.events = POLLIN;
			if (poll(&pfd, 1, (int) (left * 1000) + 1) < 0 && errno != EINTR)
				goto broken;
		}
		next = PQgetResult(*conn);
		if (next == NULL)
			break;				/* ready for the next query: the outcome is known */
		if (r == NULL || PQresultStatus(next) == PGRES_FATAL_ERROR)
		{
			PQclear(r);
			r = next;
		}
		else
			PQclear(next);
	}
	if (r != NULL && (PQresultStatus(r) == PGRES_TUPLES_OK ||
					  PQresultStatus(r) == PGRES_COMMAND_OK))
	{
		*res = r;
		return OUT_OK;
	}
	if (r != NULL)
	{
		const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		const char *severity = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);

		snprintf(detail, detail_size, "%s", state ? state : "none");

		/*
		 * An ERROR that leaves the connection up rolled the statement back;
		 * a FATAL (a shutdown may end a commit that waits for a standby
		 * after it committed locally) or a lost connection says nothing
		 */
		if (state != NULL && severity != NULL && strcmp(severity, "ERROR") == 0 &&
			PQstatus(*conn) == CONNECTION_OK && strncmp(state, "08", 2) != 0)
		{
			PQclear(r);
			return OUT_FAIL;
		}
	}
	else
		snprintf(detail, detail_size, "noresult");
	goto drop;

broken:
	snprintf(detail, detail_size, "broken");
drop:
	out = OUT_UNKNOWN;
	PQclear(r);
	PQfinish(*conn);
	*conn = NULL;
	return out;
}

static const char *const outcome_name[] = {"ok", "fail", "unknown"};

/*
 * fenced_write - the outcome of a fenced INSERT ... RETURNING NODE_SQL that
 * run() answered with out: no row back means the fence said no (a certain
 * failure); a row gives the answering node.  Clears the result.
 */
static Outcome
fenced_write(Outcome out, PGresult *res, char *node, size_t node_size,
			 char *detail, size_t detail_size)
{
	if (out != OUT_OK)
		return out;
	if (PQntuples(res) != 1)
	{
		out = OUT_FAIL;
		snprintf(detail, detail_size, "fenced");
	}
	else
		dlc_copy_value(node, node_size, res, 0, 0);
	PQclear(res);
	return out;
}

/* the server's address, for lines about an operation that was not answered */
static const char *
sent_to(PGconn *conn)
{
	const char *h = conn ? PQhostaddr(conn) : NULL;

	return h && *h ? h : "-";
}

static void
set_worker(int worker, const char *names_text, const char *ttl)
{
	PGconn	   *conn = NULL;
	int			nnames = atoi(names_text);
	long		seq = 0;
	char		me[128];

	snprintf(me, sizeof(me), "%s.%d", process, worker);
	process = me;
	srandom(getpid() ^ (unsigned) dlc_wall_s());
	while (!stopping)
	{
		char		name[32];
		char		owner[160];
		char		elem[160];
		char		token[32] = "";
		char		node[64] = "";
		char		detail[32];
		PGresult   *res;
		Outcome		out;

		if (conn == NULL && (conn = connect_db()) == NULL)
			continue;
		seq++;
		snprintf(name, sizeof(name), "set:%d", dlc_pick(nnames));
		snprintf(owner, sizeof(owner), "%s.%ld", process, seq);
		snprintf(elem, sizeof(elem), "%s.%ld", process, seq);

		record("invoke", "acquire", name, NULL, elem, sent_to(conn), NULL);
		out = run(&conn,
				  "SELECT token, " NODE_SQL
				  "  FROM dlock.acquire($1, $2::interval, $3, timeout => '2s')",
				  3, (const char *const[]) {name, ttl, owner}, &res, detail, sizeof(detail));
		if (out == OUT_OK)
		{
			dlc_copy_value(token, sizeof(token), res, 0, 0);
			dlc_copy_value(node, sizeof(node), res, 0, 1);
			PQclear(res);
		}
		record(outcome_name[out], "acquire", name, token, elem, *node ? node : "-", detail);
		if (out != OUT_OK)
			continue;

		record("invoke", "write", name, token, elem, node, NULL);
		out = run(&conn,
				  "INSERT INTO fault_set (name, token, elem, node)"
				  " SELECT $1, $2, $3, inet_server_addr() WHERE dlock.fence($1, $2)"
				  " RETURNING " NODE_SQL,
				  3, (const char *const[]) {name, token, elem}, &res, detail, sizeof(detail));
		out = fenced_write(out, res, node, sizeof(node), detail, sizeof(detail));
		record(outcome_name[out], "write", name, token, elem, node, detail);
		if (out == OUT_UNKNOWN)
			continue;

		record("invoke", "release", name, token, elem, node, NULL);
		out = run(&conn, DLC_RELEASE_SQL, 2,
				  (const char *const[]) {name, owner}, &res, detail, sizeof(detail));
		if (out == OUT_OK)
			PQclear(res);
		record(outcome_name[out], "release", name, token, elem, node, detail);
	}
	PQfinish(conn);
}

/* a set worker: its history file is HISTORY.W */
static int
run_set_worker(int w, void *arg)
{
	char	  **argv = arg;
	char		path[4096];

	snprintf(path, sizeof(path), "%s.%d", argv[3], w);
	history = fopen(path, "a");
	if (history == NULL)
		return 2;
	set_worker(w, argv[6], argv[7]);
	fclose(history);
	return 0;
}

static int
run_set(char **argv)
{
	int			workers = atoi(argv[5]);
	pid_t	   *pids = dlc_fork_workers(workers, run_set_worker, argv);

	if (pids == NULL)
		return 2;
	/* a SIGTERM that comes to us is passed on */
	return dlc_wait_workers(pids, workers, SIGTERM);
}

static int
run_contend(const char *name)
{
	PGconn	   *conn = NULL;
	long		seq = 0;

	while (!stopping)
	{
		char		owner[160];
		char		detail[32];
		char		inv_wall[32];
		char		inv_mono[32];
		PGresult   *res;
		Outcome		out;

		if (conn == NULL && (conn = connect_db()) == NULL)
			continue;
		snprintf(owner, sizeof(owner), "%s.%ld", process, ++seq);
		snprintf(inv_wall, sizeof(inv_wall), "%.6f", dlc_wall_s());
		snprintf(inv_mono, sizeof(inv_mono), "%.6f", dlc_mono_s());

		/*
		 * A try every 50 ms rather than a waiting acquire, so that the
		 * grant is known to have come after the try was sent, and not
		 * long after; only the grants are recorded, with the time their
		 * try was sent
		 */
		out = run(&conn,
				  "SELECT token, " NODE_SQL " FROM dlock.try_acquire($1, '5s', $2)",
				  2, (const char *const[]) {name, owner}, &res, detail, sizeof(detail));
		if (out == OUT_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		{
			fprintf(history, "%s %s %s invoke acquire %s - %s - -\n",
					inv_wall, inv_mono, process, name, owner);
			record("ok", "acquire", name, PQgetvalue(res, 0, 0), owner, PQgetvalue(res, 0, 1), NULL);
			PQclear(res);
			out = run(&conn, DLC_RELEASE_SQL, 2,
					  (const char *const[]) {name, owner}, &res, detail, sizeof(detail));
			if (out == OUT_OK)
				PQclear(res);
			/* leave the name to the dlock run that waits for it */
			usleep(500000);
			continue;
		}
		if (out == OUT_OK)
			PQclear(res);
		usleep(50000);
	}
	PQfinish(conn);
	return 0;
}

static int
run_child(void)
{
	const char *name = getenv("DLOCK_NAME");
	const char *token = getenv("DLOCK_TOKEN");
	PGconn	   *conn = NULL;
	long		n = 0;
	char		expires[64];

	if (name == NULL || token == NULL || conninfo == NULL)
		return 2;
	stop_at_once = true;
	/* the expiry of the grant, as the server gave it: a history field */
	snprintf(expires, sizeof(expires), "%s", getenv("DLOCK_EXPIRES_AT") ? getenv("DLOCK_EXPIRES_AT") : "-");
	for (char *p = expires; *p; p++)
		if (*p == ' ')
			*p = 'T';
	record("start", "stop", name, token, "-", "-", expires);
	snprintf(child_tail, sizeof(child_tail), " %s ok stop %s %s - - sigterm\n", process, name, token);
	history_fd = fileno(history);
	dlc_catch_signal(SIGTERM, on_term_child);
	while (!stopping)
	{
		char		ntext[160];
		char		node[64] = "";
		char		detail[32];
		PGresult   *res;
		Outcome		out;

		if (conn == NULL && (conn = connect_db()) == NULL)
			continue;
		snprintf(ntext, sizeof(ntext), "%s.%ld", process, ++n);
		record("invoke", "write", name, token, ntext, sent_to(conn), NULL);
		out = run(&conn,
				  "INSERT INTO fault_child (name, token, elem)"
				  " SELECT $1, $2, $3 WHERE dlock.fence($1, $2)"
				  " RETURNING " NODE_SQL,
				  3, (const char *const[]) {name, token, ntext}, &res, detail, sizeof(detail));
		out = fenced_write(out, res, node, sizeof(node), detail, sizeof(detail));
		record(outcome_name[out], "write", name, token, ntext, *node ? node : "-", detail);
		usleep(100000);
	}
	/* not reached: SIGTERM ends the process in its handler */
	PQfinish(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	dlc_progname = "client";
	dlc_catch_signal(SIGTERM, on_term);
	dlc_catch_signal(SIGINT, on_term);
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (argc == 8 && strcmp(argv[1], "set") == 0)
	{
		conninfo = argv[2];
		process = argv[4];
		return run_set(argv);
	}
	if (argc == 6 && strcmp(argv[1], "contend") == 0)
	{
		conninfo = argv[2];
		process = argv[4];
		history = fopen(argv[3], "a");
		return history ? run_contend(argv[5]) : 2;
	}
	if (argc == 4 && strcmp(argv[1], "child") == 0)
	{
		conninfo = getenv("FAULTS_CONNINFO");
		process = argv[3];
		history = fopen(argv[2], "a");
		return history ? run_child() : 2;
	}
	fprintf(stderr, "usage: %s set CONNINFO HISTORY PROCESS WORKERS NAMES TTL\n"
			"       %s contend CONNINFO HISTORY PROCESS NAME\n"
			"       %s child HISTORY PROCESS\n", argv[0], argv[0], argv[0]);
	return 2;
}
