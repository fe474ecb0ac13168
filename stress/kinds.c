/*
 * kinds.c
 *	  The stress checker's mixed-kinds mode (--kinds): exclusive leases,
 *	  shared leases, permits of two different sizes and sets, all on the same
 *	  few names at once, judged from fenced writes and from dlock.leases.
 *
 * The claim under test
 *	  Two leases of one name are never live at once unless their kinds allow
 *	  it: an exclusive lease (or a set's lease of the name) is alone; shared
 *	  leases go with shared leases only; permits go with permits of the same
 *	  max_holders only, at most max_holders of them.  And a token that has
 *	  passed dlock.fence() stays in force until its transaction ends: no
 *	  conflicting grant of the name can commit meanwhile.  The set and
 *	  semaphore modes test one kind each; the engine's hard cases are where
 *	  kinds meet: an exclusive try_acquire deciding while a shared grant or a
 *	  permit is being made alongside, a renew in flight at the expiry of a
 *	  shared lease or permit while another owner's grant takes the slot,
 *	  first permits of one name asked with different max_holders.
 *
 * The schedule
 *	  N workers (12 unless --workers says otherwise), each with its own
 *	  connection and owner, loop on three names (the first gets most of the
 *	  traffic).  Each turn, a worker either asks for a lease or does one of
 *	  the things that change leases from outside: force_release, purge with
 *	  older_than 0 (right after a force_release, so that names often have
 *	  no rows left and the next grants race as first grants), or a watch
 *	  with a short timeout.  A lease is exclusive,
 *	  shared, a permit with max_holders 2 or 3, or a set of two or three
 *	  names, asked with try_acquire (try_acquire_all) or with acquire
 *	  (acquire_all) and a short timeout, for a ttl of 200 to 500 ms.  A
 *	  request whose max_holders disagree with the live permits' (an
 *	  exclusive or shared request counts as max_holders 1) is refused with
 *	  22023: counted, not a failure.  Each grant has an owner of its own, so
 *	  that a lease left to expire is never handed back to its worker by a
 *	  later request.  A holder then:
 *		1. reads dlock.leases (check b below);
 *		2. enters: one transaction per name that records it "inside";
 *		3. holds: renews once or twice just before its expiry (half of them
 *		   aimed at the expiry itself), or works for a while, or overstays
 *		   its ttl, or (most often) leaves at once;
 *		4. leaves: one transaction per name that records it "outside";
 *		5. releases (now and then lets the lease expire instead).
 *
 * Check (a): fenced writes, judged exactly
 *	  Each name has a row in stress_kinds_names.  Entering and leaving both
 *	  begin with UPDATE of that row WHERE dlock.fence(name, token), so they
 *	  are serialized per name by the row lock, and a holder whose fence is
 *	  false does not enter.  Entering then, in one statement (READ COMMITTED:
 *	  its snapshot is taken after the row lock was granted, so it sees every
 *	  entry and exit of the name that committed before), copies the holders
 *	  inside the name into stress_kinds_seen and adds its own row to
 *	  stress_kinds_inside.  Leaving deletes that row and records in
 *	  stress_kinds_left whether its fence was true; a holder whose fence is
 *	  false leaves all the same, without the fence, and is recorded so.
 *	  A pair (observer o, seen holder s) is an overlap when their kinds
 *	  conflict and s left with a true fence.  That is exact:
 *	  - no false overlap: s's row was there when o looked, so s entered
 *	    (fence true) before o's transaction and left after it ended, with a
 *	    fence evaluated after that end (it waited for o's row lock, or
 *	    started after it).  A token true at both ends was live all along
 *	    (renew extends only a live lease; an ended token never comes back).
 *	    So at the end of o's transaction s was live and o held a true fence:
 *	    either s was granted while o's fence was in force, or both were live
 *	    at the moment o's fence was evaluated.  For kinds that conflict both
 *	    break the claim.  A holder that loses its lease before leaving (it
 *	    overstayed, was force-released) is never counted against anyone.
 *	  - no missed overlap among holders inside: entries and exits of a name
 *	    are totally ordered, so of two holders inside at once the later one
 *	    to enter sees the other.
 *	  Permits: an observer permit that saw, with the same max_holders N, N
 *	  or more permits that left with a true fence makes N + 1 slots in use
 *	  at once: counted as "permits over N".  A token granted twice shows up
 *	  as a duplicate key in stress_kinds_inside.
 *	  The writes are fenced; nothing depends on the client's clock.
 *
 * Check (b): dlock.leases after every grant
 *	  Right after each grant, the holder reads the live leases of its names:
 *	  an exclusive lease alongside any other live lease, shared leases and
 *	  permits live together, permits with different max_holders live
 *	  together, or more live permits than their max_holders, are counted.
 *	  The view reads committed rows, each classified live or not by the
 *	  server's clock when read, so a lease that ended before another was
 *	  granted can never both look live.
 *
 * Check (c): leases lost before their expiry
 *	  A holder whose fence is false records when (the server's clock, after
 *	  the fence said no) and the expiry the server last gave it (grant or
 *	  renew).  False before that expiry, with no force_release of the name
 *	  that could have ended the lease (each is recorded with its start and
 *	  end), means another grant took the slot of a live lease: a renew in
 *	  flight at the expiry of a shared lease or permit, overwritten by
 *	  another owner's grant, shows up here, since then no conflicting pair
 *	  is ever inside at once.  Only the server's clock is used.
 *
 * Check (d): a wait that ran out of time left the name's queue
 *	  After each acquire() or acquire_all() that ended with 55P03, the
 *	  worker reads its own session's queue locks in dlock.locks: it must
 *	  hold none (checker.c, queue_left(), says why).  A worker that holds
 *	  one is counted, and starts a new session, which gives the place back.
 *
 * Also failures: XX000 (such as "tuple concurrently updated"), 40P01, any
 * other error but a 55P03 timeout or a 22023 refusal, a worker that did not
 * finish.  A run passes only if it tested something: minimum counts of
 * grants of each kind, of renews near expiry, of holders that shared a
 * name legitimately while a check looked, of force_release, purge, watch.
 *
 * The control (--kinds --no-fence) runs the same schedule with the fences
 * replaced by true; the holders that overstay their ttl must then be seen
 * overlapping with conflicting holders, or check (a) could not tell.
 */
