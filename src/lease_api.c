/*-------------------------------------------------------------------------
 *
 * lease_api.c
 *	  The SQL functions that grant and end leases: try_acquire, acquire,
 *	  renew, release and force_release.
 *
 * What each of these calls does to a lease in each of its states (grant,
 * same-owner re-acquire, renew, release, force_release), and what a request
 * of each kind (exclusive, shared, a semaphore's permit) may do with the
 * rows of a name's holders, are the tables in lease_status.c; this file
 * carries them out, under the name's lock:
 *
 *	- Waiters of every kind queue per name in arrival order (waiting.c);
 *	  only the head of the queue waits for the lease itself.
 *	- A grant of a new token first takes, in DLOCK_GRANT_LOCKMODE, the pins
 *	  of the tokens it must wait for (GrantPinTags): that of the slot it
 *	  writes and those of the rows of other kinds.  It takes them without
 *	  waiting; when one is busy it gives back everything, waits for that
 *	  one alone, and looks again, so it never waits for a pin while holding
 *	  the name's lock or another pin.
 *	- Renew, release, force_release and the same owner's re-acquire change
 *	  the holder's row without a new token.  They hold
 *	  DLOCK_CHANGE_LOCKMODE, which serializes them with grants but does not
 *	  wait for fenced transactions.
 *
 * The commit of a grant is always durable, locally and on synchronous
 * standbys (durability.c), even with synchronous_commit = off, because a
 * grant lost in a crash or a failover would let its token be issued again.
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
#include "utils/timestamp.h"

#include "dlock.h"

PG_FUNCTION_INFO_V1(dlock_try_acquire);
PG_FUNCTION_INFO_V1(dlock_acquire);
PG_FUNCTION_INFO_V1(dlock_renew);
PG_FUNCTION_INFO_V1(dlock_release);
PG_FUNCTION_INFO_V1(dlock_force_release);

/* Why and until when an attempt has to wait */
typedef struct GrantWait
{
	TimestampTz until;			/* expiry, or end of lock-delay */
	int64		session_token;	/* token of a live session-bound lease, or 0 */
} GrantWait;

const WaitLimit NoWait = {false, 0};
const LeaseKind ExclusiveKind = {false, 1};
const WaitLimit WaitForever = {true, DT_NOEND};

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
 * MayActFor - whether the current role may act on leases of holder_role
 */
static inline bool
MayActFor(Oid holder_role)
{
	return has_privs_of_role(GetUserId(), holder_role);
}

bool
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

/*
 * ExpiryAfter - now + ttl, saturating at the end of the timestamp range
 * (dlock.max_ttl keeps real ttls far below that)
 */
TimestampTz
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
	FenceCacheLeaseChanged();
}

/*
 * ExtendLease - the same owner asked again: same token, expiry from now,
 * and the value, when one is given
 */
void
ExtendLease(LeaseStore *store, const LeaseName *name, LeaseRow *row,
			int64 ttl_us, const char *value, TimestampTz now)
{
	row->expires_at = ExpiryAfter(now, ttl_us);
	if (value != NULL)
		row->value = unconstify(char *, value);
	WriteChange(store, name, row);
	DlockStatsCount(name, DLOCK_STAT_RENEWAL);
}

/*
 * GrantNewLease - issue a new token; the caller holds the grant's pins
 */
static void
GrantNewLease(LeaseStore *store, const GrantRequest *req, LeaseRow *row)
{
	if (req->session_bound)
		SessionLeasePrune();
	GrantLeaseWithToken(store, req, row, LeaseStoreNextToken());
}

/*
 * GrantLeaseWithToken - write the grant of a token that the caller took
 * from LeaseStoreNextToken() into row (GrantTargetRow); the caller holds
 * the grant's pins (GrantPinsTake)
 */
void
GrantLeaseWithToken(LeaseStore *store, const GrantRequest *req, LeaseRow *row,
					int64 token)
{
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
	if (dlock_stats_counting)
		DlockStatsGranted(&req->name, row, now);
	row->token = token;
	row->kind = req->kind;
	row->owner = req->owner;
	row->holder_role = GetUserId();
	row->acquired_at = now;
	row->expires_at = ExpiryAfter(now, req->ttl_us);
	row->ended = false;
	row->end_reason = LEASE_NOT_ENDED;
	row->lock_delay_us = req->lock_delay_us;
	row->session_bound = req->session_bound;
	row->holder_pid = req->session_bound ? MyProcPid : 0;
	row->value = req->value;
	WriteChange(store, &req->name, row);
	WakeWatchersAtCommit(&req->name);

	if (req->session_bound)
		SessionLeaseTake(&req->name, token);

	RequireDurableCommit();
}

