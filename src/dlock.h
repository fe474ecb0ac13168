/*-------------------------------------------------------------------------
 *
 * dlock.h
 *	  Declarations shared by the dlock modules.
 *
 * A lease of a name is one row of dlock.lease_state.  Every change of that
 * row, and every fencing check against it, first takes a lock-manager lock
 * on the name in dlock's own advisory lock-tag space.  Three modes are used:
 *
 *	DLOCK_FENCE_LOCKMODE	taken by dlock.fence() and kept until the end of
 *							the top-level transaction.  It pins the current
 *							token: a new grant cannot commit meanwhile.
 *	DLOCK_CHANGE_LOCKMODE	taken to read and change the row without issuing
 *							a new token (renew, release, force_release, the
 *							same owner asking again).  Self-conflicting, so
 *							such changes of one name are serialized, but it
 *							does not wait for fenced transactions.
 *	DLOCK_GRANT_LOCKMODE	taken to issue a new token.  It conflicts with
 *							all three, so a grant waits for every fenced
 *							transaction of the previous token to end.
 *
 * The row is always read in its latest committed state (never through the
 * transaction snapshot), which is safe because the lock above is held and
 * every writer of the row holds it until its commit is visible.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/dlock.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_H
#define DLOCK_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"

/*
 * Value of LOCKTAG.locktag_field4 for dlock's name locks.  Core advisory
 * locks use 1 (one bigint key) and 2 (two int4 keys), so no call of
 * pg_advisory_lock() can ever collide with a dlock name.  pg_locks shows
 * these locks with locktype 'advisory' and objsubid 17484 ("DL").
 */
#define DLOCK_LOCKTAG_CLASS		0x444C

#define DLOCK_FENCE_LOCKMODE	AccessShareLock
#define DLOCK_CHANGE_LOCKMODE	ShareUpdateExclusiveLock
#define DLOCK_GRANT_LOCKMODE	AccessExclusiveLock

/* Documented limits on the text arguments, in bytes */
#define DLOCK_MAX_NAME_BYTES	1024
#define DLOCK_MAX_OWNER_BYTES	256

/* GUCs (dlock.c) */
extern int	dlock_max_ttl;		/* seconds */

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

/* name_lock.c */
extern void LeaseNameInit(LeaseName *name, const char *data, int len);
extern bool NameLockAcquire(const LeaseName *name, LOCKMODE mode, bool wait);
extern void NameLockRelease(const LeaseName *name, LOCKMODE mode);
extern bool NameLockAcquireForTransaction(const LeaseName *name, LOCKMODE mode);
extern void NameLockReleaseForTransaction(const LeaseName *name, LOCKMODE mode);

/* args.c */
extern void ArgGetName(FunctionCallInfo fcinfo, int argno, LeaseName *name);
extern char *ArgGetOwner(FunctionCallInfo fcinfo, int argno, bool generate_if_null);
extern int64 ArgGetTTL(FunctionCallInfo fcinfo, int argno);
extern int64 ArgGetTimeout(FunctionCallInfo fcinfo, int argno);
extern int64 ArgGetToken(FunctionCallInfo fcinfo, int argno);

/* One lease row as read from, or written to, dlock.lease_state */
typedef struct LeaseRow
{
	bool		found;			/* false: the name has never been granted */
	ItemPointerData tid;		/* where the row is, when found */
	int64		token;
	char	   *owner;			/* palloc'd, NUL-terminated */
	Oid			holder_role;
	TimestampTz acquired_at;
	TimestampTz expires_at;
	bool		ended;			/* released or force-released */
	TimestampTz ended_at;
	const char *end_reason;		/* "released" or "force_released" */
} LeaseRow;

/* The relations behind the lease store, opened for one call */
typedef struct LeaseStore
{
	Relation	heap;
	Relation	index;
	LOCKMODE	lockmode;
} LeaseStore;

/* lease_store.c */
extern void LeaseStoreOpen(LeaseStore *store, LOCKMODE lockmode);
extern void LeaseStoreClose(LeaseStore *store);
extern void LeaseStoreFetch(LeaseStore *store, const LeaseName *name, LeaseRow *row);
extern void LeaseStoreWrite(LeaseStore *store, const LeaseName *name, LeaseRow *row);
extern int64 LeaseStoreNextToken(void);

/* A lease is live while it has not ended and its expiry lies ahead */
static inline bool
LeaseIsLive(const LeaseRow *row, TimestampTz now)
{
	return row->found && !row->ended && row->expires_at > now;
}

/* fence.c */
extern void FenceCacheReset(void);
extern void FenceXactCallbackInit(void);

#endif							/* DLOCK_H */
