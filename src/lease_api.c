/*-------------------------------------------------------------------------
 *
 * lease_api.c
 *	  The SQL functions that grant and end leases: try_acquire, acquire,
 *	  renew, release and force_release.
 *
 * Lease rules, all on the server's clock (GetCurrentTimestamp(), the value
 * clock_timestamp() returns, taken at the moment of the change):
 *
 *	- A lease is live from its grant until it expires or is released.
 *	- A grant of a name with no live lease issues a new token, larger than
 *	  every token issued before in this database.  It first waits, holding
 *	  DLOCK_GRANT_LOCKMODE, for every transaction that fenced a write under
 *	  the previous token.
 *	- The same owner asking again while its lease is live keeps its token and
 *	  gets a new expiry.  "The same owner" is the same owner string from a
 *	  role that has the privileges of the holder's role.
 *	- Renew, release and force_release change a live lease without a new
 *	  token.  They hold DLOCK_CHANGE_LOCKMODE, which serializes them with
 *	  grants but does not wait for fenced transactions.
 *
 * Every change is an ordinary write of the caller's transaction: it is
 * undone if the transaction rolls back.  The commit of a grant is always
 * flushed to WAL (ForceSyncCommit), even with synchronous_commit = off,
 * because a grant lost in a crash would let its token be issued again.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/lease_api.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "common/int.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "dlock.h"

PG_FUNCTION_INFO_V1(dlock_try_acquire);
PG_FUNCTION_INFO_V1(dlock_acquire);
PG_FUNCTION_INFO_V1(dlock_renew);
PG_FUNCTION_INFO_V1(dlock_release);
PG_FUNCTION_INFO_V1(dlock_force_release);

/* Poll interval of a waiting acquire: doubles from the first to the last */
#define WAIT_FIRST_SLEEP_US		1000
#define WAIT_LAST_SLEEP_US		50000

/* What one attempt to grant found */
typedef enum GrantOutcome
{
	GRANT_DONE,					/* granted or extended: see the lease row */
	GRANT_HELD,					/* another owner holds a live lease */
	GRANT_BUSY					/* the name's lock was not available */
} GrantOutcome;

/* A request to acquire, as parsed from the arguments */
typedef struct GrantRequest
{
	LeaseName	name;
	char	   *owner;
	int64		ttl_us;
} GrantRequest;

/*
 * CheckLeasesWritable - leases can only change on a writable primary
 */
static void
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
 * MayActFor - whether the current role may act on leases of holder_role
 */
static inline bool
MayActFor(Oid holder_role)
{
	return has_privs_of_role(GetUserId(), holder_role);
}

static inline bool
IsSameHolder(const LeaseRow *row, const char *owner)
{
	return strcmp(row->owner, owner) == 0 && MayActFor(row->holder_role);
}

/*
 * LeaseResult - the dlock.lease composite for a row
 */
static Datum
LeaseResult(FunctionCallInfo fcinfo, const LeaseName *name, const LeaseRow *row)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);

	values[0] = PointerGetDatum(cstring_to_text_with_len(name->data, name->len));
	values[1] = CStringGetTextDatum(row->owner);
	values[2] = Int64GetDatum(row->token);
	values[3] = TimestampTzGetDatum(row->expires_at);
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/*
 * ExpiryAfter - now + ttl, saturating at the end of the timestamp range
 * (dlock.max_ttl keeps real ttls far below that)
 */
static TimestampTz
ExpiryAfter(TimestampTz now, int64 ttl_us)
{
	TimestampTz result;

	if (pg_add_s64_overflow(now, ttl_us, &result) || result >= END_TIMESTAMP)
		return END_TIMESTAMP - 1;
	return result;
}

/*
 * WriteChange - store a changed row; this backend's cached fence answers
 * may no longer hold
 */
static void
WriteChange(LeaseStore *store, const LeaseName *name, LeaseRow *row)
{
	LeaseStoreWrite(store, name, row);
	FenceCacheReset();
}

/*
 * ExtendLease - the same owner asked again: same token, expiry from now
 */