/*
 * GrantTargetRow - the row a grant decided by LeaseDecide writes: the free
 * row of its slot, or a new one
 */
LeaseRow *
GrantTargetRow(const LeaseRows *rows, const LeaseDecision *d)
{
	LeaseRow   *row;

	Assert(d->status == LEASE_FREE);
	if (d->target >= 0)
		return &rows->row[d->target];
	row = palloc0(sizeof(LeaseRow));
	row->found = false;
	row->slot = d->slot;
	return row;
}

/*
 * GrantPinTags - the pins a grant must hold in DLOCK_GRANT_LOCKMODE before
 * it writes: that of the slot it writes (for slot 0 always the name's own
 * lock, also when the slot has no row yet), and that of every other row
 * whose fenced transactions it must wait for (LeaseRowPinConflicts).  For
 * an exclusive name that is one lock, as it always was.
 */
static int
GrantPinTags(const LeaseName *name, const LeaseRows *rows,
			 const LeaseDecision *d, const LeaseKind *kind, LOCKTAG **tags)
{
	int			count = 0;

	*tags = palloc(sizeof(LOCKTAG) * (rows->count + 1));
	if (d->target >= 0)
		PinLockTag(&(*tags)[count++], name, &rows->row[d->target]);
	else if (d->slot == 0)
	{
		LeaseRow	first = {0};

		PinLockTag(&(*tags)[count++], name, &first);
	}
	for (int i = 0; i < rows->count; i++)
	{
		if (i != d->target && LeaseRowPinConflicts(&rows->row[i], kind))
			PinLockTag(&(*tags)[count++], name, &rows->row[i]);
	}
	return count;
}

/*
 * GrantPinsTake - take the grant's pins (GrantPinTags) without waiting;
 * false, holding none of them, with *busy the one that was not available
 */
bool
GrantPinsTake(const LeaseName *name, const LeaseRows *rows,
			  const LeaseDecision *d, const LeaseKind *kind, LOCKTAG *busy)
{
	LOCKTAG    *tags;
	int			count = GrantPinTags(name, rows, d, kind, &tags);

	for (int i = 0; i < count; i++)
	{
		if (!LockAcquireWithin(&tags[i], DLOCK_GRANT_LOCKMODE, NoWait))
		{
			*busy = tags[i];
			while (--i >= 0)
				LockRelease(&tags[i], DLOCK_GRANT_LOCKMODE, false);
			pfree(tags);
			return false;
		}
	}
	pfree(tags);
	return true;
}

/*
 * GrantPinsRelease - give back the pins that GrantPinsTake took, when the
 * grant is not made after all (a set that another name holds up)
 */
void
GrantPinsRelease(const LeaseName *name, const LeaseRows *rows,
				 const LeaseDecision *d, const LeaseKind *kind)
{
	LOCKTAG    *tags;
	int			count = GrantPinTags(name, rows, d, kind, &tags);

	for (int i = 0; i < count; i++)
		LockRelease(&tags[i], DLOCK_GRANT_LOCKMODE, false);
	pfree(tags);
}

/*
 * NotGranted - the outcome of a decision that grants nothing (extend_only
 * turns a free name into GRANT_QUEUED), with until when in *wait
 */
static GrantOutcome
NotGranted(const LeaseDecision *d, GrantWait *wait)
{
	wait->until = d->until;
	wait->session_token = d->session_token;
	if (d->status == LEASE_FREE)
		return GRANT_QUEUED;
	return d->status == LEASE_LIVE ? GRANT_HELD : GRANT_DELAYED;
}

/*
 * ClaimTag - the tag a grant made alongside others claims, in
 * DLOCK_SPACE_CLAIM, so that two such grants made at the same time neither
 * write the same empty slot nor both make a lease for one owner: key the
 * name's hash mixed with the slot or the owner.  A collision only makes two
 * grants wait for one another.
 */
