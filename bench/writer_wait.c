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
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

static void
die(const char *what, PGconn *conn)
{
	fprintf(stderr, "writer_wait: %s: %s", what, conn ? PQerrorMessage(conn) : "\n");
	exit(1);
}

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void
sleep_ms(double ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = (time_t) (ms / 1000);
	ts.tv_nsec = (long) ((ms - ts.tv_sec * 1000.0) * 1e6);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

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
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	Attempt		result;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		result = PQgetisnull(res, 0, 0) ? REFUSED : GRANTED;
	else if (PQresultStatus(res) == PGRES_FATAL_ERROR && sqlstate != NULL &&
			 strcmp(sqlstate, "55P03") == 0)
		result = TIMED_OUT;
	else
		die(sql, conn);
	PQclear(res);
	return result;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* write_samples - the raw samples to the file WRITER_SAMPLES names, if any */
static void
write_samples(const double *samples, long n)
{
	const char *path = getenv("WRITER_SAMPLES");
	FILE	   *f;

	if (path == NULL || path[0] == '\0')
		return;
	if ((f = fopen(path, "w")) == NULL)
	{
		fprintf(stderr, "writer_wait: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	for (long i = 0; i < n; i++)
		fprintf(f, "%.3f\n", samples[i]);
	if (fclose(f) != 0)
	{
		fprintf(stderr, "writer_wait: %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

/* rank - the smallest sample that at least share of them do not exceed */
static double
rank(const double *sorted, long n, double share)
{
	long		i = (long) ceil(share * n) - 1;

	return sorted[i < 0 ? 0 : i];
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
	double	   *samples = NULL;
	long		n = 0,
				cap = 0,
				grants = 0,
				timeouts = 0;
	double		deadline;

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

	conn = PQconnectdb("");
	if (PQstatus(conn) != CONNECTION_OK)
		die("connect", conn);
	sleep_ms(delay_ms);
	deadline = now_ms() + seconds * 1000.0;

	while (now_ms() < deadline)
	{
		double		start = now_ms();
		Attempt		a;

		while ((a = attempt(conn, acquire)) == REFUSED)
		{
			/* A poll that would end after the timeout is not started */
			if (poll_ms == 0 || now_ms() + poll_ms - start >= timeout_ms)
			{
				a = TIMED_OUT;
				break;
			}
			sleep_ms(poll_ms);
		}
		if (n == cap)
		{
			cap = cap ? cap * 2 : 4096;
			samples = realloc(samples, cap * sizeof(double));
			if (samples == NULL)
			{
				fprintf(stderr, "writer_wait: out of memory\n");
				return 1;
			}
		}
		samples[n++] = now_ms() - start;
		if (a == GRANTED)
		{
			PGresult   *res;

			grants++;
			sleep_ms(hold_ms);
			res = PQexec(conn, release);
			if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
				strcmp(PQgetvalue(res, 0, 0), "t") != 0)
				die("release did not return true", PQresultStatus(res) == PGRES_TUPLES_OK ? NULL : conn);
			PQclear(res);
		}
		else
			timeouts++;
		sleep_ms(pause_ms);
	}
	PQfinish(conn);
	if (n == 0)
	{
		fprintf(stderr, "writer_wait: no attempt made\n");
		return 1;
	}

	write_samples(samples, n);
	qsort(samples, n, sizeof(double), cmp_double);
	printf("%.3f %.3f %.3f %ld %ld\n", rank(samples, n, 0.5), rank(samples, n, 0.99),
		   samples[n - 1], grants, timeouts);
	free(samples);
	return 0;
}