#define _GNU_SOURCE

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <libpq-fe.h>

#include "checker.h"

#define N_NAMES			3
#define NAME_PREFIX		"stress:kinds:"
#define KINDS_WORKERS	16
#define TTL_LO_MS		200
#define TTL_HI_MS		500
/* a renew this close to the expected expiry (or later) is "near expiry" */
#define NEAR_MS			40

enum kind
{
	K_EXCLUSIVE,
	K_SHARED,
	K_PERMIT2,
	K_PERMIT3,
	K_SET,
	N_KINDS
};

static const char *const kind_label[N_KINDS] =
{"exclusive", "shared", "permit/2", "permit/3", "set"};

/* what the table records: kind and max_holders */
static const char *const kind_sql[N_KINDS] =
{"exclusive", "shared", "permit", "permit", "set"};
static const int kind_limit[N_KINDS] = {1, 1, 2, 3, 1};

/* the view's conflicts, check (b) */
enum view_conflict
{
	V_EXCLUSIVE,				/* an exclusive lease alongside another */
	V_SHARED_PERMIT,			/* shared leases and permits together */
	V_LIMITS,					/* permits with different max_holders */
	V_OVER,						/* more permits than their max_holders */
	N_VIEW
};

static const char *const view_label[N_VIEW] =
{"exclusive_with_other", "shared_with_permit", "permit_limits_differ",
"permits_over_max"};

struct kinds_stats
{
	long		asked[N_KINDS];
	long		granted[N_KINDS];
	long		granted_waiting;	/* by acquire or acquire_all */
	long		busy;			/* try_acquire NULL, try_acquire_all no rows */
	long		timeouts;		/* 55P03 */
	long		mismatched;		/* 22023: max_holders disagree */
	long		entered;
	long		entry_refused;	/* fence false when entering */
	long		left_fenced;
	long		left_unfenced;
	long		renews_near;	/* renew asked near (or past) the expiry */
	long		renewed_near;	/* ... and the lease was still live */
	long		released;
	long		released_late;
	long		forced;
	long		forced_true;
	long		purges;
	long		watches;
	long		watch_changed;
	long		view_checks;
	long		view[N_VIEW];
	long		xx000;
	long		deadlocks;
	long		twice;			/* a token entered twice on a name: 23505 */
	long		queue_kept;		/* check (d): a place in a queue left after a timeout */
	long		errors;			/* every unexpected error, the above included */
	char		first_error[256];
	char		first_view[256];
};

static struct kinds_stats *kst;
static const char *names[N_NAMES];
static char name_buf[N_NAMES][32];

/* ---------- worker side ---------- */

static void
kinds_error(struct kinds_stats *st, const char *what, const PGresult *res,
			PGconn *conn)
{
	const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);

	if (res && dlc_has_sqlstate(res, "XX000"))
		st->xx000++;
	else if (res && dlc_has_sqlstate(res, "40P01"))
		st->deadlocks++;
	else if (res && dlc_has_sqlstate(res, "23505"))
		st->twice++;
	st->errors++;
	if (st->first_error[0] == '\0')
		dlc_message(st->first_error, sizeof(st->first_error), what,
					msg && *msg ? msg : NULL);
}

/* a failure the server did not report */
static void
kinds_failure(struct kinds_stats *st, const char *msg)
{
	st->errors++;
	if (st->first_error[0] == '\0')
		snprintf(st->first_error, sizeof(st->first_error), "%s", msg);
}

/* a statement whose result is not needed; 0 (counted) if it failed */
static int
run_ok(PGconn *conn, struct kinds_stats *st, const char *what, const char *sql,
	   int n, const char *const *params)
{
	PGresult   *res = dlc_exec(conn, sql, n, params);
	int			ok = dlc_result_ok(res);

	if (!ok)
		kinds_error(st, what, res, conn);
	PQclear(res);
	return ok;
}

static void
abort_transaction(PGconn *conn)
{
	if (PQstatus(conn) == CONNECTION_OK &&
		PQtransactionStatus(conn) != PQTRANS_IDLE)
		PQclear(PQexec(conn, "ROLLBACK"));
}

/* the lease a worker holds */
struct holding
{
	enum kind	kind;
	int			n;				/* names held */
	int			idx[N_NAMES];	/* which names */
	int			inside[N_NAMES];	/* entered, not yet left */
	char		token[32];
	char		array[128];		/* the names as a text[] literal */
	char		since[48];		/* the server's clock just after the grant */
	char		expires[48];	/* the expiry the server last gave */
};

/*
 * Ask for a lease of the kind; 1 when granted (h filled in), 0 otherwise,
 * with the reason counted, -1 when the wait timed out and left the session
 * in a queue (check (d): the session must be replaced)
 */
