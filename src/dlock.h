/*-------------------------------------------------------------------------
 *
 * dlock.h
 *	  Declarations shared by the dlock modules.
 *
 * A lease is one row of dlock.lease_state, in one of the name's slots: an
 * exclusive lease is the name's only live row, in slot 0; shared leases and
 * the permits of a counting semaphore are one row per holder, each with its
 * own token, in slots that are reused (so a name has as many rows as it
 * ever had holders at once).
 *
 * Who may read and write a name's rows under which lock is the conflict
 * rule, drawn once, in the banner of grant.c (I2 in docs/internals.md points
 * there); the lock modes below are its vocabulary.  The states of a lease, and
 * the kinds of lease and what each may share with which, are written once
 * in lease_status.c.
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
 *	  src/dlock.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_H
#define DLOCK_H

#include "access/htup.h"
#include "access/xact.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "storage/itemptr.h"
#include "storage/lock.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

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
 * How long a call may wait: not at all, until a deadline, or (deadline =
 * DT_NOEND) until cancelled.
 */
typedef struct WaitLimit
{
	bool		wait;
	TimestampTz deadline;
} WaitLimit;

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

/* name_lock.c: taking and waiting for the locks, within wait limits */
extern const WaitLimit NoWait;
extern const WaitLimit WaitForever;
extern TimestampTz ExpiryAfter(TimestampTz now, int64 ttl_us);
extern bool LockAcquireWithin(const LOCKTAG *tag, LOCKMODE mode, WaitLimit limit);
extern bool NameLockAcquire(const LeaseName *name, LOCKMODE mode, WaitLimit limit);
extern void NameLockRelease(const LeaseName *name, LOCKMODE mode);
extern bool NameLockAcquireForTransaction(const LeaseName *name, LOCKMODE mode);
extern void NameLockReleaseForTransaction(const LeaseName *name, LOCKMODE mode);
struct LeaseRow;
extern void PinLockTag(LOCKTAG *tag, const LeaseName *name,
					   const struct LeaseRow *row);
extern void SlotClaimTag(LOCKTAG *tag, const LeaseName *name, int32 slot);
extern void OwnerClaimTag(LOCKTAG *tag, const LeaseName *name, const char *owner);
extern void KindClaimTag(LOCKTAG *tag, const LeaseName *name);
extern bool LockAcquireForTransaction(const LOCKTAG *tag, LOCKMODE mode);
extern void LockReleaseForTransaction(const LOCKTAG *tag, LOCKMODE mode);

/* args.c */
extern void ArgGetName(FunctionCallInfo fcinfo, int argno, LeaseName *name);
extern int	LeaseNameCompare(const void *a, const void *b);
extern int	ArgGetNames(FunctionCallInfo fcinfo, int argno, LeaseName **names);
extern char *ArgGetValue(FunctionCallInfo fcinfo, int argno);
extern char *ArgGetOwner(FunctionCallInfo fcinfo, int argno, bool generate_if_null,
						 bool *generated);
extern bool OwnerGeneratedHere(const char *owner);

/* Hex digits of a generated owner that name the backend that made it */
#define DLOCK_GENERATED_OWNER_PREFIX_LEN 16
extern int64 ArgGetTTL(FunctionCallInfo fcinfo, int argno);
extern int64 ArgGetTimeout(FunctionCallInfo fcinfo, int argno);
extern int64 ArgGetToken(FunctionCallInfo fcinfo, int argno);
extern int64 ArgGetLockDelay(FunctionCallInfo fcinfo, int argno);
extern bool ArgGetBool(FunctionCallInfo fcinfo, int argno, const char *argname);
extern int64 ArgGetOlderThan(FunctionCallInfo fcinfo, int argno);
struct LeaseKind;
extern void ArgGetKind(FunctionCallInfo fcinfo, int shared_argno,
					   int max_holders_argno, struct LeaseKind *kind);

/* How a lease ended, if it did (stored as text: see lease_status.c) */
typedef enum LeaseEndReason
{
	LEASE_NOT_ENDED,
	LEASE_END_RELEASED,			/* by its owner */
	LEASE_END_FORCE_RELEASED	/* by force_release */
} LeaseEndReason;

/*
 * The kind of a lease.  What each kind may share a name with is one
 * function, LeaseKindShares() (lease_status.c, with the table in that
 * file's banner); nothing else looks inside a kind.
 */