static void
ExtendLease(LeaseStore *store, const LeaseName *name, LeaseRow *row,
			int64 ttl_us, TimestampTz now)
{
	row->expires_at = ExpiryAfter(now, ttl_us);
	WriteChange(store, name, row);
}

/*
 * GrantNewLease - issue a new token; the caller holds DLOCK_GRANT_LOCKMODE
 */
static void
GrantNewLease(LeaseStore *store, const GrantRequest *req, LeaseRow *row)
{
	int64		token = LeaseStoreNextToken();
	TimestampTz now;

	/*
	 * The counter can only be behind the table if someone reset it by hand
	 * (setval).  Refuse rather than issue a token that does not grow.
	 */
	if (row->found && token <= row->token)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("token counter is behind lease \"%.*s\"",
						req->name.len, req->name.data),
				 errdetail("The counter gave token " INT64_FORMAT ", but the lease already had token " INT64_FORMAT ".",
						   token, row->token),
				 errhint("Advance the counter with SELECT setval('dlock.token_seq', (SELECT max(token) FROM dlock.lease_state)).")));

	now = GetCurrentTimestamp();
	row->token = token;
	row->owner = req->owner;
	row->holder_role = GetUserId();
	row->acquired_at = now;
	row->expires_at = ExpiryAfter(now, req->ttl_us);
	row->ended = false;
	row->end_reason = NULL;
	WriteChange(store, &req->name, row);

	ForceSyncCommit();
}

/*
 * AttemptGrant - one attempt to grant or extend a lease
 *
 * With wait = false nothing blocks: GRANT_BUSY means the name is being
 * changed right now, or a transaction still has writes fenced under a
 * previous grant.  With wait = true the attempt waits in the lock manager
 * for both (cancellable, subject to lock_timeout and deadlock detection),
 * and returns GRANT_HELD only when another owner holds a live lease, whose
 * expiry is then in *held_until.
 */
static GrantOutcome
AttemptGrant(const GrantRequest *req, bool wait, LeaseRow *row,
			 TimestampTz *held_until)
{
	LeaseStore	store;
	const LeaseName *name = &req->name;
	TimestampTz now;

	if (!NameLockAcquire(name, DLOCK_CHANGE_LOCKMODE, wait))
		return GRANT_BUSY;

	LeaseStoreOpen(&store, RowExclusiveLock);
	LeaseStoreFetch(&store, name, row);
	now = GetCurrentTimestamp();

	if (LeaseIsLive(row, now))
	{
		if (IsSameHolder(row, req->owner))
		{
			ExtendLease(&store, name, row, req->ttl_us, now);
			LeaseStoreClose(&store);
			return GRANT_DONE;
		}
		*held_until = row->expires_at;
		NameLockRelease(name, DLOCK_CHANGE_LOCKMODE);
		LeaseStoreClose(&store);
		return GRANT_HELD;
	}

	/* Grantable, once transactions fenced under the old token are done */
	if (!NameLockAcquire(name, DLOCK_GRANT_LOCKMODE, false))
	{
		NameLockRelease(name, DLOCK_CHANGE_LOCKMODE);
		if (!wait)
		{
			LeaseStoreClose(&store);
			return GRANT_BUSY;
		}

		/*
		 * Wait without holding the change lock, so that a fenced transaction
		 * that renews or releases before it commits cannot deadlock with us.
		 * Others may act meanwhile: read the row again.
		 */
		NameLockAcquire(name, DLOCK_GRANT_LOCKMODE, true);
		LeaseStoreFetch(&store, name, row);
		now = GetCurrentTimestamp();
		if (LeaseIsLive(row, now))
		{
			if (IsSameHolder(row, req->owner))
			{
				ExtendLease(&store, name, row, req->ttl_us, now);
				LeaseStoreClose(&store);
				return GRANT_DONE;
			}
			*held_until = row->expires_at;
			NameLockRelease(name, DLOCK_GRANT_LOCKMODE);
			LeaseStoreClose(&store);
			return GRANT_HELD;
		}
	}

	GrantNewLease(&store, req, row);
	LeaseStoreClose(&store);
	return GRANT_DONE;
}

