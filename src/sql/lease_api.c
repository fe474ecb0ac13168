/*-------------------------------------------------------------------------
 *
 * lease_api.c
 *	  The SQL functions that grant and end single leases: try_acquire,
 *	  acquire, renew, release and force_release.
 *
 * Each parses its arguments (by the named positions below), asks the grant
 * engine (grant.c) for a decision, waits where the function waits, and
 * shapes the result.  What a request may do with a name's rows, and under
 * which lock, is decided in grant.c alone:
 *
 *	- Waiters of every kind queue per name in arrival order (waiting.c);
 *	  only the head of the queue waits for the lease itself.
 *	- try_acquire() never waits; while others wait for the name, it only
 *	  extends the caller's own live lease.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/sql/lease_api.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "sql/sql.h"
#include "dlock_compat.h"

PG_FUNCTION_INFO_V1(dlock_try_acquire);
PG_FUNCTION_INFO_V1(dlock_acquire);
PG_FUNCTION_INFO_V1(dlock_renew);
PG_FUNCTION_INFO_V1(dlock_release);
PG_FUNCTION_INFO_V1(dlock_force_release);

/*
 * CheckLeasesWritable - leases can only change on a writable primary
 */
void
CheckLeasesWritable(const char *funcname)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot change leases during recovery"),
				 errdetail("%s() changes a lease, and this server is a standby.",
						   funcname),
				 errhint("Call %s() on the primary server; dlock.leases and dlock.fence() work on a standby.",
						 funcname)));
	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot execute %s() in a read-only transaction",
						funcname)));
}

/*
 * LeaseResult - the dlock.lease composite for a row
 */
static Datum
LeaseResult(FunctionCallInfo fcinfo, const LeaseName *name, const LeaseRow *row)
{
	TupleDesc	tupdesc;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	return HeapTupleGetDatum(LeaseResultTuple(BlessTupleDesc(tupdesc), name, row));
}

/*
 * LeaseResultTuple - the dlock.lease tuple for a row, in a blessed tupdesc
 */
HeapTuple
LeaseResultTuple(TupleDesc tupdesc, const LeaseName *name, const LeaseRow *row)
{
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	values[0] = PointerGetDatum(cstring_to_text_with_len(name->data, name->len));
	values[1] = CStringGetTextDatum(row->owner);
	values[2] = Int64GetDatum(row->token);
	values[3] = TimestampTzGetDatum(row->expires_at);
	return heap_form_tuple(tupdesc, values, nulls);
}

/* Argument positions: the first three of try_acquire() and acquire() */
enum
{
	GRANT_ARG_NAME,
	GRANT_ARG_TTL,
	GRANT_ARG_OWNER,
	GRANT_ARGS_FIRST_OTHER
};

/* ... then those of dlock.try_acquire() */
enum
{
	TRY_ARG_LOCK_DELAY = GRANT_ARGS_FIRST_OTHER,
	TRY_ARG_SESSION_BOUND,
	TRY_ARG_VALUE,
	TRY_ARG_QUEUE,
	TRY_ARG_SHARED,
	TRY_ARG_MAX_HOLDERS
};

/* ... or those of dlock.acquire() */
enum
{
	ACQ_ARG_TIMEOUT = GRANT_ARGS_FIRST_OTHER,
	ACQ_ARG_LOCK_DELAY,
	ACQ_ARG_SESSION_BOUND,
	ACQ_ARG_VALUE,
	ACQ_ARG_SHARED,
	ACQ_ARG_MAX_HOLDERS
};

/* Argument positions of dlock.renew(), release() and force_release() */
enum
{
	RENEW_ARG_NAME,
	RENEW_ARG_OWNER,
	RENEW_ARG_TTL,
	RENEW_ARG_VALUE
};

enum
{
	RELEASE_ARG_NAME,
	RELEASE_ARG_OWNER
};

/*
 * GetGrantRequest - the request of try_acquire() or acquire(), from the
 * positions of their arguments after the first three (queue_argno -1: the
 * function has none)
 */