static void
ClaimTag(LOCKTAG *tag, const LeaseName *name, const char *owner, int32 slot)
{
	uint64		key;

	if (owner != NULL)
		key = hash_combine64(name->hash,
							 hash_bytes_extended((const unsigned char *) owner,
												 strlen(owner), 0));
	else
		key = hash_combine64(name->hash, (uint64) slot + 1);
	DlockLockTag(tag, DLOCK_SPACE_CLAIM, key);
}

/*
 * KindClaimTag - the tag that keeps shared grants and permits' grants made
 * alongside others apart: readers hold it in ShareLock, permits in
 * RowExclusiveLock, modes that each kind shares with itself and that
 * conflict with one another
 */
static void
KindClaimTag(LOCKTAG *tag, const LeaseName *name)
{
	DlockLockTag(tag, DLOCK_SPACE_CLAIM,
				 hash_combine64(name->hash, UINT64CONST(0x6b696e64)));
}

/*
 * RowOfSlot - the row of slot in rows, or NULL
 */
static LeaseRow *
RowOfSlot(const LeaseRows *rows, int32 slot)
{
	for (int i = 0; i < rows->count; i++)
		if (rows->row[i].slot == slot)
			return &rows->row[i];
	return NULL;
}

/*
 * AttemptGrantAlongside - grant a shared lease or a permit at the same time
 * as other grants of its kind; false when this way does not apply (the
 * caller then takes the serialized way), else *outcome
 *
 * It holds the name's lock in DLOCK_ALONGSIDE_LOCKMODE, which the grants
 * of exclusive leases, the serialized grants, watchers' reads and purge
 * conflict with, and the name's kind claim in a mode that the other kind
 * made alongside conflicts with.  So while it decides, the rows it reads
 * can only change by grants of its own kind made alongside, and by
 * renewals and releases, which leave free rows alone.  It applies while
 * every row of the name is of the request's kind and the owner holds none
 * of them live: then nothing but a free slot is needed.  Such grants see
 * the same free slots, so each slot is claimed first (a free row by its
 * pin, which also waits for nobody fenced under its old token; an empty
 * slot by its claim tag; both kept until the end of the transaction) and
 * read again once claimed: a grant that committed meanwhile may have taken
 * it.  Since every slot is below the kind's limit and no two grants write
 * one slot, a semaphore still has at most N live permits.  The owner is
 * claimed too, so that two grants for one owner do not both make a lease.
 * Slot 0 is left to the serialized way, since its pin is the name's own
 * lock.
 */
static bool
AttemptGrantAlongside(const GrantRequest *req, WaitLimit limit, LeaseRow *row,
					  GrantWait *wait, GrantOutcome *outcome)
{
	const LeaseName *name = &req->name;
	LOCKMODE	kind_mode = req->kind.shared ? ShareLock : RowExclusiveLock;
	LeaseStore	store;
	LeaseRows	rows;
	LeaseDecision d;
	LOCKTAG		kind_claim;
	LOCKTAG		owner_claim;
	TimestampTz now;
	bool		settled = false;

	*outcome = GRANT_BUSY;
	if (!NameLockAcquire(name, DLOCK_ALONGSIDE_LOCKMODE, limit))
		return true;
	KindClaimTag(&kind_claim, name);
	ClaimTag(&owner_claim, name, req->owner, 0);
	if (!LockAcquireWithin(&kind_claim, kind_mode, limit))
	{
		NameLockRelease(name, DLOCK_ALONGSIDE_LOCKMODE);
		return true;
	}
	if (!LockAcquireWithin(&owner_claim, ExclusiveLock, limit))
	{
		LockRelease(&kind_claim, kind_mode, false);
		NameLockRelease(name, DLOCK_ALONGSIDE_LOCKMODE);
		return true;
	}

	LeaseStoreOpen(&store, RowExclusiveLock);
	LeaseStoreFetchAll(&store, name, &rows);
	for (int i = 0; i < rows.count; i++)
	{
		if (!LeaseKindEqual(&rows.row[i].kind, &req->kind))
			goto give_back;
	}
	now = GetCurrentTimestamp();
	LeaseDecide(name, &rows, &req->kind, req->owner, now, &d);
	if (d.mine >= 0)
		goto give_back;
	if (d.status != LEASE_FREE)
	{
		*outcome = NotGranted(&d, wait);
		settled = true;
		goto give_back;
	}

	for (int c = 0; c < d.ncandidates; c++)
	{
		LOCKTAG		claim;
		LeaseRows	again;
		LeaseRow   *now_there;
		LeaseRow   *target;

		LeaseDecisionUseCandidate(&d, c);
		if (d.slot == 0)
			continue;
		target = d.target >= 0 ? &rows.row[d.target] : NULL;
		if (target != NULL)
			PinLockTag(&claim, name, target);
		else
			ClaimTag(&claim, name, NULL, d.slot);
		if (!LockAcquireWithin(&claim, DLOCK_GRANT_LOCKMODE, NoWait))
			continue;

		/* Still as it was, now that no one else can take it? */
		LeaseStoreFetchAll(&store, name, &again);
		now_there = RowOfSlot(&again, d.slot);
		if (target == NULL ? now_there == NULL :
			(now_there != NULL && now_there->token == target->token))
		{
			*row = target == NULL ? *GrantTargetRow(&rows, &d) : *now_there;
			GrantNewLease(&store, req, row);
			LeaseStoreClose(&store);
			*outcome = GRANT_DONE;
			return true;
		}
		LockRelease(&claim, DLOCK_GRANT_LOCKMODE, false);
	}

	/*
	 * Not this way (false: no free slot could be claimed, rows of another
	 * kind, the owner's own lease), or settled without a grant (true)
	 */
give_back:
	LockRelease(&owner_claim, ExclusiveLock, false);
	LockRelease(&kind_claim, kind_mode, false);
	NameLockRelease(name, DLOCK_ALONGSIDE_LOCKMODE);
	LeaseStoreClose(&store);
	return settled;
}

