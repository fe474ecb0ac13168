/*-------------------------------------------------------------------------
 *
 * model.h
 *	  The lease state model: kinds, rows, states, and what a request may do with a name's rows.
 *
 * A lease is one row of dlock.lease_state, in one of the name's slots: an
 * exclusive lease is the name's only live row, in slot 0; shared leases and
 * the permits of a counting semaphore are one row per holder, each with its
 * own token, in slots that are reused (so a name has as many rows as it
 * ever had holders at once).  The states of a lease, the kinds and what
 * each may share with which are written once, in model/lease_model.c.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/model/model.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_MODEL_H
#define DLOCK_MODEL_H

#include "base/base.h"
#include "storage/itemptr.h"

/* How a lease ended, if it did (stored as text: see lease_model.c) */
typedef enum LeaseEndReason
{
	LEASE_NOT_ENDED,
	LEASE_END_RELEASED,			/* by its owner */
	LEASE_END_FORCE_RELEASED	/* by force_release */
} LeaseEndReason;

/*
 * The kind of a lease.  What each kind may share a name with is one
 * function, LeaseKindShares() (lease_model.c, with the table in that
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

/* The rows of one name, by slot */
typedef struct LeaseRows
{
	int			count;
	int			space;
	LeaseRow   *row;
} LeaseRows;

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
typedef enum LeaseAvailability
{
	LEASE_FREE,					/* grantable now */
	LEASE_LIVE,					/* held until *until, unless released */
	LEASE_DELAYED				/* in its lock-delay until *until */
} LeaseAvailability;

typedef struct LeaseClassification
{
	LeaseState	state;
	LeaseAvailability availability;	/* grantability now */
	TimestampTz until;			/* LEASE_LIVE: expiry; LEASE_DELAYED: end of
								 * the lock-delay */
	bool		has_grantable_at;	/* false for no row and session_ended */
	TimestampTz grantable_at;	/* when the name is grantable, absent a
								 * release (may be past) */
} LeaseClassification;

extern void LeaseClassify(const LeaseRow *row, TimestampTz now,
						  bool holder_alive, LeaseClassification *result);
extern LeaseAvailability LeaseAvailabilityAt(const LeaseRow *row, TimestampTz now,
								 bool holder_alive, TimestampTz *until);
extern bool LeaseHolderAlive(const LeaseRow *row);
extern bool MayActFor(Oid holder_role);
extern bool IsSameHolder(const LeaseRow *row, const char *owner);
extern const char *LeaseStateName(LeaseState state);
extern const char *LeaseEndReasonText(LeaseEndReason reason);
extern LeaseEndReason LeaseEndReasonFromText(const char *text);

static inline LeaseAvailability
LeaseAvailabilityNow(const LeaseRow *row, TimestampTz now, TimestampTz *until)
{
	return LeaseAvailabilityAt(row, now, LeaseHolderAlive(row), until);
}

static inline bool
LeaseIsLive(const LeaseRow *row, TimestampTz now)
{
	TimestampTz until;

	return LeaseAvailabilityNow(row, now, &until) == LEASE_LIVE;
}

/*
 * What a request for a lease of some kind may do with the rows of a name
 * (LeaseDecide, the rules of several holders per name)
 */
typedef struct LeaseDecision
{
	LeaseAvailability availability;	/* LEASE_FREE: grant into slot; otherwise
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

#endif							/* DLOCK_MODEL_H */
