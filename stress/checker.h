/*
 * checker.h
 *	  What the modes of the stress checker share: the options, the seeded
 *	  random schedule, the connection to a local server only, the worker
 *	  processes (started, reaped and killed by the parent) and the verdict.
 *	  The clock and the libpq helpers are test/lib/dlock_client.h's.
 *
 * checker.c owns these and the lock-guarded set and semaphore modes;
 * kinds.c owns the mixed-kinds mode (--kinds).
 */
#ifndef DLOCK_STRESS_CHECKER_H
#define DLOCK_STRESS_CHECKER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "../test/lib/dlock_client.h"

#define MAX_WORKERS		64
/* how long workers may take to wind down after the deadline */
#define GRACE_MS		20000

/* the options (see usage() in checker.c) */
extern int	n_workers;
extern int	run_seconds;
extern int	fenced;
extern int	workers_given;
extern uint64_t seed;

/* --edition: which edition of dlock a run needs */
enum edition
{
	EDITION_ANY,				/* whichever the database has; else the C edition */
	EDITION_C,					/* extension dlock, created if missing */
	EDITION_SQL					/* schema dlock of sql-edition/dlock.sql, installed beforehand */
};
extern enum edition edition_wanted;

/* the seeded schedule: each process has its own state */
extern uint64_t rng_state;
uint64_t	rng_next(void);
int			rand_between(int lo, int hi);
int			chance(int percent);

/* a sleep until a time of dlc_mono_ms() */
int			sleep_until(double t_ms);

/* set by SIGINT, SIGTERM or SIGHUP in the parent */
extern volatile sig_atomic_t interrupted;

PGconn	   *connect_parent(void);

/*
 * Before a mode sets up its tables: make sure the database has dlock, of
 * the edition wanted (the C edition's extension is created when the
 * database has neither), and say which; 0, having said why, if not
 */
int			use_dlock(PGconn *conn);

/*
 * After a wait for a lease that ran out of time (55P03): 1 if the session
 * holds no place in any name's queue, as it must; 0 if it does, -1 if
 * dlock.locks could not be read (msg says which, or why)
 */
int			queue_left(PGconn *conn, char *msg, size_t size);
void	   *map_shared(size_t bytes);

/*
 * Fork n_workers workers, each running body(w, deadline) with its own
 * seeded schedule and exiting with what it returns; 0 if a fork failed
 * (the ones started are killed)
 */
int			start_workers(int (*body) (int w, double deadline), double deadline);
/* 0 if interrupted; else wait for the workers and kill stragglers */
int			wait_children(double until);
void		kill_children(void);
/* print why worker w did not exit with 0; 1 if it did */
int			worker_exited_cleanly(int w);

/*
 * the RESULT line and the exit status: a fenced run passes with no
 * anomalies, clean and having tested something; a control run (--no-fence)
 * must find its anomalies.  A fenced run that found nothing wrong but
 * tested too little returns RUN_UNDECIDED, and main() runs it again.
 */
#define RUN_UNDECIDED	3
int			result_line(int anomalies, int clean, int tested);

/* the mixed-kinds mode */
int			kinds_main(void);

#endif							/* DLOCK_STRESS_CHECKER_H */