static void
GetGrantRequest(FunctionCallInfo fcinfo, GrantRequest *req)
{
	ArgGetName(fcinfo, 0, &req->name);
	req->ttl_us = ArgGetTTL(fcinfo, 1);
	req->owner = ArgGetOwner(fcinfo, 2, true);
}

/*
 * dlock_try_acquire - SQL function dlock.try_acquire(name, ttl, owner)
 *
 * Grants at once or returns NULL; never blocks.
 */
Datum
dlock_try_acquire(PG_FUNCTION_ARGS)
{
	GrantRequest req;
	LeaseRow	row;
	TimestampTz held_until;

	GetGrantRequest(fcinfo, &req);
	CheckLeasesWritable("dlock.try_acquire");

	if (AttemptGrant(&req, false, &row, &held_until) != GRANT_DONE)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(LeaseResult(fcinfo, &req.name, &row));
}

/*
 * SleepBeforeRetry - wait on the latch before the next attempt
 *
 * The sleep is short at first and grows, but never lasts past the moment
 * the holder's lease expires or the caller's deadline.  Interrupts are
 * served on return, so a cancel or statement_timeout ends the wait at once.
 */
static void
SleepBeforeRetry(int64 *sleep_us, GrantOutcome outcome, TimestampTz held_until,
				 TimestampTz deadline)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		us = *sleep_us;
	long		ms;

	if (outcome == GRANT_HELD)
		us = Min(us, Max(held_until - now, 0) + 1000);
	if (deadline != DT_NOEND)
		us = Min(us, Max(deadline - now, 0));
	ms = (long) ((us + 999) / 1000);

	if (ms > 0)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	CHECK_FOR_INTERRUPTS();

	*sleep_us = Min(*sleep_us * 2, WAIT_LAST_SLEEP_US);
}

/*
 * dlock_acquire - SQL function dlock.acquire(name, ttl, owner, timeout)
 *
 * Waits until granted.  timeout NULL waits until cancelled (or until
 * statement_timeout or lock_timeout); timeout 0 does not wait.  When the
 * timeout passes: 55P03.
 *
 * Without a timeout, waits for the name's lock happen in the lock manager;
 * with one, they are polled, so that the deadline is kept exactly.  A live
 * lease of another owner is always waited out by polling on the latch.
 */
Datum
dlock_acquire(PG_FUNCTION_ARGS)
{
	GrantRequest req;
	LeaseRow	row;
	int64		timeout_us;
	TimestampTz deadline = DT_NOEND;
	TimestampTz held_until = 0;
	int64		sleep_us = WAIT_FIRST_SLEEP_US;
	GrantOutcome outcome;

	GetGrantRequest(fcinfo, &req);
	timeout_us = ArgGetTimeout(fcinfo, 3);
	CheckLeasesWritable("dlock.acquire");

	if (timeout_us >= 0)
		deadline = ExpiryAfter(GetCurrentTimestamp(), timeout_us);

	for (;;)
	{
		outcome = AttemptGrant(&req, deadline == DT_NOEND, &row, &held_until);
		if (outcome == GRANT_DONE)
			PG_RETURN_DATUM(LeaseResult(fcinfo, &req.name, &row));
		if (deadline != DT_NOEND && GetCurrentTimestamp() >= deadline)
			break;
		SleepBeforeRetry(&sleep_us, outcome, held_until, deadline);
	}

	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("could not acquire lease \"%.*s\" within the timeout",
					req.name.len, req.name.data),
			 outcome == GRANT_HELD ?
			 errdetail("Another owner holds the lease.") :
			 errdetail("The lease is being changed, or a transaction still has writes fenced under its previous grant.")));
	PG_RETURN_NULL();			/* keep compiler quiet */
}

/*
 * FetchHeldLease - lock a name for a change and read its row; true if
 * owner holds it live (and may act as the holder's role)
 *
 * When it returns false the lock is already given back.
 */