/*
 * AttemptGrant - one attempt to grant or extend a lease
 *
 * Lock waits (for a transaction that is changing the name, or one that
 * fenced a write under a token the grant must wait for) happen in the lock
 * manager within limit; GRANT_BUSY when they do not end in time.
 * GRANT_HELD and GRANT_DELAYED say, in *wait, until when the name is not
 * grantable.  With extend_only, only the same owner's live lease is
 * extended.  A shared lease or a permit is first tried alongside other
 * grants of its kind (AttemptGrantAlongside); the way below takes the
 * name's lock in a mode that excludes every other grant: DLOCK_CHANGE_LOCKMODE for an exclusive lease
 * (whose grant also takes DLOCK_GRANT_LOCKMODE on the name, the pin of slot
 * 0), DLOCK_KIND_LOCKMODE for the others.  Extending the owner's own live
 * lease needs only DLOCK_CHANGE_LOCKMODE, whatever its kind: it writes no
 * row that a grant made alongside others could write, so it does not wait
 * for them.
 */
static GrantOutcome
AttemptGrant(const GrantRequest *req, WaitLimit limit, bool extend_only,
			 LeaseRow *row, GrantWait *wait)
{
	const LeaseName *name = &req->name;
	LOCKMODE	mode = LeaseKindExclusive(&req->kind) || extend_only ?
		DLOCK_CHANGE_LOCKMODE : DLOCK_KIND_LOCKMODE;
	GrantOutcome outcome;

	if (!LeaseKindExclusive(&req->kind) && !extend_only &&
		AttemptGrantAlongside(req, limit, row, wait, &outcome))
		return outcome;

	for (;;)
	{
		LeaseStore	store;
		LeaseRows	rows;
		LeaseDecision d;
		TimestampTz now;
		LOCKTAG		busy;

		if (!NameLockAcquire(name, mode, limit))
			return GRANT_BUSY;

		LeaseStoreOpen(&store, RowExclusiveLock);
		LeaseStoreFetchAll(&store, name, &rows);
		now = GetCurrentTimestamp();
		LeaseDecide(name, &rows, &req->kind, req->owner, now, &d);
		if (d.mine >= 0)
		{
			*row = rows.row[d.mine];
			ExtendLease(&store, name, row, req->ttl_us, req->value, now);
			LeaseStoreClose(&store);
			return GRANT_DONE;
		}
		if (d.status != LEASE_FREE || extend_only)
		{
			NameLockRelease(name, mode);
			LeaseStoreClose(&store);
			return NotGranted(&d, wait);
		}

		/*
		 * Grantable, once the transactions fenced under old tokens are done:
		 * into the first slot whose pins are not busy
		 */
		for (int c = 0; c < d.ncandidates; c++)
		{
			LOCKTAG		busy_here;

			LeaseDecisionUseCandidate(&d, c);
			if (GrantPinsTake(name, &rows, &d, &req->kind, &busy_here))
			{
				*row = *GrantTargetRow(&rows, &d);
				GrantNewLease(&store, req, row);
				LeaseStoreClose(&store);
				return GRANT_DONE;
			}
			if (c == 0)
				busy = busy_here;
		}

		/*
		 * Wait for that pin without holding the change lock, so that a
		 * fenced transaction that renews or releases before it commits
		 * cannot deadlock with us, then look again: others may have acted
		 * meanwhile.
		 */
		NameLockRelease(name, mode);
		LeaseStoreClose(&store);
		if (!LockAcquireWithin(&busy, DLOCK_GRANT_LOCKMODE, limit))
			return GRANT_BUSY;
		LockRelease(&busy, DLOCK_GRANT_LOCKMODE, false);
	}
}