static int
ask(PGconn *conn, struct kinds_stats *st, const char *owner, enum kind k,
	int waiting, int ttl, struct holding *h)
{
	char		ttl_txt[24];
	char		timeout_txt[24];
	char		limit_txt[8];
	const char *params[6];
	const char *sql;
	PGresult   *res;
	int			n;

	memset(h, 0, sizeof(*h));
	h->kind = k;
	if (k == K_SET)
	{
		/* two or three of the names, in a random order */
		int			first = rand_between(0, N_NAMES - 1);
		int			step = rand_between(1, N_NAMES - 1);

		h->n = chance(50) ? 2 : N_NAMES;
		/* N_NAMES is prime: any step visits each name once */
		for (int i = 0; i < h->n; i++)
			h->idx[i] = (first + i * step) % N_NAMES;
	}
	else
	{
		/*
		 * Name 0 is where exclusive and shared leases meet, name 1 where
		 * permits of both sizes meet shared leases, name 2 gets everything
		 */
		int			r = rand_between(0, 99);

		h->n = 1;
		if (k == K_EXCLUSIVE)
			h->idx[0] = r < 65 ? 0 : 2;
		else if (k == K_SHARED)
			h->idx[0] = r < 50 ? 0 : r < 75 ? 1 : 2;
		else
			h->idx[0] = r < 65 ? 1 : 2;
	}
	snprintf(h->array, sizeof(h->array), "{");
	for (int i = 0; i < h->n; i++)
		snprintf(h->array + strlen(h->array), sizeof(h->array) - strlen(h->array),
				 "%s%s", i ? "," : "", names[h->idx[i]]);
	strncat(h->array, "}", sizeof(h->array) - strlen(h->array) - 1);

	snprintf(ttl_txt, sizeof(ttl_txt), "%d ms", ttl);
	snprintf(timeout_txt, sizeof(timeout_txt), "%d ms",
			 k == K_SET ? rand_between(200, 600) : rand_between(20, 150));
	snprintf(limit_txt, sizeof(limit_txt), "%d", kind_limit[k]);
	params[1] = ttl_txt;
	params[2] = owner;
	if (k == K_SET)
	{
		params[0] = h->array;
		params[3] = timeout_txt;
		sql = waiting ?
			"SELECT token, expires_at, clock_timestamp()"
			" FROM dlock.acquire_all($1::text[], $2::interval, $3, $4::interval)" :
			"SELECT token, expires_at, clock_timestamp()"
			" FROM dlock.try_acquire_all($1::text[], $2::interval, $3)";
		n = waiting ? 4 : 3;
	}
	else
	{
		params[0] = names[h->idx[0]];
		params[3] = k == K_SHARED ? "true" : "false";
		params[4] = limit_txt;
		params[5] = timeout_txt;
		sql = waiting ?
			"SELECT token, expires_at, clock_timestamp()"
			" FROM dlock.acquire($1, $2::interval, $3, timeout => $6::interval,"
			" shared => $4::boolean, max_holders => $5::int)" :
			"SELECT token, expires_at, clock_timestamp()"
			" FROM dlock.try_acquire($1, $2::interval, $3,"
			" shared => $4::boolean, max_holders => $5::int)";
		n = waiting ? 6 : 5;
	}

	st->asked[k]++;
	res = dlc_exec(conn, sql, n, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		if (dlc_has_sqlstate(res, "55P03"))
		{
			st->timeouts++;
			if (waiting)
			{
				char		msg[256];
				int			left;

				PQclear(res);
				left = queue_left(conn, msg, sizeof(msg));
				if (left < 0)
					kinds_failure(st, msg);
				else if (!left)
				{
					st->queue_kept++;
					if (st->first_error[0] == '\0')
						snprintf(st->first_error, sizeof(st->first_error), "%s", msg);
					return -1;
				}
				return 0;
			}
		}
		else if (dlc_has_sqlstate(res, "22023"))
			st->mismatched++;
		else
			kinds_error(st, "grant", res, conn);
		PQclear(res);
		return 0;
	}
	if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0))
	{
		st->busy++;
		PQclear(res);
		return 0;
	}
	if (PQntuples(res) != h->n)
	{
		char		msg[80];

		snprintf(msg, sizeof(msg), "grant: %d rows for a set of %d names",
				 PQntuples(res), h->n);
		kinds_failure(st, msg);
		PQclear(res);
		return 0;
	}
	snprintf(h->token, sizeof(h->token), "%s", PQgetvalue(res, 0, 0));
	snprintf(h->expires, sizeof(h->expires), "%s", PQgetvalue(res, 0, 1));
	snprintf(h->since, sizeof(h->since), "%s", PQgetvalue(res, 0, 2));
	PQclear(res);
	st->granted[k]++;
	if (waiting)
		st->granted_waiting++;
	return 1;
}