typedef enum LeaseKindTag
{
	LEASE_KIND_EXCLUSIVE,		/* the name's only live lease */
	LEASE_KIND_SHARED,			/* live alongside other shared leases only */
	LEASE_KIND_PERMIT			/* one of at most max_holders live permits */
} LeaseKindTag;

typedef struct LeaseKind
{
	LeaseKindTag tag;
	int32		max_holders;	/* the permits' limit (> 1); 1 for the others */
} LeaseKind;

extern const LeaseKind ExclusiveKind;
extern LeaseKind LeaseKindFrom(bool shared, int32 max_holders);
extern bool LeaseKindEqual(const LeaseKind *a, const LeaseKind *b);
extern bool LeaseKindShares(const LeaseKind *held, const LeaseKind *asked);
extern int32 LeaseKindCapacity(const LeaseKind *kind);
extern const char *LeaseKindText(const LeaseKind *kind);

static inline bool
LeaseKindExclusive(const LeaseKind *kind)
{
	return kind->tag == LEASE_KIND_EXCLUSIVE;
}

static inline bool
LeaseKindIsShared(const LeaseKind *kind)
{
	return kind->tag == LEASE_KIND_SHARED;
}

/* One lease row as read from, or written to, dlock.lease_state */
typedef struct LeaseRow
{
	bool		found;			/* false: the slot has no row */
	ItemPointerData tid;		/* where the row is, when found */
	int32		slot;
	LeaseKind	kind;
	int64		token;
	char	   *owner;			/* palloc'd, NUL-terminated */
	Oid			holder_role;
	TimestampTz acquired_at;
	TimestampTz expires_at;
	bool		ended;			/* end_reason != LEASE_NOT_ENDED */
	TimestampTz ended_at;
	LeaseEndReason end_reason;
	int64		lock_delay_us;
	bool		session_bound;
	int32		holder_pid;		/* backend that took a session-bound lease */
	char	   *value;			/* published by the holder, or NULL */
} LeaseRow;

/* The relations behind the lease store, opened for one call */
typedef struct LeaseStore
{
	Relation	heap;
	Relation	index;
	LOCKMODE	lockmode;
	int			natts;			/* 11 before version 1.1: no value, no slots */
} LeaseStore;

/* The rows of one name, by slot */
typedef struct LeaseRows
{
	int			count;
	int			space;
	LeaseRow   *row;
} LeaseRows;

/* lease_store.c */
extern void LeaseStoreCacheInit(void);
extern uint64 LeaseStoreGeneration(void);
extern void LeaseStoreOpen(LeaseStore *store, LOCKMODE lockmode);
extern void LeaseStoreClose(LeaseStore *store);
extern void LeaseStoreFetchAll(LeaseStore *store, const LeaseName *name, LeaseRows *rows);
extern void LeaseStoreFetchAllAsOf(LeaseStore *store, const LeaseName *name,
								   Snapshot snapshot, LeaseRows *rows);
extern bool LeaseStoreFetchToken(LeaseStore *store, const LeaseName *name,
								 int64 token, LeaseRow *row);
extern void LeaseStoreWrite(LeaseStore *store, const LeaseName *name, LeaseRow *row);
extern text *LeaseStoreDecode(LeaseStore *store, HeapTuple tuple, LeaseRow *row);
extern void LeaseStoreDelete(LeaseStore *store, LeaseRow *row);
extern void LeaseStoreHeldRowsForget(const LeaseName *name);
extern Oid	LeaseStoreTokenSequence(void);
extern Oid	LeaseStoreTokenIncarnation(void);

/* token.c */
extern int64 TokenNext(void);

/* A scan of every lease row, through a given snapshot (lease_store.c) */
typedef struct LeaseStoreScan LeaseStoreScan;

extern LeaseStoreScan *LeaseStoreBeginScan(LeaseStore *store, Snapshot snapshot);
extern bool LeaseStoreScanNext(LeaseStoreScan *scan, LeaseRow *row, text **name);
extern void LeaseStoreEndScan(LeaseStoreScan *scan);

/*
 * lease_status.c: the lease state model.  Its banner has the states, the
 * events and the transitions between them.
 */