static void
GetGrantRequest(FunctionCallInfo fcinfo, GrantRequest *req,
				int lock_delay_argno, int session_bound_argno, int value_argno,
				int queue_argno, int shared_argno, int max_holders_argno)
{
	ArgGetName(fcinfo, GRANT_ARG_NAME, &req->name);
	req->ttl_us = ArgGetTTL(fcinfo, GRANT_ARG_TTL);
	req->owner = ArgGetOwner(fcinfo, GRANT_ARG_OWNER, true, &req->owner_generated);
	req->lock_delay_us = ArgGetLockDelay(fcinfo, lock_delay_argno);
	req->session_bound = ArgGetBool(fcinfo, session_bound_argno, "session_bound");
	if (req->session_bound && !dlock_allow_session_bound)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("session-bound leases are not allowed here"),
				 errdetail("dlock.allow_session_bound is off."),
				 errhint("Behind a transaction pooler a backend outlives its clients and is closed or reset by the pooler: take a lease with a ttl and renew it.")));
	req->value = ArgGetValue(fcinfo, value_argno);
	req->queue = queue_argno >= 0 && PG_NARGS() > queue_argno &&
		ArgGetBool(fcinfo, queue_argno, "queue");
	if (req->queue)
		PlacesRequire();
	ArgGetKind(fcinfo, shared_argno, max_holders_argno, &req->kind);
}

/*
 * dlock_try_acquire - SQL function
 *	  dlock.try_acquire(name, ttl, owner, lock_delay, session_bound, value,
 *						queue)
 *
 * Grants at once, or returns no row (NULL where the database still
 * declares it as returning one lease); never blocks.  While others wait in
 * dlock.acquire(), or keep a place in the name's queue (places.c), the name
 * is theirs first: only the same owner's live lease is extended then.
 * With queue, a refused caller keeps (or takes) its own place, and is
 * granted once it is first in the queue and the name is free.
 */
Datum
dlock_try_acquire(PG_FUNCTION_ARGS)
{
	GrantRequest req;
	LeaseRow	row;
	GrantWait	wait;
	GrantOutcome outcome;

	DlockCheckModuleVersion();
	GetGrantRequest(fcinfo, &req, TRY_ARG_LOCK_DELAY, TRY_ARG_SESSION_BOUND,
					TRY_ARG_VALUE, TRY_ARG_QUEUE, TRY_ARG_SHARED,
					TRY_ARG_MAX_HOLDERS);
	CheckLeasesWritable("dlock.try_acquire");

	if (req.queue)
	{
		bool		head_seen;

		/* The owner's own live lease is extended, place or not */
		outcome = AttemptGrant(&req, NoWait, true, &row, &wait);
		if (outcome != GRANT_DONE &&
			PlacePoll(&req.name, req.owner, req.ttl_us, &head_seen) &&
			(head_seen || QueueIsEmpty(&req.name)))
		{
			outcome = AttemptGrant(&req, NoWait, false, &row, &wait);
			if (outcome == GRANT_DONE)
				(void) PlaceGiveBack(&req.name, req.owner);
		}
	}
	else if (QueueLookBegin(&req.name))
	{
		TimestampTz until;

		outcome = AttemptGrant(&req, NoWait, PlaceAhead(&req.name, 0, &until),
							   &row, &wait);
		QueueLookEnd(&req.name);
	}
	else
		outcome = AttemptGrant(&req, NoWait, true, &row, &wait);

	if (outcome != GRANT_DONE)
		DlockStatsCount(&req.name, DLOCK_STAT_REFUSAL);

	/*
	 * From 1.2 the function returns a set: one row for a grant, none for a
	 * refusal, so that a client's "is there a row" means "granted".  A
	 * database still at 1.0 or 1.1 declares it as returning one composite,
	 * which is NULL for a refusal.
	 */
	if (fcinfo->flinfo->fn_retset)
	{
		ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

		dlock_init_materialized_srf(fcinfo);
		if (outcome == GRANT_DONE)
			tuplestore_puttuple(rsinfo->setResult,
								LeaseResultTuple(rsinfo->setDesc, &req.name, &row));
		return (Datum) 0;
	}
	if (outcome != GRANT_DONE)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(LeaseResult(fcinfo, &req.name, &row));
}

/*
 * AcquireLimit - the wait limit of dlock.acquire(): its timeout argument,
 * and lock_timeout, which bounds the whole wait for the lease as it bounds
 * any lock wait
 */