/* Check (b): the live leases of the names just granted */
static void
check_view(PGconn *conn, struct kinds_stats *st, int w, const struct holding *h)
{
	const char *params[1] = {h->array};
	PGresult   *res = dlc_exec(conn,
							   "SELECT name,"
							   " count(*) FILTER (WHERE NOT shared AND max_holders = 1),"
							   " count(*) FILTER (WHERE shared),"
							   " count(*) FILTER (WHERE max_holders > 1),"
							   " coalesce(min(max_holders) FILTER (WHERE max_holders > 1), 0),"
							   " coalesce(max(max_holders) FILTER (WHERE max_holders > 1), 0),"
							   " string_agg(token || CASE WHEN shared THEN 's'"
							   "   WHEN max_holders > 1 THEN 'p' || max_holders ELSE 'x' END,"
							   "   ' ' ORDER BY token)"
							   " FROM dlock.leases WHERE name = ANY ($1::text[]) AND state = 'live'"
							   " GROUP BY name",
							   1, params);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		kinds_error(st, "reading dlock.leases", res, conn);
		PQclear(res);
		return;
	}
	st->view_checks++;
	for (int i = 0; i < PQntuples(res); i++)
	{
		long		x = atol(PQgetvalue(res, i, 1));
		long		s = atol(PQgetvalue(res, i, 2));
		long		p = atol(PQgetvalue(res, i, 3));
		long		lo = atol(PQgetvalue(res, i, 4));
		long		hi = atol(PQgetvalue(res, i, 5));
		int			bad = 0;

		if (x > 0 && x + s + p > 1)
			bad |= 1 << V_EXCLUSIVE;
		if (s > 0 && p > 0)
			bad |= 1 << V_SHARED_PERMIT;
		if (lo != hi)
			bad |= 1 << V_LIMITS;
		if (p > 0 && p > lo)
			bad |= 1 << V_OVER;
		for (int v = 0; v < N_VIEW; v++)
			if (bad & (1 << v))
				st->view[v]++;
		if (bad && st->first_view[0] == '\0')
			snprintf(st->first_view, sizeof(st->first_view),
					 "after a grant of %s to w%d (token %s): live on %s: %s",
					 kind_label[h->kind], w, h->token, PQgetvalue(res, i, 0),
					 PQgetvalue(res, i, 6));
	}
	PQclear(res);
}

/*
 * Lock the name's row, with the fence in the WHERE clause (or without it:
 * the control, or a holder leaving after it lost its lease); 1 if the row
 * was updated, 0 if the fence said no, -1 on an error (rolled back)
 */
static int
lock_name(PGconn *conn, struct kinds_stats *st, const char *name,
		  const char *token, int with_fence)
{
	const char *params[2] = {name, token};
	PGresult   *res;
	int			one;

	if (!run_ok(conn, st, "begin", "BEGIN", 0, NULL))
	{
		abort_transaction(conn);
		return -1;
	}
	res = dlc_exec(conn, with_fence ?
				  "UPDATE stress_kinds_names SET changes = changes + 1"
				  " WHERE name = $1 AND dlock.fence($1, $2::bigint)" :
				  "UPDATE stress_kinds_names SET changes = changes + 1"
				  " WHERE name = $1 AND $2::bigint IS NOT NULL",
				  2, params);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		kinds_error(st, "lock the name's row", res, conn);
		PQclear(res);
		abort_transaction(conn);
		return -1;
	}
	one = strcmp(PQcmdTuples(res), "1") == 0;
	PQclear(res);
	if (!one)
		abort_transaction(conn);
	return one;
}

/*
 * A holder found its fence false: record when, on the server's clock (after
 * the fence said no), with the expiry the server last gave it; check (c)
 */
static void
record_loss(PGconn *conn, struct kinds_stats *st, const struct holding *h, int i)
{
	const char *params[5] = {names[h->idx[i]], h->token, kind_sql[h->kind],
	h->expires, h->since};

	run_ok(conn, st, "record a lost lease",
		   "INSERT INTO stress_kinds_lost"
		   " VALUES ($1, $2::bigint, $3, clock_timestamp(), $4::timestamptz, $5::timestamptz)",
		   5, params);
}

/* Check (a), entering: record whoever is inside, then go in */
static void
enter(PGconn *conn, struct kinds_stats *st, int w, struct holding *h, int i)
{
	const char *name = names[h->idx[i]];
	char		limit[8];
	char		worker[8];
	const char *params[5];
	int			r;

	r = lock_name(conn, st, name, h->token, fenced);
	if (r == 0)
	{
		st->entry_refused++;
		record_loss(conn, st, h, i);
	}
	if (r != 1)
		return;
	snprintf(limit, sizeof(limit), "%d", kind_limit[h->kind]);
	snprintf(worker, sizeof(worker), "%d", w);
	params[0] = name;
	params[1] = h->token;
	params[2] = kind_sql[h->kind];
	params[3] = limit;
	params[4] = worker;
	/* one statement, one snapshot: the holders inside, not this one */
	if (!run_ok(conn, st, "enter",
				"WITH seen AS (INSERT INTO stress_kinds_seen"
				"  SELECT $1, $2::bigint, $3, $4::int, $5::int, i.token, i.kind, i.lim, i.worker"
				"    FROM stress_kinds_inside i WHERE i.name = $1)"
				" INSERT INTO stress_kinds_inside VALUES ($1, $2::bigint, $3, $4::int, $5::int)",
				5, params) ||
		!run_ok(conn, st, "commit the entry", "COMMIT", 0, NULL))
	{
		abort_transaction(conn);
		return;
	}
	h->inside[i] = 1;
	st->entered++;
}

