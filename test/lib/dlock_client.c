/*
 * dlock_client.c
 *	  The helpers that the libpq client programs of test/, stress/ and
 *	  bench/ share (dlock_client.h says what each does).
 *
 * Nothing here keeps state but dlc_progname, so the threads of a bench
 * program may call every function at once.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "dlock_client.h"

const char *dlc_progname = "client";

/* ---- clocks ---- */

static double
clock_s(clockid_t which)
{
	struct timespec ts;

	clock_gettime(which, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

double
dlc_wall_s(void)
{
	return clock_s(CLOCK_REALTIME);
}

double
dlc_mono_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

double
dlc_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

void
dlc_sleep_ms(double ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = (time_t) (ms / 1000);
	ts.tv_nsec = (long) ((ms - ts.tv_sec * 1000.0) * 1e6);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- messages and death ---- */

void
dlc_die(const char *what, const PGconn *conn)
{
	fprintf(stderr, "%s: %s: %s", dlc_progname, what, conn ? PQerrorMessage(conn) : "\n");
	exit(1);
}

void
dlc_fatal(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", dlc_progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void
dlc_message(char *buf, size_t size, const char *what, const char *msg)
{
	size_t		len;

	snprintf(buf, size, "%s: %s", what, msg ? msg : "(no message)");
	len = strlen(buf);
	while (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
}

int
dlc_failed(int worker, const char *what, const PGresult *res)
{
	fprintf(stderr, "worker %d: %s%s%s\n", worker, what,
			res ? ": " : "", res ? PQresultErrorMessage(res) : "");
	fflush(stderr);
	return 1;
}

/* ---- connections and statements ---- */

PGconn *
dlc_connect_or_die(const char *conninfo)
{
	PGconn	   *conn = PQconnectdb(conninfo);

	if (PQstatus(conn) != CONNECTION_OK)
		dlc_die("connect", conn);
	return conn;
}

PGconn *
dlc_connect_or_pause(const char *conninfo, int pause_ms)
{
	PGconn	   *conn = PQconnectdb(conninfo);

	if (PQstatus(conn) == CONNECTION_OK)
		return conn;
	PQfinish(conn);
	usleep(pause_ms * 1000);
	return NULL;
}

PGconn *
dlc_connect_as(const char *application_name)
{
	const char *keys[] = {"application_name", NULL};
	const char *vals[] = {application_name, NULL};

	return PQconnectdbParams(keys, vals, 0);
}

PGresult *
dlc_exec(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	return PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
}

bool
dlc_result_ok(const PGresult *res)
{
	ExecStatusType s = PQresultStatus(res);

	return s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK;
}

PGresult *
dlc_exec_or_drop(PGconn **conn, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = dlc_exec(*conn, sql, nparams, params);

	if (dlc_result_ok(res))
		return res;
	PQclear(res);
	PQfinish(*conn);
	*conn = NULL;
	return NULL;
}

const char *
dlc_sqlstate(const PGresult *res)
{
	const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return s ? s : "";
}

bool
dlc_has_sqlstate(const PGresult *res, const char *code)
{
	return strcmp(dlc_sqlstate(res), code) == 0;
}

char *
dlc_copy_value(char *buf, size_t size, const PGresult *res, int row, int col)
{
	snprintf(buf, size, "%s", PQgetvalue(res, row, col));
	return buf;
}

void
dlc_drain(PGconn *conn)
{
	PGresult   *res;

	while ((res = PQgetResult(conn)) != NULL)
		PQclear(res);
}

void
dlc_cancel_and_drain(PGconn *conn)
{
	PGcancel   *cancel = PQgetCancel(conn);
	char		errbuf[256];

	PQcancel(cancel, errbuf, sizeof(errbuf));
	PQfreeCancel(cancel);
	dlc_drain(conn);
}

/* ---- random picks ---- */

int
dlc_pick(int n)
{
	return 1 + (int) (random() % n);
}

int
dlc_pick_r(unsigned int *seed, int n)
{
	return 1 + (int) (rand_r(seed) % (unsigned) n);
}

/* ---- worker processes ---- */

void
dlc_catch_signal(int signo, void (*handler) (int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sigaction(signo, &sa, NULL);
}

pid_t *
dlc_fork_workers(int n, int (*body) (int w, void *arg), void *arg)
{
	pid_t	   *pids = calloc(n > 0 ? n : 1, sizeof(pid_t));

	if (pids == NULL)
		return NULL;
	/* nothing buffered before the fork is written twice */
	fflush(stdout);
	fflush(stderr);
	for (int w = 0; w < n; w++)
	{
		pid_t		pid = fork();

		if (pid == 0)
		{
			int			status = body(w, arg);

			fflush(stdout);
			_exit(status);
		}
		if (pid < 0)
		{
			free(pids);
			return NULL;
		}
		pids[w] = pid;
	}
	return pids;
}

int
dlc_wait_workers(const pid_t *pids, int n, int pass_signal)
{
	int			status = 0;

	for (int w = 0; w < n; w++)
	{
		int			ws;

		while (waitpid(pids[w], &ws, 0) < 0)
		{
			if (errno != EINTR)
				return 2;
			if (pass_signal != 0)
				for (int v = 0; v < n; v++)
					kill(pids[v], pass_signal);
		}
		if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
			status = 1;
	}
	return status;
}

int
dlc_run_workers(int n, int (*body) (int w, void *arg), void *arg)
{
	pid_t	   *pids = dlc_fork_workers(n, body, arg);
	int			status;

	if (pids == NULL)
		return 2;
	status = dlc_wait_workers(pids, n, 0);
	free(pids);
	return status;
}

/* ---- latency samples ---- */

void
dlc_samples_add(DlcSamples *s, double x)
{
	if (s->n == s->cap)
	{
		s->cap = s->cap ? s->cap * 2 : 4096;
		s->v = realloc(s->v, s->cap * sizeof(double));
		if (s->v == NULL)
			dlc_fatal("out of memory");
	}
	s->v[s->n++] = x;
}

void
dlc_samples_append(DlcSamples *to, const DlcSamples *from)
{
	for (long i = 0; i < from->n; i++)
		dlc_samples_add(to, from->v[i]);
}

double
dlc_mean(const double *v, long n)
{
	double		sum = 0;

	for (long i = 0; i < n; i++)
		sum += v[i];
	return n > 0 ? sum / n : 0;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

void
dlc_sort(double *v, long n)
{
	qsort(v, n, sizeof(double), cmp_double);
}

double
dlc_rank(const double *sorted, long n, double share)
{
	double		at = share * n;
	long		i = (long) at;

	/* the rank is at rounded up, counted from 1 */
	if (i < at)
		i++;
	return sorted[i < 1 ? 0 : i - 1];
}

void
dlc_write_samples(const char *path, const double *v, long n)
{
	FILE	   *f;

	if (path == NULL || path[0] == '\0')
		return;
	if ((f = fopen(path, "w")) == NULL)
		dlc_fatal("%s: %s", path, strerror(errno));
	for (long i = 0; i < n; i++)
		fprintf(f, "%.3f\n", v[i]);
	if (fclose(f) != 0)
		dlc_fatal("%s: %s", path, strerror(errno));
}