WaitLimit
AcquireLimit(int64 timeout_us)
{
	WaitLimit	limit = {true, DT_NOEND};
	TimestampTz now = GetCurrentTimestamp();

	if (timeout_us == 0)
		return NoWait;
	if (timeout_us > 0)
		limit.deadline = ExpiryAfter(now, timeout_us);
	if (LockTimeout > 0)
		limit.deadline = Min(limit.deadline,
							 ExpiryAfter(now, (int64) LockTimeout * 1000));
	return limit;
}

/*
 * AcquireWaitBegins - an acquire() has to wait: count it once, and note
 * when its wait began in *wait_start (left 0 when statistics are off)
 */
void
AcquireWaitBegins(const LeaseName *name, TimestampTz *wait_start)
{
	if (dlock_stats_counting && *wait_start == 0)
	{
		*wait_start = GetCurrentTimestamp();
		DlockStatsCountEvent(name, DLOCK_STAT_WAIT);
	}
}

/*
 * AcquireWaitEnded - an acquire() that waited got the lease or timed out
 */
void
AcquireWaitEnded(const LeaseName *name, TimestampTz wait_start)
{
	if (dlock_stats_counting && wait_start != 0)
		DlockStatsWaitEnded(name, wait_start);
}

/*
 * AcquireTimedOut - raise 55P03 for a wait that ran out of time
 */
void
AcquireTimedOut(const LeaseName *name, const LeaseKind *kind,
				GrantOutcome outcome, TimestampTz wait_start)
{
	const char *detail;

	AcquireWaitEnded(name, wait_start);
	DlockStatsCount(name, DLOCK_STAT_TIMEOUT);

	switch (outcome)
	{
		case GRANT_HELD:
			switch (kind->tag)
			{
				case LEASE_KIND_PERMIT:
					detail = psprintf("All %d permits are held.", kind->max_holders);
					break;
				case LEASE_KIND_SHARED:
					detail = "Another owner holds an exclusive lease.";
					break;
				default:
					detail = "Another owner holds the lease.";
					break;
			}
			break;
		case GRANT_DELAYED:
			detail = "The lease ended without a release and is in its lock-delay.";
			break;
		case GRANT_QUEUED:
			detail = "Other sessions are waiting for the lease ahead of this one.";
			break;
		default:
			detail = "The lease is being changed, or a transaction still has writes fenced under its previous grant.";
			break;
	}
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("could not acquire lease \"%.*s\" within the timeout",
					name->len, name->data),
			 errdetail_internal("%s", detail)));
}

/*
 * AcquireErrorContext - error context of dlock.acquire()'s waits: the lock
 * manager's own messages name only the lock tag
 */
void
AcquireErrorContext(void *arg)
{
	const LeaseName *name = (const LeaseName *) arg;

	errcontext("waiting for lease \"%.*s\"", name->len, name->data);
}

/*
 * RefuseWaitOnOwnLease - an owner-less acquire() that would wait only for
 * leases granted to owners this backend generated is a session waiting on
 * itself: each such call generates a new owner, so it would wait until its
 * own lease ends.  Raise 55006 instead.
 *
 * Behind a transaction pooler one backend serves many clients, and such a
 * lease may be another client's; the check is made only while session-bound
 * leases are allowed, since dlock.allow_session_bound = off is how a role
 * says it comes through one.  Made from a fresh snapshot, without a lock:
 * it only chooses between an error and a wait.
 */