/* Check (a), leaving: with a true fence if possible, else without it */
static void
leave(PGconn *conn, struct kinds_stats *st, struct holding *h, int i)
{
	const char *name = names[h->idx[i]];
	const char *params[3];
	int			r;

	if (!h->inside[i])
		return;
	r = lock_name(conn, st, name, h->token, fenced);
	if (r == 0)
	{
		record_loss(conn, st, h, i);
		r = lock_name(conn, st, name, h->token, 0);
	}
	else if (r == 1)
		r = 2;					/* left under a true fence */
	if (r < 0)
		return;
	params[0] = name;
	params[1] = h->token;
	params[2] = r == 2 ? "true" : "false";
	if (!run_ok(conn, st, "leave",
				"WITH gone AS (DELETE FROM stress_kinds_inside"
				"  WHERE name = $1 AND token = $2::bigint RETURNING 1)"
				" INSERT INTO stress_kinds_left SELECT $1, $2::bigint, $3::boolean FROM gone",
				3, params) ||
		!run_ok(conn, st, "commit the exit", "COMMIT", 0, NULL))
	{
		abort_transaction(conn);
		return;
	}
	h->inside[i] = 0;
	if (r == 2)
		st->left_fenced++;
	else
		st->left_unfenced++;
}

/*
 * Renew just before the expiry the client expects (or a little after it):
 * the server's expiry is a little earlier still, so some of these race it.
 * Returns 0 once the lease has ended.
 */
static int
renew_near_expiry(PGconn *conn, struct kinds_stats *st, const char *owner,
				  struct holding *h, double *expiry, int ttl)
{
	char		ttl_txt[24];
	const char *params[3];
	PGresult   *res;
	double		sent;
	int			live;

	/* half of them aimed at the expiry itself, within a few milliseconds */
	sleep_until(*expiry - (chance(50) ? rand_between(-3, 3) : rand_between(-10, NEAR_MS)));
	snprintf(ttl_txt, sizeof(ttl_txt), "%d ms", ttl);
	params[0] = names[h->idx[0]];
	params[1] = owner;
	params[2] = ttl_txt;
	sent = dlc_mono_ms();
	res = dlc_exec(conn, "SELECT token, expires_at FROM dlock.renew($1, $2, $3::interval)",
				  3, params);
	st->renews_near++;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		kinds_error(st, "renew", res, conn);
		PQclear(res);
		return 0;
	}
	live = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0);
	if (live && strcmp(PQgetvalue(res, 0, 0), h->token) != 0)
	{
		char		msg[120];

		snprintf(msg, sizeof(msg), "renew: token %s for a lease granted with token %s",
				 PQgetvalue(res, 0, 0), h->token);
		kinds_failure(st, msg);
		live = 0;
	}
	if (live)
		snprintf(h->expires, sizeof(h->expires), "%s", PQgetvalue(res, 0, 1));
	PQclear(res);
	if (live)
	{
		st->renewed_near++;
		*expiry = sent + ttl;
	}
	return live;
}

/* Things that change leases from outside: force_release, purge, watch */
static void
meddle(PGconn *conn, struct kinds_stats *st, int what)
{
	const char *params[2];
	char		timeout[24];
	PGresult   *res;

	params[0] = names[chance(60) ? 0 : rand_between(1, N_NAMES - 1)];
	if (what == 0)
	{
		/* when it ran, on the server's clock, for check (c) */
		res = dlc_exec(conn, "SELECT dlock.force_release($1), statement_timestamp(), clock_timestamp()",
					  1, params);
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		{
			const char *p[3] = {params[0], PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2)};

			st->forced++;
			st->forced_true += strcmp(PQgetvalue(res, 0, 0), "t") == 0;
			run_ok(conn, st, "record a force_release",
				   "INSERT INTO stress_kinds_forced VALUES ($1, $2::timestamptz, $3::timestamptz)",
				   3, p);
		}
		else
			kinds_error(st, "force_release", res, conn);
	}
	else if (what == 1)
	{
		res = dlc_exec(conn, "SELECT dlock.purge('0')", 0, NULL);
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
			st->purges++;
		else
			kinds_error(st, "purge", res, conn);
	}
	else
	{
		snprintf(timeout, sizeof(timeout), "%d ms", rand_between(20, 200));
		params[1] = timeout;
		res = dlc_exec(conn,
					   "SELECT dlock.watch($1, t, $2::interval) IS DISTINCT FROM t FROM"
					   " (SELECT max(token) AS t FROM dlock.leases"
					   "   WHERE name = $1 AND state = 'live') l",
					   2, params);
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		{
			st->watches++;
			st->watch_changed += strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		}
		else
			kinds_error(st, "watch", res, conn);
	}
	PQclear(res);
}

static enum kind
pick_kind(int w)
{
	int			r = rand_between(0, 99);

	/*
	 * Most turns, a worker asks for its own kind, so that each kind keeps
	 * coming back on its names as fast as the workers can loop: worker 0 mod
	 * 4 exclusive, 1 shared, 2 a permit of either size, 3 anything
	 */
	if (w % 4 != 3 && chance(70))
		return w % 4 == 0 ? K_EXCLUSIVE : w % 4 == 1 ? K_SHARED :
			chance(50) ? K_PERMIT2 : K_PERMIT3;
	if (r < 30)
		return K_EXCLUSIVE;
	if (r < 55)
		return K_SHARED;
	if (r < 70)
		return K_PERMIT2;
	if (r < 85)
		return K_PERMIT3;
	return K_SET;
}

static void
hold_and_release(PGconn *conn, struct kinds_stats *st, int w, const char *owner,
				 struct holding *h, int ttl, double expiry)
{
	int			plan = rand_between(0, 99);
	const char *params[2];
	PGresult   *res;

	check_view(conn, st, w, h);
	for (int i = 0; i < h->n; i++)
		enter(conn, st, w, h, i);