/* The state of a row, as dlock.leases shows it */
typedef enum LeaseState
{
	LEASE_STATE_NONE,			/* no row: never granted */
	LEASE_STATE_LIVE,
	LEASE_STATE_EXPIRED,
	LEASE_STATE_RELEASED,
	LEASE_STATE_FORCE_RELEASED,
	LEASE_STATE_SESSION_ENDED
} LeaseState;

/* Whether a name may be granted now */
typedef enum LeaseStatus
{
	LEASE_FREE,					/* grantable now */
	LEASE_LIVE,					/* held until *until, unless released */
	LEASE_DELAYED				/* in its lock-delay until *until */
} LeaseStatus;

typedef struct LeaseClassification
{
	LeaseState	state;
	LeaseStatus status;			/* grantability now */
	TimestampTz until;			/* LEASE_LIVE: expiry; LEASE_DELAYED: end of
								 * the lock-delay */
	bool		has_grantable_at;	/* false for no row and session_ended */
	TimestampTz grantable_at;	/* when the name is grantable, absent a
								 * release (may be past) */
} LeaseClassification;

extern void LeaseClassify(const LeaseRow *row, TimestampTz now,
						  bool holder_alive, LeaseClassification *result);
extern LeaseStatus LeaseStatusAt(const LeaseRow *row, TimestampTz now,
								 bool holder_alive, TimestampTz *until);
extern bool LeaseHolderAlive(const LeaseRow *row);
extern bool MayActFor(Oid holder_role);
extern bool IsSameHolder(const LeaseRow *row, const char *owner);
extern const char *LeaseStateName(LeaseState state);
extern const char *LeaseEndReasonText(LeaseEndReason reason);
extern LeaseEndReason LeaseEndReasonFromText(const char *text);

static inline LeaseStatus
LeaseStatusNow(const LeaseRow *row, TimestampTz now, TimestampTz *until)
{
	return LeaseStatusAt(row, now, LeaseHolderAlive(row), until);
}

static inline bool
LeaseIsLive(const LeaseRow *row, TimestampTz now)
{
	TimestampTz until;

	return LeaseStatusNow(row, now, &until) == LEASE_LIVE;
}

/*
 * What a request for a lease of some kind may do with the rows of a name
 * (LeaseDecide, the rules of several holders per name)
 */
typedef struct LeaseDecision
{
	LeaseStatus status;			/* LEASE_FREE: grant into slot; otherwise
								 * held or delayed until *until */
	int			mine;			/* index of the owner's own live row, or -1 */
	int32		slot;			/* LEASE_FREE: the slot to write */
	int			target;			/* LEASE_FREE: index of that slot's row, or
								 * -1 when the slot has none yet */
	int			ncandidates;	/* LEASE_FREE: the slots the grant may
								 * write, lowest first (slot and target are
								 * the first); a later one serves when the
								 * pin of an earlier one is busy */
	int32	   *candidate_slot;
	int		   *candidate_target;
	TimestampTz until;			/* no earlier change without a release */
	int64		session_token;	/* a live session-bound lease that must end
								 * for this request, or 0 */
} LeaseDecision;

extern void LeaseDecide(const LeaseName *name, const LeaseRows *rows,
						const LeaseKind *kind, const char *owner,
						TimestampTz now, LeaseDecision *decision);
extern void LeaseDecisionUseCandidate(LeaseDecision *d, int candidate);
extern bool LeaseRowPinConflicts(const LeaseRow *row, const LeaseKind *kind);
extern int	LeaseRowsNewestLive(const LeaseRows *rows, TimestampTz now,
								TimestampTz *earliest_expiry);

/*
 * End-of-(sub)transaction hooks of the modules below: called only by the
 * dispatcher in dlock.c, which writes down their order.
 */

/*
 * A pending item that a (sub)transaction queues for its end begins with the
 * subtransaction that made it (xact_pending.c states the rule that drops them)
 */
typedef struct PendingItem
{
	SubTransactionId subid;
} PendingItem;

extern List *PendingItemsAtSubAbort(List *items, SubTransactionId mySubid);

/* grant.c: the grant engine, used by lease_api.c and lease_set.c */

/* What one attempt to grant found */
typedef enum GrantOutcome
{
	GRANT_DONE,					/* granted or extended: see the lease row */
	GRANT_HELD,					/* another owner holds a live lease */
	GRANT_DELAYED,				/* the lease ended and is in its lock-delay */
	GRANT_BUSY,					/* the name's lock was not available in time */
	GRANT_QUEUED				/* other waiters are ahead in the queue */
} GrantOutcome;

