/*-------------------------------------------------------------------------
 *
 * lock_tags.c
 *	  Names and their lock tags: the hash of a name, the tags of dlock's
 *	  lock spaces, and the two questions about locks that every layer may
 *	  ask without waiting: does this backend hold a name's lock, and does a
 *	  session-bound holder still hold its session lock.
 *
 * A name is hashed to 64 bits; its tag is (MyDatabaseId, high 32 bits,
 * low 32 bits, space).  Two names that hash alike share a lock and so are
 * merely serialized together: correctness never depends on the hash being
 * unique, only on one name always mapping to one tag.  Taking and waiting
 * for these locks is name_lock.c's, a layer up; what is here takes none
 * but a momentary probe, so that the model of lease states (lease_model.c)
 * can ask whether a holder is alive.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/base/lock_tags.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lock.h"

#include "base/base.h"
#include "dlock_compat.h"

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

/*
 * DlockLockTag - the tag of key in one of dlock's lock spaces
 */
void
DlockLockTag(LOCKTAG *tag, DlockLockSpace space, uint64 key)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId,
						 (uint32) (key >> 32),
						 (uint32) key,
						 (uint16) space);
}

/*
 * SetNameLockTag - the tag of a name's lock
 */
void
SetNameLockTag(LOCKTAG *tag, const LeaseName *name)
{
	DlockLockTag(tag, DLOCK_SPACE_NAME, name->hash);
}

/*
 * NameLockHeld - whether this backend holds the name's lock in mode
 */
bool
NameLockHeld(const LeaseName *name, LOCKMODE mode)
{
	LOCKTAG		tag;

	SetNameLockTag(&tag, name);
	return dlock_lock_held_by_me(&tag, mode);
}

/*
 * SessionLockAlive - whether the backend bound to a session-bound lease
 * still holds the lease's session lock (I6): this backend, or another one,
 * by a momentary probe in a mode that conflicts with the holder's
 *
 * Changes nothing but that probe, so it may be called anywhere, also while
 * a table of this backend's leases is being scanned.  On a standby the
 * primary's locks are not visible; the answer there is "alive", and the
 * ttl alone bounds the lease.
 */
bool
SessionLockAlive(int64 token)
{
	LOCKTAG		tag;

	DlockLockTag(&tag, DLOCK_SPACE_SESSION, (uint64) token);
	if (dlock_lock_held_by_me(&tag, ExclusiveLock))
		return true;
	if (RecoveryInProgress())
		return true;
	if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, ShareLock, false);
	return false;
}
