/*-------------------------------------------------------------------------
 *
 * name_lock.c
 *	  Lock-manager locks in dlock's own advisory tag spaces, and waiting for
 *	  them within a deadline.
 *
 * A name is hashed to 64 bits; its tag is (MyDatabaseId, high 32 bits,
 * low 32 bits, space).  Two names that hash alike share a lock and so are
 * merely serialized together: correctness never depends on the hash being
 * unique, only on one name always mapping to one tag.
 *
 * The name and queue locks are transaction-level: a state change holds its
 * lock until commit, so the next reader of the row sees the committed change,
 * and an error releases everything.  Waiting goes through the lock manager,
 * which gives FIFO queueing, deadlock detection, lock_timeout, cancellation
 * and pg_locks visibility.
 *
 * Invariants: I2 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/locks/name_lock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "locks/locks.h"
#include "dlock_compat.h"

/* The two wait limits every layer above uses: none, and no deadline */
const WaitLimit NoWait = {false, 0};
const WaitLimit WaitForever = {true, DT_NOEND};

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
 * LockAcquireForMillis - wait for a transaction-level lock at most ms
 *
 * The lock manager's own timer does the timing: lock_timeout is lowered to
 * ms for this one wait, inside a subtransaction so that the timeout error
 * can be caught cleanly.  On success the lock passes to the enclosing
 * transaction.  Any other error (cancel, statement_timeout, a deadlock, or
 * the caller's own shorter lock_timeout) propagates.
 */
static bool
LockAcquireForMillis(const LOCKTAG *tag, LOCKMODE mode, int ms)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	int			saved_lock_timeout = LockTimeout;
	bool		ours = (saved_lock_timeout <= 0 || saved_lock_timeout > ms);
	volatile bool acquired = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);

	PG_TRY();
	{
		if (ours)
			LockTimeout = ms;
		(void) LockAcquire(tag, mode, false, false);
		LockTimeout = saved_lock_timeout;

		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;

		/*
		 * The subtransaction handed the lock to the transaction's resource
		 * owner; count it under the caller's instead, so that the caller can
		 * release it like any other.
		 */
		if (oldowner != CurTransactionResourceOwner)
		{
			(void) LockAcquire(tag, mode, false, true);
			CurrentResourceOwner = CurTransactionResourceOwner;
			LockRelease(tag, mode, false);
			CurrentResourceOwner = oldowner;
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		LockTimeout = saved_lock_timeout;
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();

		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;

		if (!ours || edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		acquired = false;
	}
	PG_END_TRY();

	return acquired;
}

/*
 * LockAcquireWithin - take a transaction-level lock, waiting within limit
 *
 * Returns false when the lock is not available in time (at once, for a
 * limit that does not wait).  Taking a lock this transaction already holds
 * just counts it again, so each successful call must be paired with one
 * release or left to the end of the transaction.
 */
bool
LockAcquireWithin(const LOCKTAG *tag, LOCKMODE mode, WaitLimit limit)
{
	TimestampTz now;
	int64		remaining_us;

	if (LockAcquire(tag, mode, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return true;
	if (!limit.wait)
		return false;
	if (limit.deadline == DT_NOEND)
	{
		(void) LockAcquire(tag, mode, false, false);
		return true;
	}

	now = GetCurrentTimestamp();
	if (now >= limit.deadline)
		return false;
	remaining_us = limit.deadline - now;
	return LockAcquireForMillis(tag, mode,
								(int) Min((remaining_us + 999) / 1000, INT_MAX));
}

/*
 * NameLockAcquire - take a transaction-level lock on a name's state
 */
bool
NameLockAcquire(const LeaseName *name, LOCKMODE mode, WaitLimit limit)
{
	LOCKTAG		tag;

	SetNameLockTag(&tag, name);
	return LockAcquireWithin(&tag, mode, limit);
}

/*
 * NameLockRelease - give back one count of a lock taken by NameLockAcquire
 *
 * Used when a call looked at a name and changed nothing, so that it does not
 * block others for the rest of its transaction.
 */
void
NameLockRelease(const LeaseName *name, LOCKMODE mode)
{
	LOCKTAG		tag;

	SetNameLockTag(&tag, name);
	LockRelease(&tag, mode, false);
	if (mode == DLOCK_SERIAL_LOCKMODE)
		LeaseStoreHeldRowsForget(name);
}

/*
 * PinLockTag - the tag whose DLOCK_FENCE_LOCKMODE lock pins the token of a
 * row: the name's own lock for slot 0 (so an exclusive lease pins with one
 * lock, as it always did), the token's tag for the other slots, so that the
 * pins of shared leases and permits do not hold up grants of other slots
 */
void
PinLockTag(LOCKTAG *tag, const LeaseName *name, const LeaseRow *row)
{
	if (row->slot == 0)
		SetNameLockTag(tag, name);
	else
		DlockLockTag(tag, DLOCK_SPACE_TOKEN, (uint64) row->token);
}

/*
 * SlotClaimTag - the tag that every writer of a slot > 0, and a grant made
 * alongside others into slot 0, holds in DLOCK_CLAIM_LOCKMODE while it
 * decides and writes (grant.c): the name's hash mixed with the slot.  A
 * collision with another name's slot only makes two writers wait for one
 * another.
 */
void
SlotClaimTag(LOCKTAG *tag, const LeaseName *name, int32 slot)
{
	Assert(slot >= 0);
	DlockLockTag(tag, DLOCK_SPACE_CLAIM, hash_combine64(name->hash, (uint64) slot));
}

/*
 * KindClaimTag - the tag with which the first grants made alongside of a
 * name without rows claim its kind (grant.c, ClaimFirstKind)
 */
void
KindClaimTag(LOCKTAG *tag, const LeaseName *name)
{
	DlockLockTag(tag, DLOCK_SPACE_CLAIM,
				 hash_combine64(name->hash, UINT64CONST(0x6b696e64)));
}

/*
 * OwnerClaimTag - the tag that a grant made alongside others holds for its
 * owner, so that two such grants for one owner do not both make a lease:
 * the name's hash mixed with the owner's.  It cannot equal a slot's claim
 * but by a hash collision, which again only makes two callers wait.
 */
void
OwnerClaimTag(LOCKTAG *tag, const LeaseName *name, const char *owner)
{
	uint64		owner_hash = hash_bytes_extended((const unsigned char *) owner,
												 strlen(owner), DLOCK_NAME_HASH_SEED);

	DlockLockTag(tag, DLOCK_SPACE_CLAIM, hash_combine64(name->hash, owner_hash));
}

/*
 * LockAcquireForTransaction - take a lock, waiting as long as it takes,
 * owned by the top-level transaction
 *
 * dlock.fence() promises that its pin lasts until the transaction ends; a
 * lock owned by a subtransaction would be dropped when that subtransaction
 * rolls back (a PL/pgSQL exception block, a savepoint), while the guarded
 * write it allowed may already be part of the parent.
 */
bool
LockAcquireForTransaction(const LOCKTAG *tag, LOCKMODE mode)
{
	ResourceOwner saved = CurrentResourceOwner;
	bool		acquired;

	CurrentResourceOwner = TopTransactionResourceOwner;
	PG_TRY();
	{
		acquired = LockAcquire(tag, mode, false, false) != LOCKACQUIRE_NOT_AVAIL;
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved;
	}
	PG_END_TRY();

	return acquired;
}

/*
 * LockReleaseForTransaction - release a lock taken by
 * LockAcquireForTransaction (the lock manager matches the owner)
 */
void
LockReleaseForTransaction(const LOCKTAG *tag, LOCKMODE mode)
{
	ResourceOwner saved = CurrentResourceOwner;

	CurrentResourceOwner = TopTransactionResourceOwner;
	PG_TRY();
	{
		LockRelease(tag, mode, false);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved;
	}
	PG_END_TRY();
}

bool
NameLockAcquireForTransaction(const LeaseName *name, LOCKMODE mode)
{
	LOCKTAG		tag;

	SetNameLockTag(&tag, name);
	return LockAcquireForTransaction(&tag, mode);
}

void
NameLockReleaseForTransaction(const LeaseName *name, LOCKMODE mode)
{
	LOCKTAG		tag;

	SetNameLockTag(&tag, name);
	LockReleaseForTransaction(&tag, mode);
}
