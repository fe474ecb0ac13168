/*-------------------------------------------------------------------------
 *
 * base.h
 *	  The base layer: lock spaces and modes, limits, settings, lease names and their lock tags, pending items.
 *
 * What every other layer stands on; nothing here knows a lease row.  The lock
 * modes are the vocabulary of the conflict rule, which is drawn once, in the
 * banner of engine/grant.c (I2 in docs/internals.md points there).
 *
 * The rows are always read in their latest committed state (never through
 * the transaction snapshot), which is exact because the reader holds a lock
 * that conflicts with every writer of what it decides on, and every writer
 * holds its lock until its commit is visible.  (The view dlock.leases shows
 * what the caller's snapshot sees, and dlock.watch() reads through a fresh
 * snapshot: both only show rows.)
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/base/base.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_BASE_H
#define DLOCK_BASE_H

#include "access/xact.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "storage/lock.h"

/*
 * dlock's lock spaces: values of LOCKTAG.locktag_field4.  Core advisory locks
 * use 1 (one bigint key) and 2 (two int4 keys), so no pg_advisory_lock() call
 * can collide with dlock.  pg_locks shows them with locktype 'advisory',
 * classid/objid = the high/low 32 bits of the key, and objsubid = the space.
 */
typedef enum DlockLockSpace
{
	DLOCK_SPACE_NAME = 17484,	/* key: name hash; serializes a name's state */
	DLOCK_SPACE_QUEUE = 17485,	/* key: name hash; the FIFO queue of waiters */
	DLOCK_SPACE_SESSION = 17486,	/* key: token; held by a session-bound holder */
	DLOCK_SPACE_WATCH = 17487,	/* key: name hash; held by dlock.watch() callers */
	DLOCK_SPACE_TOKEN = 17488,	/* key: token; pins a token of a slot > 0 */
	DLOCK_SPACE_CLAIM = 17489,	/* key: name hash mixed with a slot or an
								 * owner or the kind: who writes a slot > 0
								 * (or slot 0, granting alongside), who
								 * grants alongside for an owner, and the
								 * first grants of a name without rows */
	DLOCK_SPACE_EPOCH = 17490	/* key 0: moves the token counter up to the
								 * clock at an incarnation's first grant
								 * (token.c) */
} DlockLockSpace;

/*
 * The modes of the name's lock (DLOCK_SPACE_NAME), weakest first, and who
 * takes each; grant.c's banner has the conflict rule they implement.
 *
 *	DLOCK_FENCE_LOCKMODE	dlock.fence(), until the end of the top-level
 *							transaction: pins the token of slot 0
 *	DLOCK_ALONGSIDE_LOCKMODE	a shared lease or permit granted alongside
 *							the live ones of its kind, into a slot it
 *							claims (slot 0 last: grant.c's banner)
 *	DLOCK_CHANGE_LOCKMODE	renew, release, and the same owner's
 *							re-acquire: a holder changes its own row,
 *							claiming its slot when it is > 0
 *	DLOCK_SERIAL_LOCKMODE	every other grant (exclusive, set member, first
 *							grant of a name, other kinds present) and
 *							force_release: excludes every writer
 *	DLOCK_GRANT_LOCKMODE	the pin of slot 0 taken by a grant that writes it
 *							the serialized way, and purge: waits for every
 *							fenced transaction
 *
 * Pins of a token in a slot > 0 (DLOCK_SPACE_TOKEN) use DLOCK_FENCE_LOCKMODE
 * and DLOCK_GRANT_LOCKMODE the same way; claims (DLOCK_SPACE_CLAIM) use
 * DLOCK_CLAIM_LOCKMODE.
 */
#define DLOCK_FENCE_LOCKMODE		AccessShareLock
#define DLOCK_ALONGSIDE_LOCKMODE	RowExclusiveLock
#define DLOCK_CHANGE_LOCKMODE		ShareUpdateExclusiveLock
#define DLOCK_SERIAL_LOCKMODE		ShareRowExclusiveLock
#define DLOCK_GRANT_LOCKMODE		AccessExclusiveLock
#define DLOCK_CLAIM_LOCKMODE		ExclusiveLock

/*
 * A name without rows has its first kind claimed (space 17489): shared
 * leases share the claim, permits take it one at a time (their limits may
 * differ).  The epoch lock (space 17490) serializes the moves of the token
 * counter up to the clock (token.c).
 */
#define DLOCK_FIRST_SHARED_LOCKMODE	ShareLock
#define DLOCK_FIRST_PERMIT_LOCKMODE	ExclusiveLock
#define DLOCK_EPOCH_LOCKMODE		ExclusiveLock
#define DLOCK_QUEUE_LOCKMODE		ExclusiveLock
#define DLOCK_WATCH_LOCKMODE		AccessShareLock

/*
 * try_acquire() looks at the queue holding this mode on the queue's tag: it
 * conflicts with the head's DLOCK_QUEUE_LOCKMODE (anyone waiting refuses
 * it), not with other callers of try_acquire() looking at the same moment
 */
#define DLOCK_QUEUE_LOOK_LOCKMODE	RowShareLock

/* Documented limits on the text arguments, in bytes */
#define DLOCK_MAX_NAME_BYTES	1024
#define DLOCK_MAX_OWNER_BYTES	256
#define DLOCK_MAX_VALUE_BYTES	1024

/* Documented limit on the number of names of one *_all call */
#define DLOCK_MAX_SET_NAMES		64

/*
 * Documented limit on max_holders, and on the shared leases of one name
 * live at once: every grant reads all of a name's rows
 */
#define DLOCK_MAX_HOLDERS		1000

/* The settings of the lease rules (settings.c) */
extern int	dlock_max_ttl;		/* seconds */
extern int	dlock_default_lock_delay;	/* milliseconds */
extern bool dlock_lazy_release;
extern bool dlock_durable_grants;
extern bool dlock_allow_session_bound;
extern void DlockSettingsDefine(void);

/*
 * A lease name as the C code passes it around: the bytes of the text value,
 * not NUL-terminated, plus the 64-bit hash that selects its lock tag.
 */
typedef struct LeaseName
{
	const char *data;
	int			len;
	uint64		hash;
} LeaseName;

/* Fixed seed, so a name (or an owner) hashes alike in every backend and release */
#define DLOCK_NAME_HASH_SEED	UINT64CONST(0x646c6f636b)

/* lock_tags.c: names, their tags, and the questions asked without waiting */
extern void LeaseNameInit(LeaseName *name, const char *data, int len);
extern void DlockLockTag(LOCKTAG *tag, DlockLockSpace space, uint64 key);
extern void SetNameLockTag(LOCKTAG *tag, const LeaseName *name);
extern bool NameLockHeld(const LeaseName *name, LOCKMODE mode);
extern bool SessionLockAlive(int64 token);

/*
 * A pending item that a (sub)transaction queues for its end begins with the
 * subtransaction that made it (xact_pending.c states the rule that drops them)
 */
typedef struct PendingItem
{
	SubTransactionId subid;
} PendingItem;

extern List *PendingItemsAtSubAbort(List *items, SubTransactionId mySubid);

/* module_version.c: the module against the catalog's version */
extern void DlockCheckModuleVersion(void);
extern void DlockModuleVersionAtEOXact(void);

#endif							/* DLOCK_BASE_H */