static void
GetGrantRequest(FunctionCallInfo fcinfo, GrantRequest *req,
				int lock_delay_argno, int session_bound_argno, int value_argno,
				int queue_argno, int shared_argno)
{
	ArgGetName(fcinfo, 0, &req->name);
	req->ttl_us = ArgGetTTL(fcinfo, 1);
	req->owner = ArgGetOwner(fcinfo, 2, true);
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
	ArgGetKind(fcinfo, shared_argno, shared_argno + 1, &req->kind);
}

/*
 * dlock_try_acquire - SQL function
 *	  dlock.try_acquire(name, ttl, owner, lock_delay, session_bound, value,
 *						queue)
 *
 * Grants at once or returns NULL; never blocks.  While others wait in
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

	GetGrantRequest(fcinfo, &req, 3, 4, 5, 6, 7);
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
	{
		DlockStatsCount(&req.name, DLOCK_STAT_REFUSAL);
		PG_RETURN_NULL();
	}
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
			if (kind->max_holders > 1)
				detail = psprintf("All %d permits are held.", kind->max_holders);
			else if (kind->shared)
				detail = "Another owner holds an exclusive lease.";
			else
				detail = "Another owner holds the lease.";
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

	GetGrantRequest(fcinfo, &req, 4, 5, 6, -1, 7);
	limit = AcquireLimit(ArgGetTimeout(fcinfo, 3));
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

	if (!QueueJoin(&req.name, NoWait))
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
		if (outcome == GRANT_DONE)
		{
			error_context_stack = waitcontext.previous;
			PG_RETURN_DATUM(LeaseResult(fcinfo, &req.name, &row));
		}
		if (limit.wait)
			AcquireWaitBegins(&req.name, &wait_start);
		if (!QueueJoin(&req.name, limit))
		{
			error_context_stack = waitcontext.previous;
			AcquireTimedOut(&req.name, &req.kind, GRANT_QUEUED, wait_start);
		}
	}

	for (;;)
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
			error_context_stack = waitcontext.previous;
			PG_RETURN_DATUM(LeaseResult(fcinfo, &req.name, &row));
		}
		if (!limit.wait || outcome == GRANT_BUSY ||
			(limit.deadline != DT_NOEND && GetCurrentTimestamp() >= limit.deadline))
			break;

		AcquireWaitBegins(&req.name, &wait_start);
		if (outcome == GRANT_HELD && wait.session_token != 0)
			SessionLeaseWaitForHolder(wait.session_token, wait.until, limit);
		else
			SleepUntil(wait.until, limit);
	}

	error_context_stack = waitcontext.previous;
	AcquireTimedOut(&req.name, &req.kind, outcome, wait_start);
	PG_RETURN_NULL();			/* keep compiler quiet */
}

/*
 * FetchHeldLease - lock a name for a change and read its rows; true if
 * owner holds one of them live (and may act as the holder's role): that
 * lease is *row
 *
 * When it returns false the lock is already given back.
 */
