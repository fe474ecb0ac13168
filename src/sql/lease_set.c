/*-------------------------------------------------------------------------
 *
 * lease_set.c
 *	  Leases of several names at once, all or nothing: the SQL functions
 *	  try_acquire_all, acquire_all and release_all.
 *
 * A set is granted in one step: every name is locked (in
 * DLOCK_SERIAL_LOCKMODE, as any exclusive grant: grant.c) and read, and only
 * when all of them are grantable are they all written, under one token
 * taken once, so that one value fences every lease of the set.  Tokens come
 * from the one counter of the database, so that token is larger than every
 * earlier token of each name.  When any name is not grantable, every lock
 * taken for the attempt is given back and nothing is written: no call ever
 * holds a part of its set, whether it returns or fails.  (If the same owner
 * already holds every name of the set live under one token, the set is
 * extended instead, same token, as a single lease asked for again is.)
 *
 * Names are always taken in one canonical order, by lock tag and then by
 * bytes (LeaseNameCompare), whatever order the caller gave them in.
 * acquire_all() first joins each name's queue (waiting.c) in that order,
 * waiting in the lock manager to become its head; once it is the head of
 * every queue, it waits for the leases themselves, woken like any queue
 * head by the release of any of them.  This is deadlock-free:
 *
 *	- Between sets: queue locks are requested in the canonical order, so no
 *	  cycle of waits can form among them.
 *	- With single acquires: a single acquire holds at most one queue lock
 *	  and never waits for another while it holds it.
 *	- Name locks are never waited for while other name locks are held: an
 *	  attempt takes them without waiting, and when one is busy it gives all
 *	  of them back and then waits for that one alone.
 *
 * It is also starvation-free: once a set heads every queue, later arrivals
 * for its names queue behind it, and it waits only for the leases present
 * then to be released or to expire.  The price is FIFO per name: while a
 * set waits for one name, the others' queues wait behind it.
 *
 * Invariants: I13 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/sql/lease_set.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "sql/sql.h"
#include "dlock_compat.h"
#include "base/test_hooks.h"

PG_FUNCTION_INFO_V1(dlock_try_acquire_all);
PG_FUNCTION_INFO_V1(dlock_acquire_all);
PG_FUNCTION_INFO_V1(dlock_release_all);

/* A request for a set, as parsed from the arguments */
typedef struct SetRequest
{
	LeaseName  *names;			/* distinct, in the canonical order */
	int			count;
	char	   *owner;
	int64		ttl_us;
	int64		lock_delay_us;
	LeaseRow   *rows;			/* each name's row, once granted */
} SetRequest;

/* Why an attempt did not grant the set */
typedef struct SetWait
{
	TimestampTz until;			/* GRANT_HELD/DELAYED: no earlier change
								 * without a release */
	int			busy;			/* GRANT_BUSY: the name whose lock was busy */
	LOCKTAG		busy_tag;		/* ... that lock */
	LOCKMODE	busy_mode;		/* ... and in which mode */
	int			blocker;		/* GRANT_HELD/DELAYED: a name not grantable */
} SetWait;

static void
GetSetRequest(FunctionCallInfo fcinfo, SetRequest *req)
{
	req->count = ArgGetNames(fcinfo, 0, &req->names);
	req->ttl_us = ArgGetTTL(fcinfo, 1);
	req->owner = ArgGetOwner(fcinfo, 2, true, NULL);
	req->lock_delay_us = ArgGetLockDelay(fcinfo, -1);
	req->rows = palloc0(sizeof(LeaseRow) * req->count);
}

/*
 * SetHoldsEnd - end the holds of the set's first count names; wrote says
 * whether their rows were written (and the name locks stay for the commit)
 */
static void
SetHoldsEnd(HeldName *held, int count, bool wrote)
{
	for (int i = 0; i < count; i++)
		HeldNameEnd(&held[i], wrote);
}

/*
 * SetAttempt - one attempt to grant (or extend) the whole set, without
 * waiting for any lock; GRANT_DONE when done, else nothing has changed and
 * no name lock is held.  With extend_only, only the same owner's live set
 * is extended (others wait for the names).
 */
