/*
 * dlock_client.h
 *	  What the libpq client programs of test/, stress/ and bench/ share:
 *	  clocks and sleeps, how they connect, run a statement and look at its
 *	  result, how they die, their random picks, their worker processes,
 *	  latency samples, and the statements and Redis script that more than
 *	  one of them sends.
 *
 * Each program is compiled on its own, with test/lib/dlock_client.c on the
 * same command line; link with -lpq.  A program sets dlc_progname first:
 * every message the library prints starts with it.
 */
#ifndef DLOCK_CLIENT_H
#define DLOCK_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <libpq-fe.h>

/* the name this program's messages start with ("handoff", "checker") */
extern const char *dlc_progname;

/* ---- statements more than one program sends ---- */

/* dlock.release(name, owner): true when the owner held a live lease */
#define DLC_RELEASE_SQL "SELECT dlock.release($1, $2)"

/*
 * A Redis lock's release: compare-and-delete of KEYS[1] if it still holds
 * ARGV[1], atomic because Redis runs a script alone
 */
#define DLC_REDIS_RELEASE_SCRIPT \
	"if redis.call('GET', KEYS[1]) == ARGV[1] then " \
	"return redis.call('DEL', KEYS[1]) end return 0"

/* ---- clocks ---- */

/* CLOCK_REALTIME: seconds since the epoch, comparable across processes */
double		dlc_wall_s(void);

/* CLOCK_MONOTONIC, in seconds and in milliseconds: for durations */
double		dlc_mono_s(void);
double		dlc_mono_ms(void);

/* sleep MS milliseconds in full (a signal does not cut it short) */
void		dlc_sleep_ms(double ms);

/* ---- messages and death ---- */

/* "PROGNAME: WHAT: " and the connection's error message, then exit 1 */
void		dlc_die(const char *what, const PGconn *conn) __attribute__((noreturn));

/* "PROGNAME: " and the formatted message and a newline, then exit 1 */
void		dlc_fatal(const char *fmt,...)
			__attribute__((noreturn, format(printf, 1, 2)));

/*
 * "WHAT: MSG" into buf, without the newlines libpq ends its messages with;
 * a NULL msg reads "(no message)"
 */
void		dlc_message(char *buf, size_t size, const char *what, const char *msg);

/* a test worker's check failed: says so on stderr; returns 1, its status */
int			dlc_failed(int worker, const char *what, const PGresult *res);

/* ---- connections and statements ---- */

/* a connection, or death */
PGconn	   *dlc_connect_or_die(const char *conninfo);

/*
 * one try at a connection: NULL after a pause of pause_ms when it failed,
 * so that a loop of tries does not spin while a server is away
 */
PGconn	   *dlc_connect_or_pause(const char *conninfo, int pause_ms);

/*
 * a connection (its status for the caller to check) from the libpq
 * environment, named application_name in pg_stat_activity
 */
PGconn	   *dlc_connect_as(const char *application_name);

/* PQexecParams with text parameters and results */
PGresult   *dlc_exec(PGconn *conn, const char *sql, int nparams,
					 const char *const *params);

/* the statement succeeded: rows, or a command */
bool		dlc_result_ok(const PGresult *res);

/*
 * one statement; NULL, and *conn closed and set to NULL, on any error (for
 * clients that ride out failovers by reconnecting)
 */
PGresult   *dlc_exec_or_drop(PGconn **conn, const char *sql, int nparams,
							 const char *const *params);

/* the SQLSTATE of a result, "" when it has none */
const char *dlc_sqlstate(const PGresult *res);
bool		dlc_has_sqlstate(const PGresult *res, const char *code);

/* a value of a result (a token, a time) copied into buf; returns buf */
char	   *dlc_copy_value(char *buf, size_t size, const PGresult *res, int row, int col);

/* read and clear the results of a query sent, to its end */
void		dlc_drain(PGconn *conn);

/*
 * cancel a query sent and still waiting, and read its results: a waiting
 * backend does not notice that its client closed the connection
 */
void		dlc_cancel_and_drain(PGconn *conn);

/* ---- random picks ---- */

/* 1 .. n, from random() (srandom seeds it) */
int			dlc_pick(int n);

/* 1 .. n, from rand_r(seed): one sequence a thread */
int			dlc_pick_r(unsigned int *seed, int n);

/* ---- worker processes ---- */

/* handler for signo, with no SA_RESTART: a pause or a wait ends at once */
void		dlc_catch_signal(int signo, void (*handler) (int));

/*
 * fork n workers, worker w running body(w, arg) and exiting with what it
 * returns; their pids (malloc'ed), or NULL when a fork failed (the ones
 * started run on)
 */
pid_t	   *dlc_fork_workers(int n, int (*body) (int w, void *arg), void *arg);

/*
 * wait for the n workers: 0 when every one exited with 0, 1 when one did
 * not, 2 when waiting failed.  A signal that interrupts the wait is passed
 * on to them as pass_signal (none when 0).
 */
int			dlc_wait_workers(const pid_t *pids, int n, int pass_signal);

/* both: 2 when a fork failed, else what dlc_wait_workers says */
int			dlc_run_workers(int n, int (*body) (int w, void *arg), void *arg);

/* ---- latency samples ---- */

typedef struct DlcSamples
{
	double	   *v;
	long		n;
	long		cap;
} DlcSamples;

/* add one sample (death when memory runs out) */
void		dlc_samples_add(DlcSamples *s, double x);

/* add every sample of from to to */
void		dlc_samples_append(DlcSamples *to, const DlcSamples *from);

/* the mean of n samples (0 for none) */
double		dlc_mean(const double *v, long n);

/* sort ascending */
void		dlc_sort(double *v, long n);

/* of n sorted samples, the smallest that at least share of them do not exceed */
double		dlc_rank(const double *sorted, long n, double share);

/*
 * every sample, in milliseconds, one a line, in the order they were taken,
 * to the file path names (nothing when path is NULL or empty)
 */
void		dlc_write_samples(const char *path, const double *v, long n);

#endif							/* DLOCK_CLIENT_H */