	if (plan < 15 && h->kind != K_SET)
	{
		int			renews = rand_between(1, 2);

		for (int r = 0; r < renews; r++)
			if (!renew_near_expiry(conn, st, owner, h, &expiry, rand_between(TTL_LO_MS, TTL_HI_MS)))
				break;
	}
	else if (plan < 22)
		sleep_until(expiry + rand_between(30, 150));	/* overstay */
	else if (plan < 35)
		sleep_until(dlc_mono_ms() + rand_between(0, ttl / 4));
	/* else out at once: grants, the engine's hard part, come thick and fast */

	for (int i = 0; i < h->n; i++)
		leave(conn, st, h, i);

	if (chance(10))
		return;					/* let it expire */
	params[0] = h->kind == K_SET ? h->array : names[h->idx[0]];
	params[1] = owner;
	res = dlc_exec(conn, h->kind == K_SET ?
				  "SELECT dlock.release_all($1::text[], $2) > 0" :
				  "SELECT dlock.release($1, $2)", 2, params);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
	{
		st->released++;
		st->released_late += strcmp(PQgetvalue(res, 0, 0), "f") == 0;
	}
	else
		kinds_error(st, "release", res, conn);
	PQclear(res);
}

/* a worker's session; NULL (counted) if it cannot have one */
static PGconn *
kinds_connect(struct kinds_stats *st, const char *appname)
{
	PGconn	   *conn = dlc_connect_as(appname);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		kinds_error(st, "connect", NULL, conn);
		PQfinish(conn);
		return NULL;
	}
	/* a wait that never ends is a failure, not a hung test */
	if (!run_ok(conn, st, "set", "SET statement_timeout = '20s'", 0, NULL))
	{
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

static int
kinds_worker(int w, double deadline)
{
	struct kinds_stats *st = &kst[w];
	char		owner[48];
	char		appname[40];
	PGconn	   *conn;
	long		turn = 0;

	snprintf(appname, sizeof(appname), "dlock-stress-kinds-w%d", w);
	conn = kinds_connect(st, appname);
	if (conn == NULL)
		return 2;

	while (dlc_mono_ms() < deadline - 20 && !interrupted)
	{
		int			r = rand_between(0, 999);
		struct holding h;
		int			ttl;
		double		asked;

		if (r < 4)
			meddle(conn, st, 0);
		else if (r < 15)
		{
			/*
			 * End a name's leases, then purge: a name without rows is where
			 * first grants race (two first permits with different
			 * max_holders, say)
			 */
			meddle(conn, st, 0);
			meddle(conn, st, 1);
		}
		else if (r < 50)
			meddle(conn, st, 2);
		else
		{
			enum kind	k = pick_kind(w);
			int			got;

			/*
			 * An owner per grant: asking again as the owner of a lease not
			 * yet ended (one left to expire) would get that same lease back
			 */
			snprintf(owner, sizeof(owner), "kinds-w%d-%ld", w, turn++);
			ttl = rand_between(TTL_LO_MS, TTL_HI_MS);
			asked = dlc_mono_ms();
			/*
			 * Sets wait, most of them: their names are seldom all free at
			 * once, but a waiter is first in each name's queue
			 */
			got = ask(conn, st, owner, k, chance(k == K_SET ? 40 : 10), ttl, &h);
			if (got > 0)
				hold_and_release(conn, st, w, owner, &h, ttl, asked + ttl);
			else if (got < 0)
			{
				/* check (d): a new session gives the place back */
				PQfinish(conn);
				conn = kinds_connect(st, appname);
				if (conn == NULL)
					return 3;
			}
		}
		if (PQstatus(conn) != CONNECTION_OK)
		{
			kinds_error(st, "connection", NULL, conn);
			PQfinish(conn);
			return 3;
		}
	}
	PQfinish(conn);
	return 0;
}

/* ---------- parent side ---------- */

static int
kinds_setup(void)
{
	PGconn	   *conn = connect_parent();
	PGresult   *res;
	char		sql[2048];
	int			ok;

	if (conn == NULL)
		return 0;
	if (!use_dlock(conn))
	{
		PQfinish(conn);
		return 0;
	}
	snprintf(sql, sizeof(sql),
			 "SET client_min_messages = warning;"
			 "DROP TABLE IF EXISTS stress_kinds_names, stress_kinds_inside,"
			 " stress_kinds_seen, stress_kinds_left, stress_kinds_lost, stress_kinds_forced;"
			 "CREATE TABLE stress_kinds_lost (name text NOT NULL, token bigint NOT NULL,"
			 " kind text NOT NULL, at timestamptz NOT NULL, expires timestamptz NOT NULL,"
			 " since timestamptz NOT NULL);"
			 "CREATE TABLE stress_kinds_forced (name text NOT NULL, started timestamptz NOT NULL,"
			 " ended timestamptz NOT NULL);"
			 "CREATE TABLE stress_kinds_names (name text PRIMARY KEY, changes bigint NOT NULL);"
			 "CREATE TABLE stress_kinds_inside (name text, token bigint, kind text NOT NULL,"
			 " lim int NOT NULL, worker int NOT NULL, PRIMARY KEY (name, token));"
			 "CREATE TABLE stress_kinds_seen (name text NOT NULL, observer bigint NOT NULL,"
			 " okind text NOT NULL, olim int NOT NULL, oworker int NOT NULL,"
			 " seen bigint NOT NULL, skind text NOT NULL, slim int NOT NULL,"
			 " sworker int NOT NULL);"
			 "CREATE TABLE stress_kinds_left (name text, token bigint, fenced boolean NOT NULL,"
			 " PRIMARY KEY (name, token));"
			 "INSERT INTO stress_kinds_names"
			 " SELECT '" NAME_PREFIX "' || i, 0 FROM generate_series(0, %d) AS i;"
			 "SELECT dlock.force_release(name) FROM stress_kinds_names;",
			 N_NAMES - 1);
	res = PQexec(conn, sql);
	ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!ok)
		fprintf(stderr, "checker: setup: %s", PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	return ok;
}

struct kinds_verdict
{
	long		overlaps;		/* conflicting pairs, confirmed */
	long		unconfirmed;	/* conflicting pairs whose seen holder lost its lease */
	long		over;			/* permit observers that made N + 1 */
	int			most_permits;	/* most permits of one size inside at once */
	long		legit;			/* holders inside together legitimately, seen */
	long		still_inside;
	long		lost_early;		/* check (c) */
	long		lost;
	char		pairs[512];		/* the overlaps by kinds */
};

static int
query_long(PGconn *conn, const char *sql, long *out, int n)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
		PQnfields(res) != n)
	{
		fprintf(stderr, "checker: verdict: %s", PQerrorMessage(conn));
		PQclear(res);
		return 0;
	}
	for (int i = 0; i < n; i++)
		out[i] = atol(PQgetvalue(res, 0, i));
	PQclear(res);
	return 1;
}