static GrantOutcome
SetAttempt(SetRequest *req, bool extend_only, SetWait *wait)
{
	HeldName   *held = palloc(sizeof(HeldName) * req->count);
	TimestampTz now;
	bool		all_mine = true;
	bool		blocked = false;
	int64		token;
	LeaseDecision *decided = palloc(sizeof(LeaseDecision) * req->count);

	/* Every name held serialized, in the set's order, or none */
	for (int i = 0; i < req->count; i++)
	{
		if (!HeldNameBegin(&held[i], &req->names[i], DLOCK_SERIAL_LOCKMODE, NoWait))
		{
			SetHoldsEnd(held, i, false);
			wait->busy = i;
			DlockLockTag(&wait->busy_tag, DLOCK_SPACE_NAME, req->names[i].hash);
			wait->busy_mode = DLOCK_SERIAL_LOCKMODE;
			return GRANT_BUSY;
		}
	}

	/*
	 * Each name as a single exclusive request would find it, all at one
	 * moment: the clock after the last read
	 */
	for (int i = 0; i < req->count; i++)
		HeldNameRead(&held[i], "set_read");
	now = held[req->count - 1].now;
	wait->until = 0;
	for (int i = 0; i < req->count; i++)
	{
		LeaseDecision *d = &decided[i];

		LeaseDecide(&req->names[i], &held[i].rows, &ExclusiveKind, req->owner,
					now, d);
		if (d->mine >= 0)
		{
			/* The owner's own lease: extended, or taken into the set */
			req->rows[i] = held[i].rows.row[d->mine];
			if (req->rows[i].token != req->rows[0].token)
				all_mine = false;
			continue;
		}
		all_mine = false;
		if (d->availability != LEASE_FREE)
		{
			blocked = true;
			wait->blocker = i;
			wait->until = Max(wait->until, d->until);
		}
	}

	if (all_mine)
	{
		for (int i = 0; i < req->count; i++)
			ExtendLease(&held[i].store, &req->names[i], &req->rows[i], req->ttl_us,
						NULL, now);
		SetHoldsEnd(held, req->count, true);
		return GRANT_DONE;
	}
	if (blocked || extend_only)
	{
		SetHoldsEnd(held, req->count, false);
		return blocked ? GRANT_HELD : GRANT_QUEUED;
	}

	/*
	 * All grantable, once the transactions fenced under old tokens end.  A
	 * name the owner holds under another token is taken into the set: its
	 * own row is written, with the set's token.
	 */
	for (int i = 0; i < req->count; i++)
	{
		LeaseDecision *d = &decided[i];

		if (d->mine >= 0)
		{
			d->availability = LEASE_FREE;
			d->target = d->mine;
			d->slot = held[i].rows.row[d->mine].slot;
		}
		if (!GrantPinsTake(&req->names[i], &held[i].rows, d, &ExclusiveKind,
						   &wait->busy_tag))
		{
			for (int j = 0; j < i; j++)
				GrantPinsRelease(&req->names[j], &held[j].rows, &decided[j],
								 &ExclusiveKind);
			SetHoldsEnd(held, req->count, false);
			wait->busy = i;
			wait->busy_mode = DLOCK_GRANT_LOCKMODE;
			return GRANT_BUSY;
		}
	}

	DLOCK_PAUSE("set_pin");
	token = TokenNext();
	for (int i = 0; i < req->count; i++)
	{
		GrantRequest grant;

		grant.name = req->names[i];
		grant.owner = req->owner;
		grant.owner_generated = false;
		grant.ttl_us = req->ttl_us;
		grant.lock_delay_us = req->lock_delay_us;
		grant.session_bound = false;
		grant.value = NULL;
		grant.queue = false;
		grant.kind = ExclusiveKind;
		req->rows[i] = *GrantTargetRow(&held[i].rows, &decided[i]);
		GrantLeaseWithToken(&held[i].store, &grant, &req->rows[i], token);
	}
	SetHoldsEnd(held, req->count, true);
	return GRANT_DONE;
}

/*
 * ReturnSet - the rows of the set, as the function's result
 */
static void
ReturnSet(FunctionCallInfo fcinfo, const SetRequest *req)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	for (int i = 0; i < req->count; i++)
		tuplestore_puttuple(rsinfo->setResult,
							LeaseResultTuple(rsinfo->setDesc, &req->names[i],
											 &req->rows[i]));
}

/*
 * JoinQueues - become the head of the queue of each name, in the canonical
 * order, within limit; the number of queues joined (all of them: success)
 */
static int
JoinQueues(const SetRequest *req, WaitLimit limit)
{
	for (int i = 0; i < req->count; i++)
	{
		if (!QueueJoin(&req->names[i], limit))
			return i;
	}
	return req->count;
}

static void
LeaveQueues(const SetRequest *req, int count)
{
	for (int i = 0; i < count; i++)
		QueueLeave(&req->names[i]);
}

/*
 * dlock_try_acquire_all - SQL function
 *	  dlock.try_acquire_all(names, ttl, owner)
 *
 * Every name at once, one row each, or no rows and nothing changed; never
 * blocks.  While others wait for one of the names, only the same owner's
 * live set is extended.
 */
Datum
dlock_try_acquire_all(PG_FUNCTION_ARGS)
{
	SetRequest	req;
	SetWait		wait;
	GrantOutcome outcome;
	int			joined;

	DlockCheckModuleVersion();
	GetSetRequest(fcinfo, &req);
	CheckLeasesWritable("dlock.try_acquire_all");
	dlock_init_materialized_srf(fcinfo);

	joined = JoinQueues(&req, NoWait);
	outcome = SetAttempt(&req, joined < req.count, &wait);
	LeaveQueues(&req, joined);

	if (outcome == GRANT_DONE)
		ReturnSet(fcinfo, &req);
	else
		DlockStatsCount(&req.names[0], DLOCK_STAT_REFUSAL);
	return (Datum) 0;
}