static void
RefuseWaitOnOwnLease(const GrantRequest *req)
{
	LeaseStore	store;
	LeaseRows	rows;
	Snapshot	snapshot;
	TimestampTz now;
	bool		other_kind = false;
	int			blocking = 0;
	int			generated_here = 0;

	if (!req->owner_generated || !dlock_allow_session_bound)
		return;

	LeaseStoreOpen(&store, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	LeaseStoreFetchAllAsOf(&store, &req->name, snapshot, &rows);
	UnregisterSnapshot(snapshot);
	LeaseStoreClose(&store);
	now = GetCurrentTimestamp();

	/*
	 * What it waits for: the live leases of kinds it cannot share with, or,
	 * when all are of its kind (a full semaphore), all of them
	 */
	for (int i = 0; i < rows.count; i++)
		if (LeaseIsLive(&rows.row[i], now) &&
			!LeaseKindShares(&rows.row[i].kind, &req->kind))
			other_kind = true;
	for (int i = 0; i < rows.count; i++)
	{
		const LeaseRow *row = &rows.row[i];

		if (!LeaseIsLive(row, now) ||
			(other_kind && LeaseKindShares(&row->kind, &req->kind)))
			continue;
		blocking++;
		if (OwnerGeneratedHere(row->owner))
			generated_here++;
	}
	if (blocking == 0 || generated_here < blocking)
		return;

	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_IN_USE),
			 errmsg("lease \"%.*s\" is already held by this session",
					req->name.len, req->name.data),
			 errdetail("An earlier dlock.acquire() without an owner was granted it under an owner the server generated; this call generates another owner and would wait until that lease ends."),
			 errhint("Keep the owner that the first call returned, and pass it to dlock.renew() or dlock.release(); or pass the same owner to every dlock.acquire().")));
}

/*
 * dlock_acquire - SQL function
 *	  dlock.acquire(name, ttl, owner, timeout, lock_delay, session_bound,
 *					value)
 *
 * Waits until granted, first in the name's queue (arrival order), then, as
 * its head, for the lease.  timeout NULL waits until cancelled (or until
 * statement_timeout or lock_timeout); timeout 0 does not wait.  When the
 * timeout passes: 55P03.
 */
Datum
dlock_acquire(PG_FUNCTION_ARGS)
{
	GrantRequest req;
	LeaseRow	row;
	GrantWait	wait;
	WaitLimit	limit;
	GrantOutcome outcome;
	ErrorContextCallback waitcontext;
	TimestampTz wait_start = 0;
	uint64		arrival;
	bool		in_queue;
	bool		checked_own_lease = false;

	DlockCheckModuleVersion();
	GetGrantRequest(fcinfo, &req, ACQ_ARG_LOCK_DELAY, ACQ_ARG_SESSION_BOUND,
					ACQ_ARG_VALUE, -1, ACQ_ARG_SHARED, ACQ_ARG_MAX_HOLDERS);
	limit = AcquireLimit(ArgGetTimeout(fcinfo, ACQ_ARG_TIMEOUT));
	CheckLeasesWritable("dlock.acquire");

	/*
	 * Its turn among polling clients' places.  A polling client that now
	 * waits here gives up its place: it queues behind the waiters that are
	 * in the lock manager's queue already, since that queue cannot be
	 * reordered.
	 */
	(void) PlaceGiveBack(&req.name, req.owner);
	arrival = PlaceNewArrival();

	/* Errors raised while waiting (deadlock, lock_timeout) name the lease */
	waitcontext.callback = AcquireErrorContext;
	waitcontext.arg = &req.name;
	waitcontext.previous = error_context_stack;
	error_context_stack = &waitcontext;

	in_queue = QueueJoin(&req.name, NoWait);
	if (!in_queue)
	{
		/*
		 * Others wait for the name.  The same owner asking again for its own
		 * live lease is answered at once, with the same token and a new
		 * expiry, as try_acquire would: it must not queue behind the
		 * waiters for a lease it holds.  This look does not wait for the
		 * name's lock: a caller that is not the holder must take its place
		 * in the queue, not line up on the lock outside it.
		 */
		outcome = AttemptGrant(&req, NoWait, true, &row, &wait);
		if (outcome != GRANT_DONE)
		{
			if (limit.wait)
			{
				RefuseWaitOnOwnLease(&req);
				AcquireWaitBegins(&req.name, &wait_start);
			}
			in_queue = QueueJoin(&req.name, limit);
			outcome = GRANT_QUEUED;
		}
	}

	/* In the queue: attempts as its head until granted or out of time */
	while (in_queue)
	{
		/* A wake-up sent after this point interrupts the sleep below */
		ResetLatch(MyLatch);

		/* As the head of the queue: polling clients that came first go first */
		PlaceHeadBegin(&req.name, arrival);
		if (PlaceAhead(&req.name, arrival, &wait.until))
		{
			outcome = GRANT_QUEUED;
			wait.session_token = 0;
		}
		else
			outcome = AttemptGrant(&req, limit, false, &row, &wait);
		if (outcome == GRANT_DONE)
		{
			PlaceHeadEnd();
			QueueLeave(&req.name);
			AcquireWaitEnded(&req.name, wait_start);
			break;
		}
		if (!limit.wait || outcome == GRANT_BUSY ||
			(limit.deadline != DT_NOEND && GetCurrentTimestamp() >= limit.deadline))
			break;

		if (!checked_own_lease && outcome == GRANT_HELD)
		{
			RefuseWaitOnOwnLease(&req);
			checked_own_lease = true;
		}
		AcquireWaitBegins(&req.name, &wait_start);
		if (outcome == GRANT_HELD && wait.session_token != 0)
			SessionLeaseWaitForHolder(wait.session_token, wait.until, limit);
		else
			SleepUntil(wait.until, limit);
	}

	/*
	 * The one exit: the lease, or 55P03 from AcquireTimedOut (the queue is
	 * left at the abort)
	 */
	error_context_stack = waitcontext.previous;
	if (outcome != GRANT_DONE)
		AcquireTimedOut(&req.name, &req.kind, outcome, wait_start);
	PG_RETURN_DATUM(LeaseResult(fcinfo, &req.name, &row));
}

