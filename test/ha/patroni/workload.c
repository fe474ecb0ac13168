/*
 * workload.c
 *	  The lock-guarded workload of test/ha/patroni/patroni.pl: it rides out
 *	  failovers and says which server acknowledged what.
 *
 * Every process connects with CONNINFO (a multi-host one with
 * target_session_attrs=read-write, so that a reconnect finds the leader)
 * and loops until it gets SIGTERM.  WORKERS processes do the guarded cycle:
 *
 *	1. dlock.acquire() a random name of NAMES, ttl 5 s, timeout 5 s, with an
 *	   owner of its own ("w<worker>.<seq>"), so that an acquire repeated
 *	   after a lost reply is a new grant, never the old lease returned again;
 *	2. INSERT one row into ha_writes WHERE dlock.fence(name, token);
 *	3. dlock.release().
 *
 * KEEPERS more processes only acquire, each time a new name
 * ("keep:<run>:<keeper>:<seq>") with a ttl of 1 h, and never release: every
 * lease they were granted must still be live after a failover to a
 * synchronous standby.
 *
 * Any error (the leader went away, a read-only standby, a timeout) closes
 * the connection; the process reconnects with a short backoff and goes on.
 * Each prints a line for everything the server acknowledged, with the port
 * of the server that answered (each node has its own) and the time:
 *
 *	grant KIND NAME OWNER TOKEN PORT T	acquire returned TOKEN (KIND lock
 *										or keep)
 *	write RUN WORKER SEQ NAME TOKEN PORT T
 *										the fenced INSERT of row (RUN,
 *										WORKER, SEQ) committed
 *
 * A statement whose reply was lost is not acknowledged, whatever became of
 * it.  SIGTERM ends the loops after the statement in progress; the process
 * exits 0 unless a child failed.
 *
 * Usage: workload CONNINFO RUN WORKERS KEEPERS NAMES
 */
#define _DEFAULT_SOURCE

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "../../lib/dlock_client.h"

static const char *conninfo;
static const char *run_label;
static int	workers;
static int	nnames;
static volatile sig_atomic_t stopping = 0;
static pid_t *children;
static int	nchildren;
static sigset_t term;

/* in a child: end the loop after the statement in progress */
static void
on_term(int signo)
{
	(void) signo;
	stopping = 1;
}

/* in the parent: pass the signal on to the children */
static void
on_term_parent(int signo)
{
	for (int c = 0; c < nchildren; c++)
		if (children[c] > 0)
			kill(children[c], signo);
}

/* a connection to the leader, or false after a short pause */
static bool
connected(PGconn **conn)
{
	if (*conn == NULL)
		*conn = dlc_connect_or_pause(conninfo, 100);
	return *conn != NULL;
}

static const char *const acquire_sql =
"SELECT token, inet_server_port() FROM dlock.acquire($1, $2::interval, $3, timeout => '5s')";

static void
run_worker(int worker)
{
	PGconn	   *conn = NULL;
	long		seq = 0;

	srandom(worker * 7919 + 1);
	while (!stopping)
	{
		char		name[32];
		char		owner[48];
		char		token[32];
		char		port[16];
		char		seqtext[32];
		char		workertext[16];
		PGresult   *res;

		if (!connected(&conn))
			continue;
		seq++;
		snprintf(name, sizeof(name), "ha:%d", dlc_pick(nnames));
		snprintf(owner, sizeof(owner), "w%d.%ld", worker, seq);
		res = dlc_exec_or_drop(&conn, acquire_sql, 3, (const char *const[]) {name, "5s", owner});
		if (res == NULL)
			continue;
		dlc_copy_value(token, sizeof(token), res, 0, 0);
		dlc_copy_value(port, sizeof(port), res, 0, 1);
		PQclear(res);
		printf("grant lock %s %s %s %s %.3f\n", name, owner, token, port, dlc_wall_s());

		snprintf(seqtext, sizeof(seqtext), "%ld", seq);
		snprintf(workertext, sizeof(workertext), "%d", worker);
		res = dlc_exec_or_drop(&conn,
							   "INSERT INTO ha_writes (run, worker, seq, name, token)"
							   " SELECT $1, $2, $3, $4, $5 WHERE dlock.fence($4, $5)"
							   " RETURNING inet_server_port()",
							   5, (const char *const[]) {run_label, workertext, seqtext, name, token});
		if (res == NULL)
			continue;
		if (PQntuples(res) == 1)
			printf("write %s %d %ld %s %s %s %.3f\n", run_label, worker, seq, name, token,
				   PQgetvalue(res, 0, 0), dlc_wall_s());
		PQclear(res);

		res = dlc_exec_or_drop(&conn, DLC_RELEASE_SQL, 2,
							   (const char *const[]) {name, owner});
		if (res != NULL)
			PQclear(res);
	}
	PQfinish(conn);
}

static void
run_keeper(int keeper)
{
	PGconn	   *conn = NULL;
	long		seq = 0;

	while (!stopping)
	{
		char		name[64];
		char		owner[16];
		PGresult   *res;

		if (!connected(&conn))
			continue;
		seq++;
		snprintf(name, sizeof(name), "keep:%s:%d:%ld", run_label, keeper, seq);
		snprintf(owner, sizeof(owner), "k%d", keeper);
		res = dlc_exec_or_drop(&conn, acquire_sql, 3, (const char *const[]) {name, "1h", owner});
		if (res == NULL)
			continue;
		printf("grant keep %s %s %s %s %.3f\n", name, owner, PQgetvalue(res, 0, 0),
			   PQgetvalue(res, 0, 1), dlc_wall_s());
		PQclear(res);
	}
	PQfinish(conn);
}

/* a child: a worker or a keeper, ended by SIGTERM */
static int
run_child(int p, void *arg)
{
	(void) arg;
	dlc_catch_signal(SIGTERM, on_term);
	sigprocmask(SIG_UNBLOCK, &term, NULL);
	if (p < workers)
		run_worker(p);
	else
		run_keeper(p - workers);
	return 0;
}

int
main(int argc, char **argv)
{
	int			status;

	dlc_progname = "workload";
	if (argc != 6)
	{
		fprintf(stderr, "usage: %s CONNINFO RUN WORKERS KEEPERS NAMES\n", argv[0]);
		return 2;
	}
	conninfo = argv[1];
	run_label = argv[2];
	workers = atoi(argv[3]);
	nchildren = workers + atoi(argv[4]);
	nnames = atoi(argv[5]);
	setvbuf(stdout, NULL, _IOLBF, 0);

	/*
	 * SIGTERM is blocked while the children are forked, so that it reaches
	 * each of them once its handler is in place (no SA_RESTART: a pause
	 * between reconnects ends at once).
	 */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	dlc_catch_signal(SIGTERM, on_term_parent);
	children = dlc_fork_workers(nchildren, run_child, NULL);
	if (children == NULL)
		return 2;
	sigprocmask(SIG_UNBLOCK, &term, NULL);
	/* a SIGTERM that interrupts the wait was passed on by on_term_parent */
	status = dlc_wait_workers(children, nchildren, 0);
	return status == 0 ? 0 : 1;
}
