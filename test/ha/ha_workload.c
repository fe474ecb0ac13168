/*
 * ha_workload.c
 *	  A lock-guarded workload that rides out failovers, for test/ha/.
 *
 * WORKERS processes connect with CONNINFO (a multi-host one with
 * target_session_attrs=read-write, so that a reconnect finds the primary),
 * and loop until SECONDS have passed:
 *
 *	1. dlock.acquire() a random name of NAMES, ttl 5 s, owner "w<worker>";
 *	2. INSERT one row into ha_writes WHERE dlock.fence(name, token);
 *	3. dlock.release().
 *
 * Any error (the primary went away, a read-only standby, a timeout) closes
 * the connection; the worker reconnects with a short backoff and goes on.
 * Each worker prints a line for everything the server acknowledged:
 *
 *	grant NAME OWNER TOKEN		acquire returned TOKEN
 *	write RUN WORKER SEQ TOKEN T	the fenced INSERT of row (RUN, WORKER, SEQ)
 *								committed, at T (seconds since the epoch)
 *
 * so that the test can check on the new primary that every acknowledged
 * write is there and that later tokens are larger.  A write whose commit
 * reply was lost is not acknowledged, whatever became of it.
 *
 * Usage: ha_workload CONNINFO RUN WORKERS SECONDS NAMES
 */
#define _DEFAULT_SOURCE

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "../client.h"

/* one statement; NULL (and the connection dropped) on any error */
static PGresult *
exec_or_drop(PGconn **conn, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = PQexecParams(*conn, sql, nparams, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK)
		return res;
	PQclear(res);
	PQfinish(*conn);
	*conn = NULL;
	return NULL;
}

static const char *conninfo;
static const char *run_label;

static int
run_worker(int worker, double deadline, int nnames)
{
	PGconn	   *conn = NULL;
	char		owner[32];
	long		seq = 0;

	snprintf(owner, sizeof(owner), "w%d", worker);
	srandom(worker * 7919 + 1);
	while (now_s() < deadline)
	{
		char		name[32];
		char		token[32];
		char		seqtext[32];
		char		workertext[16];
		PGresult   *res;

		if (conn == NULL)
		{
			conn = PQconnectdb(conninfo);
			if (PQstatus(conn) != CONNECTION_OK)
			{
				PQfinish(conn);
				conn = NULL;
				usleep(100000);
				continue;
			}
		}

		snprintf(name, sizeof(name), "ha:%ld", 1 + random() % nnames);
		res = exec_or_drop(&conn,
						   "SELECT token FROM dlock.acquire($1, '5s', $2, timeout => '5s')",
						   2, (const char *const[]) {name, owner});
		if (res == NULL)
			continue;
		snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		printf("grant %s %s %s\n", name, owner, token);

		seq++;
		snprintf(seqtext, sizeof(seqtext), "%ld", seq);
		snprintf(workertext, sizeof(workertext), "%d", worker);
		res = exec_or_drop(&conn,
						   "INSERT INTO ha_writes (run, worker, seq, name, token)"
						   " SELECT $1, $2, $3, $4, $5 WHERE dlock.fence($4, $5)",
						   5, (const char *const[]) {run_label, workertext, seqtext, name, token});
		if (res == NULL)
			continue;
		if (strcmp(PQcmdTuples(res), "1") == 0)
			printf("write %s %d %ld %s %.3f\n", run_label, worker, seq, token, now_s());
		PQclear(res);

		res = exec_or_drop(&conn, "SELECT dlock.release($1, $2)", 2,
						   (const char *const[]) {name, owner});
		if (res == NULL)
			continue;
		PQclear(res);
	}
	fflush(stdout);
	PQfinish(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	int			workers;
	double		deadline;
	int			status = 0;

	if (argc != 6)
	{
		fprintf(stderr, "usage: %s CONNINFO RUN WORKERS SECONDS NAMES\n", argv[0]);
		return 2;
	}
	conninfo = argv[1];
	run_label = argv[2];
	workers = atoi(argv[3]);
	deadline = now_s() + atof(argv[4]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int w = 0; w < workers; w++)
	{
		pid_t		pid = fork();

		if (pid == 0)
			_exit(run_worker(w, deadline, atoi(argv[5])));
		if (pid < 0)
			return 2;
	}
	for (int w = 0; w < workers; w++)
	{
		int			wstatus;

		if (wait(&wstatus) < 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
			status = 1;
	}
	return status;
}