/* the pairs of seen holders, and whether they conflict and were confirmed */
#define PAIRS_CTE \
	"WITH c AS (SELECT s.*, coalesce(l.fenced, false) AS confirmed," \
	"  (s.okind IN ('exclusive', 'set') OR s.skind IN ('exclusive', 'set')" \
	"   OR (s.okind = 'shared') <> (s.skind = 'shared') OR s.olim <> s.slim) AS conflict," \
	"  s.okind || CASE WHEN s.olim > 1 THEN '/' || s.olim ELSE '' END AS olabel," \
	"  s.skind || CASE WHEN s.slim > 1 THEN '/' || s.slim ELSE '' END AS slabel" \
	"  FROM stress_kinds_seen s LEFT JOIN stress_kinds_left l" \
	"    ON l.name = s.name AND l.token = s.seen) "

/*
 * Check (c): fences found false before the expiry the server had given,
 * with no force_release of the name that could have ended the lease (one
 * that began before the fence said no and ended after, or not long before,
 * the grant: its commit follows its end)
 */
#define LOST_EARLY_SQL \
	"SELECT count(*) FILTER (WHERE l.at < l.expires AND NOT EXISTS" \
	"  (SELECT FROM stress_kinds_forced f WHERE f.name = l.name" \
	"     AND f.started < l.at AND f.ended > l.since - interval '200 ms'))," \
	" count(*) FROM stress_kinds_lost l"

static int
kinds_verify(struct kinds_verdict *v)
{
	PGconn	   *conn = connect_parent();
	PGresult   *res;
	long		vals[4];

	memset(v, 0, sizeof(*v));
	if (conn == NULL)
		return 0;
	if (!query_long(conn, PAIRS_CTE
					"SELECT count(*) FILTER (WHERE conflict AND confirmed),"
					" count(*) FILTER (WHERE conflict AND NOT confirmed),"
					" count(*) FILTER (WHERE NOT conflict AND confirmed)"
					" FROM c", vals, 3))
		goto fail;
	v->overlaps = vals[0];
	v->unconfirmed = vals[1];
	v->legit = vals[2];
	if (!query_long(conn, PAIRS_CTE
					"SELECT count(*) FILTER (WHERE n + 1 > olim), coalesce(max(n + 1), 0)"
					" FROM (SELECT name, observer, olim, count(*) FILTER"
					"   (WHERE confirmed AND skind = 'permit' AND slim = olim) AS n"
					"   FROM c WHERE okind = 'permit' GROUP BY 1, 2, 3) q", vals, 2))
		goto fail;
	v->over = vals[0];
	v->most_permits = (int) vals[1];
	if (!query_long(conn, "SELECT count(*) FROM stress_kinds_inside", vals, 1))
		goto fail;
	v->still_inside = vals[0];
	if (!query_long(conn, LOST_EARLY_SQL, vals, 2))
		goto fail;
	v->lost_early = vals[0];
	v->lost = vals[1];

	res = PQexec(conn, PAIRS_CTE
				 "SELECT string_agg(format('%s saw %s: %s', olabel, slabel, n), ', '"
				 "  ORDER BY n DESC, olabel, slabel)"
				 " FROM (SELECT olabel, slabel, count(*) AS n FROM c"
				 "   WHERE conflict AND confirmed GROUP BY 1, 2) q");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		fprintf(stderr, "checker: verdict: %s", PQerrorMessage(conn));
		PQclear(res);
		goto fail;
	}
	snprintf(v->pairs, sizeof(v->pairs), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	PQfinish(conn);
	return 1;

fail:
	PQfinish(conn);
	return 0;
}

/* a run with fewer than these tested too little to pass */
struct minimum
{
	const char *what;
	long		got;
	long		need;
};

