/*
 * writer_wait.c
 *	  How long a writer waits for an exclusive lock on a name that readers
 *	  keep taking in shared mode, for bench/compare.sh (section kinds).
 *
 *	  writer_wait DELAY_MS SECONDS TIMEOUT_MS HOLD_MS PAUSE_MS POLL_MS ACQUIRE RELEASE
 *
 *	One session (libpq; the connection comes from the PG* environment)
 *	sleeps DELAY_MS, so that the readers started with it are running, then,
 *	until SECONDS have passed, runs writer cycles:
 *
 *	  acquire: the SQL ACQUIRE, which returns one row.  A NULL first column
 *			   is a refusal: with POLL_MS > 0 the writer sleeps POLL_MS and
 *			   tries again, until TIMEOUT_MS have passed since its first
 *			   attempt.  An error with SQLSTATE 55P03 (lock_not_available:
 *			   dlock.acquire's timeout, lock_timeout) ends the attempt;
 *			   so does running out of TIMEOUT_MS while polling.  Either is
 *			   a timeout.
 *	  hold:    HOLD_MS, then the SQL RELEASE, which must return true;
 *	  pause:   PAUSE_MS before the next cycle.
 *
 *	A sample is the time from the start of a cycle's first attempt to the
 *	reply that granted it, or to the end of an attempt that timed out: a
 *	writer that gave up waited that long too.
 *
 *	Prints "p50_ms p99_ms max_ms grants timeouts" on one line.  With
 *	WRITER_SAMPLES=FILE in the environment, also writes every sample to FILE,
 *	in milliseconds, one a line, in the order they were taken.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "../test/lib/dlock_client.h"

typedef enum
{
	GRANTED,
	REFUSED,
	TIMED_OUT
} Attempt;

/* attempt - run ACQUIRE once */
static Attempt
attempt(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);
	Attempt		result;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		result = PQgetisnull(res, 0, 0) ? REFUSED : GRANTED;
	else if (PQresultStatus(res) == PGRES_FATAL_ERROR && dlc_has_sqlstate(res, "55P03"))
		result = TIMED_OUT;
	else
		dlc_die(sql, conn);
	PQclear(res);
	return result;
}

int
main(int argc, char **argv)
{
	double		delay_ms,
				seconds,
				timeout_ms,
				hold_ms,
				pause_ms,
				poll_ms;
	const char *acquire;
	const char *release;
	PGconn	   *conn;
	DlcSamples	samples = {0};
	long		grants = 0,
				timeouts = 0;
	double		deadline;

	dlc_progname = "writer_wait";
	if (argc != 9)
	{
		fprintf(stderr, "usage: writer_wait DELAY_MS SECONDS TIMEOUT_MS HOLD_MS PAUSE_MS POLL_MS ACQUIRE RELEASE\n");
		return 64;
	}
	delay_ms = atof(argv[1]);
	seconds = atof(argv[2]);
	timeout_ms = atof(argv[3]);
	hold_ms = atof(argv[4]);
	pause_ms = atof(argv[5]);
	poll_ms = atof(argv[6]);
	acquire = argv[7];
	release = argv[8];
	if (delay_ms < 0 || seconds <= 0 || timeout_ms <= 0 || hold_ms < 0 ||
		pause_ms < 0 || poll_ms < 0)
	{
		fprintf(stderr, "writer_wait: bad arguments\n");
		return 64;
	}

	conn = dlc_connect_or_die("");
	dlc_sleep_ms(delay_ms);
	deadline = dlc_mono_ms() + seconds * 1000.0;

	while (dlc_mono_ms() < deadline)
	{
		double		start = dlc_mono_ms();
		Attempt		a;

		while ((a = attempt(conn, acquire)) == REFUSED)
		{
			/* A poll that would end after the timeout is not started */
			if (poll_ms == 0 || dlc_mono_ms() + poll_ms - start >= timeout_ms)
			{
				a = TIMED_OUT;
				break;
			}
			dlc_sleep_ms(poll_ms);
		}
		dlc_samples_add(&samples, dlc_mono_ms() - start);
		if (a == GRANTED)
		{
			PGresult   *res;

			grants++;
			dlc_sleep_ms(hold_ms);
			res = PQexec(conn, release);
			if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
				strcmp(PQgetvalue(res, 0, 0), "t") != 0)
				dlc_die("release did not return true", PQresultStatus(res) == PGRES_TUPLES_OK ? NULL : conn);
			PQclear(res);
		}
		else
			timeouts++;
		dlc_sleep_ms(pause_ms);
	}
	PQfinish(conn);
	if (samples.n == 0)
	{
		fprintf(stderr, "writer_wait: no attempt made\n");
		return 1;
	}

	dlc_write_samples(getenv("WRITER_SAMPLES"), samples.v, samples.n);
	dlc_sort(samples.v, samples.n);
	printf("%.3f %.3f %.3f %ld %ld\n", dlc_rank(samples.v, samples.n, 0.5),
		   dlc_rank(samples.v, samples.n, 0.99), samples.v[samples.n - 1], grants, timeouts);
	free(samples.v);
	return 0;
}
