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

#include <libpq-fe.h>

#include "../lib/dlock_client.h"

static const char *conninfo;
static const char *run_label;
static double deadline;
static int	nnames;

static int
run_worker(int worker, void *arg)
{
	PGconn	   *conn = NULL;
	char		owner[32];
	long		seq = 0;

	(void) arg;
	snprintf(owner, sizeof(owner), "w%d", worker);
	srandom(worker * 7919 + 1);
	while (dlc_wall_s() < deadline)
	{
		char		name[32];
		char		token[32];
		char		seqtext[32];
		char		workertext[16];
		PGresult   *res;

		if (conn == NULL && (conn = dlc_connect_or_pause(conninfo, 100)) == NULL)
			continue;

		snprintf(name, sizeof(name), "ha:%d", dlc_pick(nnames));
		res = dlc_exec_or_drop(&conn,
							   "SELECT token FROM dlock.acquire($1, '5s', $2, timeout => '5s')",
							   2, (const char *const[]) {name, owner});
		if (res == NULL)
			continue;
		dlc_copy_value(token, sizeof(token), res, 0, 0);
		PQclear(res);
		printf("grant %s %s %s\n", name, owner, token);

		seq++;
		snprintf(seqtext, sizeof(seqtext), "%ld", seq);
		snprintf(workertext, sizeof(workertext), "%d", worker);
		res = dlc_exec_or_drop(&conn,
							   "INSERT INTO ha_writes (run, worker, seq, name, token)"
							   " SELECT $1, $2, $3, $4, $5 WHERE dlock.fence($4, $5)",
							   5, (const char *const[]) {run_label, workertext, seqtext, name, token});
		if (res == NULL)
			continue;
		if (strcmp(PQcmdTuples(res), "1") == 0)
			printf("write %s %d %ld %s %.3f\n", run_label, worker, seq, token, dlc_wall_s());
		PQclear(res);

		res = dlc_exec_or_drop(&conn, DLC_RELEASE_SQL, 2,
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
	dlc_progname = "ha_workload";
	if (argc != 6)
	{
		fprintf(stderr, "usage: %s CONNINFO RUN WORKERS SECONDS NAMES\n", argv[0]);
		return 2;
	}
	conninfo = argv[1];
	run_label = argv[2];
	deadline = dlc_wall_s() + atof(argv[4]);
	nnames = atoi(argv[5]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlc_run_workers(atoi(argv[3]), run_worker, NULL);
}