int
kinds_main(void)
{
	struct kinds_stats sum;
	struct kinds_verdict v;
	double		start;
	double		deadline;
	int			clean = 1;
	long		view_total = 0;
	int			enough = 1;
	int			anomalies;

	if (!workers_given)
		n_workers = KINDS_WORKERS;
	for (int i = 0; i < N_NAMES; i++)
	{
		snprintf(name_buf[i], sizeof(name_buf[i]), NAME_PREFIX "%d", i);
		names[i] = name_buf[i];
	}
	printf("mode=kinds-%s workers=%d names=%d duration=%ds seed=%" PRIu64 "\n",
		   fenced ? "fenced" : "no-fence", n_workers, N_NAMES, run_seconds, seed);
	fflush(stdout);
	if (!kinds_setup())
		return 1;
	kst = map_shared(sizeof(struct kinds_stats) * n_workers);

	start = dlc_mono_ms();
	deadline = start + run_seconds * 1000.0;
	if (!start_workers(kinds_worker, deadline))
		return 1;
	if (!sleep_until(deadline))
	{
		kill_children();
		fprintf(stderr, "checker: interrupted\n");
		return 1;
	}
	clean = wait_children(deadline + GRACE_MS);
	if (interrupted)
	{
		fprintf(stderr, "checker: interrupted\n");
		return 1;
	}

	memset(&sum, 0, sizeof(sum));
	for (int w = 0; w < n_workers; w++)
	{
		const struct kinds_stats *st = &kst[w];
		const long *from = &st->asked[0];
		long	   *to = &sum.asked[0];

		/* every field up to the messages is a counter */
		for (size_t i = 0; i < offsetof(struct kinds_stats, first_error) / sizeof(long); i++)
			to[i] += from[i];
		if (st->first_error[0] != '\0')
			fprintf(stderr, "worker %d: %ld error(s), %ld place(s) kept in a queue, first: %s\n",
					w, st->errors, st->queue_kept, st->first_error);
		if (st->first_view[0] != '\0')
			printf("kinds: dlock.leases, first conflict seen by worker %d: %s\n", w,
				   st->first_view);
		if (!worker_exited_cleanly(w))
			clean = 0;
	}
	if (sum.errors > 0)
		clean = 0;
	if (!kinds_verify(&v))
		return 1;

	for (int i = 0; i < N_VIEW; i++)
		view_total += sum.view[i];

	printf("kinds: grants");
	for (int k = 0; k < N_KINDS; k++)
		printf(" %s=%ld/%ld", kind_label[k], sum.granted[k], sum.asked[k]);
	printf(" (granted/asked; %ld while waiting)  busy=%ld  timeouts=%ld  "
		   "refused_max_holders_mismatch=%ld\n",
		   sum.granted_waiting, sum.busy, sum.timeouts, sum.mismatched);
	printf("kinds: entered=%ld  entry_refused_by_fence=%ld  left_fenced=%ld  "
		   "left_after_losing_lease=%ld  renews_near_expiry=%ld (in time %ld)  "
		   "released=%ld (late %ld)\n",
		   sum.entered, sum.entry_refused, sum.left_fenced, sum.left_unfenced,
		   sum.renews_near, sum.renewed_near, sum.released, sum.released_late);
	printf("kinds: force_release=%ld (ended a lease %ld)  purge=%ld  watch=%ld (woken by a change %ld)\n",
		   sum.forced, sum.forced_true, sum.purges, sum.watches, sum.watch_changed);
	printf("kinds: (a) fenced writes: conflicting holders inside at once=%ld%s%s%s  "
		   "permits inside over max_holders=%ld (most %d)  "
		   "not counted (the seen holder lost its lease)=%ld  "
		   "compatible holders inside together=%ld\n",
		   v.overlaps, v.overlaps ? " (" : "", v.pairs, v.overlaps ? ")" : "",
		   v.over, v.most_permits, v.unconfirmed, v.legit);
	printf("kinds: (b) dlock.leases after %ld grants:", sum.view_checks);
	for (int i = 0; i < N_VIEW; i++)
		printf(" %s=%ld", view_label[i], sum.view[i]);
	printf("\n");
	printf("kinds: (c) fences false before the expiry the server gave, no force_release "
		   "to explain it=%ld (of %ld leases lost)\n", v.lost_early, v.lost);
	printf("kinds: (d) waits that timed out and left their session in a queue=%ld\n",
		   sum.queue_kept);
	printf("kinds: errors=%ld (XX000 %ld, 40P01 %ld, token entered twice %ld)  "
		   "still inside at the end=%ld\n",
		   sum.errors, sum.xx000, sum.deadlocks, sum.twice, v.still_inside);
	if (clean && v.still_inside > 0)
		clean = 0;

	anomalies = v.overlaps > 0 || v.over > 0 || view_total > 0 || sum.twice > 0 ||
		v.lost_early > 0;
	/* (d) is a fault of the lock's in either run, not a missing fence's */
	if (sum.queue_kept > 0)
	{
		if (fenced)
			anomalies = 1;
		else
			clean = 0;
	}

	if (fenced)
	{
		struct minimum need[] = {
			{"exclusive grants", sum.granted[K_EXCLUSIVE], 20},
			{"shared grants", sum.granted[K_SHARED], 20},
			{"permit/2 grants", sum.granted[K_PERMIT2], 10},
			{"permit/3 grants", sum.granted[K_PERMIT3], 10},
			{"set grants", sum.granted[K_SET], 5},
			{"grants while waiting", sum.granted_waiting, 10},
			{"renews in time near expiry", sum.renewed_near, 10},
			{"compatible holders seen inside together", v.legit, 10},
			{"force_release calls", sum.forced, 1},
			{"purge calls", sum.purges, 1},
			{"watch calls", sum.watches, 1},
		};

		for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		{
			if (need[i].got < need[i].need)
			{
				printf("kinds: only %ld %s (at least %ld needed): the run tested too little\n",
					   need[i].got, need[i].what, need[i].need);
				enough = 0;
			}
		}
		return result_line(anomalies, clean, enough);
	}
	/* the control must see conflicting holders overlap */
	return result_line(v.overlaps > 0, clean, 1);
}