static bool
FetchHeldLease(LeaseStore *store, const LeaseName *name, const char *owner,
			   LeaseRow *row, TimestampTz *now)
{
	NameLockAcquire(name, DLOCK_CHANGE_LOCKMODE, true);
	LeaseStoreOpen(store, RowExclusiveLock);
	LeaseStoreFetch(store, name, row);
	*now = GetCurrentTimestamp();
	if (LeaseIsLive(row, *now) && IsSameHolder(row, owner))
		return true;
	NameLockRelease(name, DLOCK_CHANGE_LOCKMODE);
	LeaseStoreClose(store);
	return false;
}

/*
 * dlock_renew - SQL function dlock.renew(name, owner, ttl)
 *
 * Same token, expiry from now.  NULL when owner does not hold a live lease:
 * an expired lease is not revived; the client must acquire a new token.
 */
Datum
dlock_renew(PG_FUNCTION_ARGS)
{
	LeaseName	name;
	char	   *owner;
	int64		ttl_us;
	LeaseStore	store;
	LeaseRow	row;
	TimestampTz now;

	ArgGetName(fcinfo, 0, &name);
	owner = ArgGetOwner(fcinfo, 1, false);
	ttl_us = ArgGetTTL(fcinfo, 2);
	CheckLeasesWritable("dlock.renew");

	if (!FetchHeldLease(&store, &name, owner, &row, &now))
		PG_RETURN_NULL();
	ExtendLease(&store, &name, &row, ttl_us, now);
	LeaseStoreClose(&store);
	PG_RETURN_DATUM(LeaseResult(fcinfo, &name, &row));
}

/*
 * EndLease - mark a live lease ended; its token fails dlock.fence() from
 * the commit on
 */
static void
EndLease(LeaseStore *store, const LeaseName *name, LeaseRow *row,
		 TimestampTz now, const char *reason)
{
	row->ended = true;
	row->ended_at = now;
	row->end_reason = reason;
	WriteChange(store, name, row);
}

/*
 * dlock_release - SQL function dlock.release(name, owner)
 *
 * Compare-and-release: false when owner does not hold a live lease.
 */
Datum
dlock_release(PG_FUNCTION_ARGS)
{
	LeaseName	name;
	char	   *owner;
	LeaseStore	store;
	LeaseRow	row;
	TimestampTz now;

	ArgGetName(fcinfo, 0, &name);
	owner = ArgGetOwner(fcinfo, 1, false);
	CheckLeasesWritable("dlock.release");

	if (!FetchHeldLease(&store, &name, owner, &row, &now))
		PG_RETURN_BOOL(false);
	EndLease(&store, &name, &row, now, "released");
	LeaseStoreClose(&store);
	PG_RETURN_BOOL(true);
}

/*
 * dlock_force_release - SQL function dlock.force_release(name)
 *
 * Ends a live lease whoever holds it, for a role that may act as the
 * holder's role.  False when there is no live lease.
 */
Datum
dlock_force_release(PG_FUNCTION_ARGS)
{
	LeaseName	name;
	LeaseStore	store;
	LeaseRow	row;
	TimestampTz now;

	ArgGetName(fcinfo, 0, &name);
	CheckLeasesWritable("dlock.force_release");

	NameLockAcquire(&name, DLOCK_CHANGE_LOCKMODE, true);
	LeaseStoreOpen(&store, RowExclusiveLock);
	LeaseStoreFetch(&store, &name, &row);
	now = GetCurrentTimestamp();

	if (!LeaseIsLive(&row, now))
	{
		NameLockRelease(&name, DLOCK_CHANGE_LOCKMODE);
		LeaseStoreClose(&store);
		PG_RETURN_BOOL(false);
	}
	if (!MayActFor(row.holder_role))
	{
		char	   *holder = GetUserNameFromId(row.holder_role, true);

		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to force-release lease \"%.*s\"",
						name.len, name.data),
				 errdetail("Only roles with the privileges of role \"%s\" may end its leases.",
						   holder ? holder : "(dropped role)")));
	}

	EndLease(&store, &name, &row, now, "force_released");
	LeaseStoreClose(&store);
	PG_RETURN_BOOL(true);
}