/* Error context of acquire_all()'s waits */
static void
SetErrorContext(void *arg)
{
	const SetRequest *req = (const SetRequest *) arg;

	errcontext("waiting for the set of %d leases \"%.*s\"%s",
			   req->count, req->names[0].len, req->names[0].data,
			   req->count > 1 ? ", ..." : "");
}

/*
 * SetTimedOut - raise 55P03: the set was not granted in time, and the
 * caller holds none of it
 */
static void
SetTimedOut(const SetRequest *req, GrantOutcome outcome, const SetWait *wait,
			int joined)
{
	const LeaseName *name;
	const char *why;

	if (joined < req->count)
	{
		name = &req->names[joined];
		why = "other sessions are waiting for it ahead of this one";
	}
	else if (outcome == GRANT_BUSY)
	{
		name = &req->names[wait->busy];
		why = "it is being changed, or a transaction still has writes fenced under its previous grant";
	}
	else
	{
		name = &req->names[wait->blocker];
		why = "another owner holds it, or it is in its lock-delay";
	}
	DlockStatsCount(name, DLOCK_STAT_TIMEOUT);
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("could not acquire all %d leases within the timeout",
					req->count),
			 errdetail("Lease \"%.*s\" was not available: %s. None of the leases was granted.",
					   name->len, name->data, why)));
}

/*
 * dlock_acquire_all - SQL function
 *	  dlock.acquire_all(names, ttl, owner, timeout)
 *
 * Waits until every name is granted: first in each name's queue, in the
 * canonical order, then, as the head of all of them, for the leases.  The
 * timeout is that of dlock.acquire(); when it passes, 55P03, holding none.
 */
Datum
dlock_acquire_all(PG_FUNCTION_ARGS)
{
	SetRequest	req;
	SetWait		wait;
	WaitLimit	limit;
	GrantOutcome outcome;
	ErrorContextCallback waitcontext;
	int			joined;

	DlockCheckModuleVersion();
	GetSetRequest(fcinfo, &req);
	limit = AcquireLimit(ArgGetTimeout(fcinfo, 3));
	CheckLeasesWritable("dlock.acquire_all");
	dlock_init_materialized_srf(fcinfo);

	waitcontext.callback = SetErrorContext;
	waitcontext.arg = &req;
	waitcontext.previous = error_context_stack;
	error_context_stack = &waitcontext;

	joined = JoinQueues(&req, NoWait);
	if (joined < req.count)
	{
		/* Others wait: the owner's own live set is answered at once */
		if (SetAttempt(&req, true, &wait) == GRANT_DONE)
		{
			LeaveQueues(&req, joined);
			error_context_stack = waitcontext.previous;
			ReturnSet(fcinfo, &req);
			return (Datum) 0;
		}
		DlockStatsCount(&req.names[joined], DLOCK_STAT_WAIT);
		for (; joined < req.count; joined++)
		{
			if (!QueueJoin(&req.names[joined], limit))
				break;
		}
		if (joined < req.count)
		{
			error_context_stack = waitcontext.previous;
			SetTimedOut(&req, GRANT_QUEUED, &wait, joined);
		}
	}

	for (;;)
	{
		/* A wake-up sent after this point interrupts the sleep below */
		ResetLatch(MyLatch);

		outcome = SetAttempt(&req, false, &wait);
		if (outcome == GRANT_DONE)
		{
			LeaveQueues(&req, joined);
			error_context_stack = waitcontext.previous;
			ReturnSet(fcinfo, &req);
			return (Datum) 0;
		}
		if (!limit.wait ||
			(limit.deadline != DT_NOEND && GetCurrentTimestamp() >= limit.deadline))
			break;

		if (outcome == GRANT_BUSY)
		{
			/* Wait for that one lock alone, holding no other name lock */
			if (!LockAcquireWithin(&wait.busy_tag, wait.busy_mode, limit))
				break;
			LockRelease(&wait.busy_tag, wait.busy_mode, false);
		}
		else
			SleepUntil(wait.until, limit);
	}

	error_context_stack = waitcontext.previous;
	SetTimedOut(&req, outcome, &wait, joined);
	return (Datum) 0;			/* keep compiler quiet */
}

/*
 * dlock_release_all - SQL function dlock.release_all(names, owner)
 *
 * Releases each of the names that owner holds live; returns how many.
 */
Datum
dlock_release_all(PG_FUNCTION_ARGS)
{
	LeaseName  *names;
	int			count;
	char	   *owner;
	int			released = 0;

	DlockCheckModuleVersion();
	count = ArgGetNames(fcinfo, 0, &names);
	owner = ArgGetOwner(fcinfo, 1, false, NULL);
	CheckLeasesWritable("dlock.release_all");

	ReleaseCallBegin();
	for (int i = 0; i < count; i++)
	{
		HeldName	held;
		LeaseRow	row;

		if (!FetchHeldLease(&held, &names[i], owner, &row))
			continue;
		EndLease(&held.store, &names[i], &row, held.now, LEASE_END_RELEASED);
		DlockStatsCount(&names[i], DLOCK_STAT_RELEASE);
		HeldNameEnd(&held, true);
		released++;
	}
	ReleaseCallEnd(released > 0);
	PG_RETURN_INT32(released);
}