/* Why and until when an attempt has to wait */
typedef struct GrantWait
{
	TimestampTz until;			/* expiry, or end of lock-delay */
	int64		session_token;	/* token of a live session-bound lease, or 0 */
} GrantWait;

/* A request to acquire, as parsed from the arguments */
typedef struct GrantRequest
{
	LeaseName	name;
	char	   *owner;
	bool		owner_generated;	/* owner NULL: generated by the server */
	int64		ttl_us;
	int64		lock_delay_us;
	bool		session_bound;
	char	   *value;			/* to publish, or NULL */
	bool		queue;			/* try_acquire: keep a place when refused */
	LeaseKind	kind;
} GrantRequest;

extern GrantOutcome AttemptGrant(const GrantRequest *req, WaitLimit limit,
								 bool extend_only, LeaseRow *row, GrantWait *wait);
extern void ExtendLease(LeaseStore *store, const LeaseName *name, LeaseRow *row,
						int64 ttl_us, const char *value, TimestampTz now);
extern void GrantLeaseWithToken(LeaseStore *store, const GrantRequest *req,
								LeaseRow *row, int64 token);
extern LeaseRow *GrantTargetRow(const LeaseRows *rows, const LeaseDecision *d);
extern bool GrantPinsTake(const LeaseName *name, const LeaseRows *rows,
						  const LeaseDecision *d, const LeaseKind *kind,
						  LOCKTAG *busy);
extern void GrantPinsRelease(const LeaseName *name, const LeaseRows *rows,
							 const LeaseDecision *d, const LeaseKind *kind);
extern void EndLease(LeaseStore *store, const LeaseName *name, LeaseRow *row,
					 TimestampTz now, LeaseEndReason reason);
extern bool FetchHeldLease(LeaseStore *store, const LeaseName *name,
						   const char *owner, LeaseRow *row, TimestampTz *now);
extern bool ForceReleaseAll(const LeaseName *name);

/* lease_api.c: the SQL functions of single leases, also used by lease_set.c */
extern void CheckLeasesWritable(const char *funcname);
extern HeapTuple LeaseResultTuple(TupleDesc tupdesc, const LeaseName *name,
								  const LeaseRow *row);
extern WaitLimit AcquireLimit(int64 timeout_us);
extern void AcquireWaitBegins(const LeaseName *name, TimestampTz *wait_start);
extern void AcquireWaitEnded(const LeaseName *name, TimestampTz wait_start);
extern void AcquireTimedOut(const LeaseName *name, const LeaseKind *kind,
							GrantOutcome outcome,
							TimestampTz wait_start);
extern void AcquireErrorContext(void *arg);

/* session.c: session-bound leases */
extern void SessionLeaseTake(const LeaseName *name, int64 token);
extern void SessionLeaseForgetAtCommit(int64 token);
extern void SessionLeaseWaitForHolder(int64 token, TimestampTz until, WaitLimit limit);
extern void SessionLeasePrune(void);
extern void SessionLeasesAtPrePrepare(void);
extern void SessionLeasesAtEOXact(XactEvent event);
extern void SessionLeasesAtSubAbort(SubTransactionId mySubid);

/* waiting.c: the queue of waiters and their wake-ups */
extern bool QueueJoin(const LeaseName *name, WaitLimit limit);
extern void QueueLeave(const LeaseName *name);
extern bool QueueLookBegin(const LeaseName *name);
extern void QueueLookEnd(const LeaseName *name);
extern bool QueueIsEmpty(const LeaseName *name);
extern void WakeQueueHead(const LeaseName *name);
extern void WakeQueueHeadAtCommit(const LeaseName *name);
extern void WatchersJoin(const LeaseName *name);
extern void WatchersLeave(const LeaseName *name);
extern void WakeWatchers(const LeaseName *name);
extern void WakeWatchersAtCommit(const LeaseName *name);
extern void SleepUntil(TimestampTz until, WaitLimit limit);
extern void QueueWakesAtEOXact(XactEvent event);
extern void WaitersCountAtEOXact(void);
extern void WaitersShmemRequest(void);
extern void WaitersShmemInit(void);
extern void QueueWakesAtSubAbort(SubTransactionId mySubid);

