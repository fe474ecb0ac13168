/*-------------------------------------------------------------------------
 *
 * name_lock.c
 *	  Lock-manager locks on lease names, in dlock's own advisory tag space.
 *
 * A name is hashed to 64 bits; the tag is (MyDatabaseId, high 32 bits,
 * low 32 bits, DLOCK_LOCKTAG_CLASS).  Two names that hash alike share a lock
 * and so are merely serialized together: correctness never depends on the
 * hash being unique, only on one name always mapping to one tag.
 *
 * All locks here are transaction-level: a state change holds its lock until
 * commit, so the next reader of the row sees the committed change.  Waiting
 * goes through the lock manager, which gives FIFO queueing, deadlock
 * detection, lock_timeout, cancellation and pg_locks visibility.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/name_lock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/resowner.h"

#include "dlock.h"

/* Fixed seed, so a name maps to the same tag in every backend and release */
#define DLOCK_NAME_HASH_SEED	UINT64CONST(0x646c6f636b)

/*
 * LeaseNameInit - describe a name and compute the hash of its tag
 */
void
LeaseNameInit(LeaseName *name, const char *data, int len)
{
	name->data = data;
	name->len = len;
	name->hash = hash_bytes_extended((const unsigned char *) data, len,
									 DLOCK_NAME_HASH_SEED);
}

static void
SetNameLockTag(LOCKTAG *tag, const LeaseName *name)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId,
						 (uint32) (name->hash >> 32),
						 (uint32) name->hash,
						 DLOCK_LOCKTAG_CLASS);
}

/*
 * NameLockAcquire - take a transaction-level lock on a name
 *
 * With wait = false returns false at once when the lock is not available.
 * Taking a lock this transaction already holds just counts it again, so each
 * successful call must be paired with one NameLockRelease() or left to the
 * end of the transaction.
 */
bool
NameLockAcquire(const LeaseName *name, LOCKMODE mode, bool wait)
{
	LOCKTAG		tag;

	SetNameLockTag(&tag, name);
	return LockAcquire(&tag, mode, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
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
}

/*
 * NameLockAcquireForTransaction - like NameLockAcquire(wait = true), but
 * owned by the top-level transaction
 *
 * dlock.fence() promises that its pin lasts until the transaction ends; a
 * lock owned by a subtransaction would be dropped when that subtransaction
 * rolls back (a PL/pgSQL exception block, a savepoint), while the guarded
 * write it allowed may already be part of the parent.
 */
bool
NameLockAcquireForTransaction(const LeaseName *name, LOCKMODE mode)
{
	ResourceOwner saved = CurrentResourceOwner;
	bool		acquired;

	CurrentResourceOwner = TopTransactionResourceOwner;
	PG_TRY();
	{
		acquired = NameLockAcquire(name, mode, true);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved;
	}
	PG_END_TRY();

	return acquired;
}

/*
 * NameLockReleaseForTransaction - release a lock taken by
 * NameLockAcquireForTransaction (the lock manager matches the owner)
 */
void
NameLockReleaseForTransaction(const LeaseName *name, LOCKMODE mode)
{
	ResourceOwner saved = CurrentResourceOwner;

	CurrentResourceOwner = TopTransactionResourceOwner;
	PG_TRY();
	{
		NameLockRelease(name, mode);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved;
	}
	PG_END_TRY();
}