/*
 * dlock_renew - SQL function dlock.renew(name, owner, ttl, value)
 *
 * Same token, expiry from now; the value, when one is given, replaces the
 * published one.  NULL when owner does not hold a live lease:
 * an expired lease is not revived; the client must acquire a new token.
 */
Datum
dlock_renew(PG_FUNCTION_ARGS)
{
	LeaseName	name;
	char	   *owner;
	int64		ttl_us;
	char	   *value;
	HeldName	held;
	LeaseRow	row;

	DlockCheckModuleVersion();
	ArgGetName(fcinfo, RENEW_ARG_NAME, &name);
	owner = ArgGetOwner(fcinfo, RENEW_ARG_OWNER, false, NULL);
	ttl_us = ArgGetTTL(fcinfo, RENEW_ARG_TTL);
	value = ArgGetValue(fcinfo, RENEW_ARG_VALUE);
	CheckLeasesWritable("dlock.renew");

	if (!FetchHeldLease(&held, &name, owner, &row))
		PG_RETURN_NULL();
	ExtendLease(&held.store, &name, &row, ttl_us, value, held.now);
	HeldNameEnd(&held, true);
	PG_RETURN_DATUM(LeaseResult(fcinfo, &name, &row));
}

/*
 * dlock_release - SQL function dlock.release(name, owner)
 *
 * Compare-and-release: false when owner does not hold a live lease (true
 * when it then gives up a place it kept in the queue).  When
 * the release is all its transaction changes, the commit need not wait for
 * its flush (durability.c).
 */
Datum
dlock_release(PG_FUNCTION_ARGS)
{
	LeaseName	name;
	char	   *owner;
	HeldName	held;
	LeaseRow	row;

	DlockCheckModuleVersion();
	ArgGetName(fcinfo, RELEASE_ARG_NAME, &name);
	owner = ArgGetOwner(fcinfo, RELEASE_ARG_OWNER, false, NULL);
	CheckLeasesWritable("dlock.release");

	ReleaseCallBegin();
	if (!FetchHeldLease(&held, &name, owner, &row))
	{
		ReleaseCallEnd(false);
		/* Not held: a place kept in the queue is given up instead */
		PG_RETURN_BOOL(PlaceGiveBack(&name, owner));
	}
	EndLease(&held.store, &name, &row, held.now, LEASE_END_RELEASED);
	DlockStatsCount(&name, DLOCK_STAT_RELEASE);
	HeldNameEnd(&held, true);
	ReleaseCallEnd(true);
	PG_RETURN_BOOL(true);
}

/*
 * dlock_force_release - SQL function dlock.force_release(name)
 *
 * Ends every live lease of the name whoever holds it, for a role that may
 * act as each holder's role (or ends none).  False when none is live.
 */
Datum
dlock_force_release(PG_FUNCTION_ARGS)
{
	LeaseName	name;

	DlockCheckModuleVersion();
	ArgGetName(fcinfo, RELEASE_ARG_NAME, &name);
	CheckLeasesWritable("dlock.force_release");
	PG_RETURN_BOOL(ForceReleaseAll(&name));
}