/* places.c: places in a queue kept between polls (queue => true) */
extern int	dlock_max_queue_places;
extern void PlacesShmemRequest(void);
extern void PlacesShmemInit(void);
extern bool PlacesAvailable(void);
extern void PlacesRequire(void);
extern uint64 PlaceNewArrival(void);
extern bool PlacePoll(const LeaseName *name, const char *owner, int64 ttl_us,
					  bool *head_seen);
extern bool PlaceGiveBack(const LeaseName *name, const char *owner);
extern bool PlaceAhead(const LeaseName *name, uint64 arrival, TimestampTz *until);
extern bool PlaceWaitsFor(const LeaseName *name);
extern void PlaceHeadBegin(const LeaseName *name, uint64 arrival);
extern void PlaceHeadEnd(void);

/* durability.c */
extern void RequireDurableCommit(void);
extern void ReleaseCallBegin(void);
extern void ReleaseCallEnd(bool released);
extern void DurabilityAtPreCommit(bool prepare);
extern void DurabilityAtEOXact(void);

/* stats.c: per-name statistics (with shared_preload_libraries only) */
typedef enum DlockStatsEvent
{
	DLOCK_STAT_GRANT,			/* a new token issued */
	DLOCK_STAT_REFUSAL,			/* try_acquire returned NULL */
	DLOCK_STAT_RENEWAL,			/* renew, or the same owner asking again */
	DLOCK_STAT_WAIT,			/* an acquire had to wait */
	DLOCK_STAT_TIMEOUT,			/* an acquire ran out of time (55P03) */
	DLOCK_STAT_RELEASE,			/* release returned true */
	DLOCK_STAT_FORCE_RELEASE,	/* force_release returned true */
	DLOCK_STAT_EXPIRED,			/* a lease found ended by expiry */
	DLOCK_STAT_SESSION_ENDED,	/* a session-bound lease found without holder */
	DLOCK_STAT_FENCE_OK,		/* a fence decision: true */
	DLOCK_STAT_FENCE_REFUSED,	/* a fence decision: false (a stale token, or
								 * one never granted for the name) */
	DLOCK_STAT_NUM_EVENTS
} DlockStatsEvent;

extern bool dlock_stats_enabled;	/* dlock.stats */
extern int	dlock_stats_max;	/* dlock.stats_max */
extern bool dlock_log_stale_fences; /* dlock.log_stale_fences */
extern bool dlock_stats_counting;	/* preloaded, and dlock.stats on */

extern void DlockStatsShmemRequest(void);
extern void DlockStatsShmemInit(void);
extern void DlockStatsEnabledAssign(bool newval, void *extra);
extern void DlockStatsCountEvent(const LeaseName *name, DlockStatsEvent event);
extern void DlockStatsCountRead(const LeaseName *name, DlockStatsEvent event,
								bool has_rows);
extern void DlockStatsWaitEnded(const LeaseName *name, TimestampTz start);
extern void DlockStatsGranted(const LeaseName *name, const LeaseRow *old,
							  TimestampTz now);
extern void DlockStatsHolderLost(const LeaseName *name, const LeaseRow *row,
								 TimestampTz now);
extern void StaleFenceReport(const LeaseName *name, int64 token,
							 const LeaseRow *row, TimestampTz now);

/*
 * The counting calls: one branch when the statistics are off.  A name gets
 * an entry only when it has rows in dlock.lease_state: DlockStatsCount
 * makes one only for the events that show it has (a grant, a renewal, ...);
 * a caller that has read the name's rows says whether it found any with
 * DlockStatsCountKnown.
 */
static inline void
DlockStatsCount(const LeaseName *name, DlockStatsEvent event)
{
	if (dlock_stats_counting)
		DlockStatsCountEvent(name, event);
}

static inline void
DlockStatsCountKnown(const LeaseName *name, DlockStatsEvent event, bool has_rows)
{
	if (dlock_stats_counting)
		DlockStatsCountRead(name, event, has_rows);
}

/* fence.c */
extern void FenceCacheLeaseChanged(void);
extern void FenceCacheAtEOXact(void);
extern void FenceCacheAtSubAbort(SubTransactionId mySubid, SubTransactionId parentSubid);

/* grant.c: the conflict rule's table, checked in assert-enabled builds */
extern void DlockConflictRuleCheck(void);

/* module_version.c: the module against the catalog's version */
extern void DlockCheckModuleVersion(void);
extern void DlockModuleVersionAtEOXact(void);

#endif							/* DLOCK_H */