bool
FetchHeldLease(LeaseStore *store, const LeaseName *name, const char *owner,
			   LeaseRow *row, TimestampTz *now)
{
	LeaseRows	rows;
	const LeaseRow *lost = NULL;

	NameLockAcquire(name, DLOCK_CHANGE_LOCKMODE, WaitForever);
	LeaseStoreOpen(store, RowExclusiveLock);
	LeaseStoreFetchAll(store, name, &rows);
	*now = GetCurrentTimestamp();
	for (int i = 0; i < rows.count; i++)
	{
		if (!IsSameHolder(&rows.row[i], owner))
			continue;
		if (LeaseIsLive(&rows.row[i], *now))
		{
			*row = rows.row[i];
			return true;
		}
		if (lost == NULL || rows.row[i].token > lost->token)
			lost = &rows.row[i];
	}
	/* The holder finds its lease lost: counted once per token */
	if (dlock_stats_counting && lost != NULL)
		DlockStatsHolderLost(name, lost, *now);
	NameLockRelease(name, DLOCK_CHANGE_LOCKMODE);
	LeaseStoreClose(store);
	return false;
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
	LeaseStore	store;
	LeaseRow	row;
	TimestampTz now;

	ArgGetName(fcinfo, 0, &name);
	owner = ArgGetOwner(fcinfo, 1, false);
	ttl_us = ArgGetTTL(fcinfo, 2);
	value = ArgGetValue(fcinfo, 3);
	CheckLeasesWritable("dlock.renew");

	if (!FetchHeldLease(&store, &name, owner, &row, &now))
		PG_RETURN_NULL();
	ExtendLease(&store, &name, &row, ttl_us, value, now);
	LeaseStoreClose(&store);
	PG_RETURN_DATUM(LeaseResult(fcinfo, &name, &row));
}

/*
 * EndLease - mark a live lease ended; its token fails dlock.fence() from
 * the commit on, when the first waiter is woken
 */
void
EndLease(LeaseStore *store, const LeaseName *name, LeaseRow *row,
		 TimestampTz now, LeaseEndReason reason)
{
	row->ended = true;
	row->ended_at = now;
	row->end_reason = reason;
	WriteChange(store, name, row);
	WakeQueueHeadAtCommit(name);
	WakeWatchersAtCommit(name);
	if (row->session_bound)
		SessionLeaseForgetAtCommit(row->token);
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
	LeaseStore	store;
	LeaseRow	row;
	TimestampTz now;

	ArgGetName(fcinfo, 0, &name);
	owner = ArgGetOwner(fcinfo, 1, false);
	CheckLeasesWritable("dlock.release");

	ReleaseCallBegin();
	if (!FetchHeldLease(&store, &name, owner, &row, &now))
	{
		ReleaseCallEnd(false);
		/* Not held: a place kept in the queue is given up instead */
		PG_RETURN_BOOL(PlaceGiveBack(&name, owner));
	}
	EndLease(&store, &name, &row, now, LEASE_END_RELEASED);
	DlockStatsCount(&name, DLOCK_STAT_RELEASE);
	LeaseStoreClose(&store);
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
	LeaseStore	store;
	LeaseRows	rows;
	TimestampTz now;
	bool		ended = false;

	ArgGetName(fcinfo, 0, &name);
	CheckLeasesWritable("dlock.force_release");

	NameLockAcquire(&name, DLOCK_CHANGE_LOCKMODE, WaitForever);
	LeaseStoreOpen(&store, RowExclusiveLock);
	LeaseStoreFetchAll(&store, &name, &rows);
	now = GetCurrentTimestamp();

	for (int i = 0; i < rows.count; i++)
	{
		const LeaseRow *row = &rows.row[i];

		if (LeaseIsLive(row, now) && !MayActFor(row->holder_role))
		{
			char	   *holder = GetUserNameFromId(row->holder_role, true);

			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to force-release lease \"%.*s\"",
							name.len, name.data),
					 errdetail("Only roles with the privileges of role \"%s\" may end its leases.",
							   holder ? holder : "(dropped role)")));
		}
	}
	for (int i = 0; i < rows.count; i++)
	{
		if (!LeaseIsLive(&rows.row[i], now))
			continue;
		EndLease(&store, &name, &rows.row[i], now, LEASE_END_FORCE_RELEASED);
		DlockStatsCount(&name, DLOCK_STAT_FORCE_RELEASE);
		ended = true;
	}
	if (!ended)
		NameLockRelease(&name, DLOCK_CHANGE_LOCKMODE);
	LeaseStoreClose(&store);
	PG_RETURN_BOOL(ended);
}
