/*-------------------------------------------------------------------------
 *
 * lease_model.c
 *	  The lease state model: what a lease row means at a given moment, how
 *	  the events of a lease move it from state to state, and which rows a
 *	  request may take (LeaseDecide).  The view dlock.leases reads it
 *	  through sql_views.c.
 *
 * Every rule about states is written here once; the functions that grant,
 * change and check leases (grant.c, fence.c, session.c) and the view
 * all classify rows with LeaseClassify(), so the view shows what the
 * functions act on.  Times are on the server's clock (GetCurrentTimestamp(),
 * the value clock_timestamp() returns).
 *
 * States.  A name without a row has never been granted.  A row is in one of
 * five states; what each means for a new grant (absent a release) and for
 * dlock.fence():
 *
 *    state           grantable                   fence(name, token)
 *    (no row)        now                         false
 *    live            at expires_at + lock_delay  true for the row's token
 *    expired         at expires_at + lock_delay  false
 *    released        now (since ended_at)        false
 *    force_released  at ended_at + lock_delay    false
 *    session_ended   now                         false
 *
 * The view's grantable_at is the moment in the second column; it is NULL
 * for session_ended, as the moment the holder's backend went is not
 * recorded.  Before that moment a live lease is held, and an expired or
 * force-released one is in its lock-delay: grants are refused so that a
 * holder that stalled, and whose writes cannot be fenced, has time to
 * notice before someone else gets the name.  A release by the owner frees
 * the name at once (the holder evidently is not stalled), and so does the
 * exit of a session-bound holder's backend (it cannot write any more).
 *
 * Events and the state each leads to, by the state it meets:
 *
 *    event \ state    (no row)  live      expired   released  forced    ended
 *    grant            NEW       refused   NEW'      NEW       NEW'      NEW
 *    re-acquire       NEW       SAME+     NEW'      NEW       NEW'      NEW
 *    renew            -         SAME+     -         -         -         -
 *    release          -         released  -         -         -         -
 *    force_release    -         forced    -         -         -         -
 *    expiry           .         expired   .         .         .         .
 *    backend exit     .         ended     ended     .         .         .
 *    lock-delay ends  .         .         (free)    .         (free)    .
 *
 *    forced   force_released
 *    ended    session_ended
 *    NEW      live, with a new token (larger than every token issued before)
 *    NEW'     NEW once the lock-delay has passed; refused before
 *    SAME+    live, same token, expiry now + ttl
 *    refused  nothing changes: try_acquire returns NULL, acquire waits
 *    -        nothing changes: renew returns NULL, release and
 *             force_release false; an ended lease is never revived
 *    (free)   the state stays; the name is grantable from then on
 *    .        the event does not apply
 *
 *    grant            try_acquire or acquire by an owner other than the
 *                     holder
 *    re-acquire       the same owner asking again: the same owner string,
 *                     from a role with the privileges of holder_role
 *    renew, release   by that same owner
 *    force_release    by any role with the privileges of holder_role
 *    expiry           the clock passes expires_at
 *    backend exit     session-bound leases only: the backend that took the
 *                     lease exits, or DISCARD ALL or pg_advisory_unlock_all()
 *                     drops its session lock (session.c).  Only the primary
 *                     knows this; a standby sees such a lease as live until
 *                     its expiry.
 *    lock-delay ends  the clock passes grantable_at
 *
 * The first five events are writes of the caller's transaction: a rollback
 * returns the row to its earlier state.  The others change no row; the
 * state follows from the row, the clock and the holder's liveness.
 * Whether a grant must also wait for others queued for the name is the
 * queue's business (waiting.c), not the state's.
 *
 * Several holders.  Every row above is one holder's lease, in one slot of
 * the name, and has a kind (LeaseKind): exclusive, shared, or a permit of a
 * counting semaphore of N.  A request of some kind looks at all of the
 * name's rows at once (LeaseDecide):
 *
 *    a row that is ...             exclusive     shared        semaphore N
 *    free (grantable now)          its slot may be reused by any request
 *    live or delayed, same kind    refused       shares        takes 1 of N
 *    live or delayed, other kind   refused       refused       refused
 *    live, other max_holders       error 22023 (the request must name the
 *                                  live holders' limit)
 *    live, same owner              SAME+ of that row; error 22023 when the
 *                                  request is of another kind
 *
 * "Same kind" is LeaseKindShares(), the one place that says which kinds
 * may be live together: a shared lease with shared leases, a permit with
 * permits of the same N, an exclusive lease with nothing.  So at any moment
 * either one exclusive lease is live and no other lease, or only shared
 * leases are (at most DLOCK_MAX_HOLDERS), or at most N permits of one
 * semaphore.  A grant goes into the lowest free slot below its kind's
 * capacity (LeaseKindCapacity: 1, N, DLOCK_MAX_HOLDERS) whose pin it can
 * take (a grant made alongside others of its kind tries slot 0 last:
 * grant.c); slots are reused, so a name has no more rows than it ever
 * had holders (and ended holders still fenced) at once.  Before a grant
 * commits, the transactions that fenced the token of the slot it writes,
 * and those that fenced any row it does not share with
 * (LeaseRowPinConflicts), must have ended: a fenced shared token holds off
 * exclusive grants and not shared ones, and a semaphore's live permits plus
 * the ended ones still fenced are never more than N.  Which lock each of
 * these decisions is made under is grant.c's conflict rule.
 *
 * End reasons are stored as text in dlock.lease_state.end_reason
 * ('released', 'force_released'; NULL while the lease has not ended):
 * LeaseEndReasonText() and LeaseEndReasonFromText() are the only mapping.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/model/lease_model.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "model/model.h"
#include "dlock_compat.h"

/* The stored text of each end reason; NULL: not ended */
static const char *const EndReasonTexts[] = {
	[LEASE_NOT_ENDED] = NULL,
	[LEASE_END_RELEASED] = "released",
	[LEASE_END_FORCE_RELEASED] = "force_released",
};

/* The name of each state, as dlock.leases shows it */
static const char *const LeaseStateNames[] = {
	[LEASE_STATE_NONE] = NULL,
	[LEASE_STATE_LIVE] = "live",
	[LEASE_STATE_EXPIRED] = "expired",
	[LEASE_STATE_RELEASED] = "released",
	[LEASE_STATE_FORCE_RELEASED] = "force_released",
	[LEASE_STATE_SESSION_ENDED] = "session_ended",
};

/*
 * LeaseEndReasonText - the text stored in end_reason; NULL for a lease that
 * has not ended
 */
const char *
LeaseEndReasonText(LeaseEndReason reason)
{
	Assert(reason >= LEASE_NOT_ENDED && reason <= LEASE_END_FORCE_RELEASED);
	return EndReasonTexts[reason];
}

/*
 * LeaseEndReasonFromText - the end reason of a row whose ended_at is set,
 * from its end_reason (NULL when that is NULL)
 *
 * dlock always writes the reason.  A row without one, or with a text dlock
 * does not write (both only by hand), is read as the functions have always
 * treated it: without a reason as released, with any other text as
 * force-released, so that the lock-delay applies.
 */
LeaseEndReason
LeaseEndReasonFromText(const char *text)
{
	if (text == NULL || strcmp(text, EndReasonTexts[LEASE_END_RELEASED]) == 0)
		return LEASE_END_RELEASED;
	return LEASE_END_FORCE_RELEASED;
}

/*
 * LeaseStateName - a state's name in dlock.leases (NULL for "no row")
 */
const char *
LeaseStateName(LeaseState state)
{
	Assert(state >= LEASE_STATE_NONE && state <= LEASE_STATE_SESSION_ENDED);
	return LeaseStateNames[state];
}

/*
 * MayActFor - whether the current role may act on leases of holder_role
 */
bool
MayActFor(Oid holder_role)
{
	return has_privs_of_role(GetUserId(), holder_role);
}

/*
 * IsSameHolder - whether row's lease is held by owner, and the current role
 * may act for its holder role
 */
bool
IsSameHolder(const LeaseRow *row, const char *owner)
{
	return strcmp(row->owner, owner) == 0 && MayActFor(row->holder_role);
}

/*
 * LeaseHolderAlive - whether the holder of a row's lease is still there: for
 * a session-bound lease, whether its backend runs (a momentary lock probe,
 * so call this with the name's lock held when the answer decides a change);
 * always true for the others
 */
bool
LeaseHolderAlive(const LeaseRow *row)
{
	if (!row->found || !row->session_bound || row->ended)
		return true;
	return SessionLockAlive(row->token);
}

/*
 * DelayEnd - t + delay_us, kept within the timestamp range: past its end it
 * is infinity, so that an absurd lock_delay reads as "not before the end of
 * time" rather than as an error or a wrap-around
 */
static TimestampTz
DelayEnd(TimestampTz t, int64 delay_us)
{
	TimestampTz result;

	if (TIMESTAMP_NOT_FINITE(t))
		return t;
	if (pg_add_s64_overflow(t, delay_us, &result))
		return delay_us > 0 ? DT_NOEND : DT_NOBEGIN;
	if (result >= END_TIMESTAMP)
		return DT_NOEND;
	if (result < MIN_TIMESTAMP)
		return DT_NOBEGIN;
	return result;
}

/*
 * LeaseClassify - the state of a row at time now, given whether its holder
 * is alive (LeaseHolderAlive), and what that means for a grant; changes
 * nothing
 *
 * This is the table in the banner, in code.
 */
void
LeaseClassify(const LeaseRow *row, TimestampTz now, bool holder_alive,
			  LeaseClassification *result)
{
	TimestampTz ended;

	result->availability = LEASE_FREE;
	result->until = 0;
	result->has_grantable_at = false;
	result->grantable_at = 0;

	if (!row->found)
	{
		result->state = LEASE_STATE_NONE;
		return;
	}

	Assert(row->ended == (row->end_reason != LEASE_NOT_ENDED));
	switch (row->end_reason)
	{
		case LEASE_END_RELEASED:
			result->state = LEASE_STATE_RELEASED;
			result->has_grantable_at = true;
			result->grantable_at = row->ended_at;
			return;

		case LEASE_END_FORCE_RELEASED:
			result->state = LEASE_STATE_FORCE_RELEASED;
			ended = row->ended_at;
			break;

		case LEASE_NOT_ENDED:
		default:
			/* The holder's exit ends the lease, also once it expired */
			if (row->session_bound && !holder_alive)
			{
				result->state = LEASE_STATE_SESSION_ENDED;
				return;
			}
			result->state = row->expires_at > now ?
				LEASE_STATE_LIVE : LEASE_STATE_EXPIRED;
			ended = row->expires_at;
			break;
	}

	/* Live, expired or force-released: the lock-delay follows the end */
	result->has_grantable_at = true;
	result->grantable_at = DelayEnd(ended, row->lock_delay_us);

	if (result->state == LEASE_STATE_LIVE)
	{
		result->availability = LEASE_LIVE;
		result->until = row->expires_at;
	}
	else if (row->lock_delay_us > 0 && now < result->grantable_at)
	{
		result->availability = LEASE_DELAYED;
		result->until = result->grantable_at;
	}
}

/*
 * LeaseAvailabilityAt - grantability of a row at time now, given whether its
 * holder is alive (LeaseHolderAlive); changes nothing
 *
 * For LEASE_LIVE, *until is the expiry; for LEASE_DELAYED, the moment the
 * name becomes grantable; for LEASE_FREE it is left alone.
 */
LeaseAvailability
LeaseAvailabilityAt(const LeaseRow *row, TimestampTz now, bool holder_alive,
			  TimestampTz *until)
{
	LeaseClassification lease;

	LeaseClassify(row, now, holder_alive, &lease);
	if (lease.availability != LEASE_FREE)
		*until = lease.until;
	return lease.availability;
}

/* Slots without a row that a granting decision offers, at most */
#define EMPTY_CANDIDATES	4

const LeaseKind ExclusiveKind = {LEASE_KIND_EXCLUSIVE, 1};

/*
 * LeaseKindFrom - the kind that the stored (or asked for) pair of shared
 * and max_holders means; the caller has checked that they are not both set
 */
LeaseKind
LeaseKindFrom(bool shared, int32 max_holders)
{
	LeaseKind	kind = {LEASE_KIND_EXCLUSIVE, 1};

	if (shared)
		kind.tag = LEASE_KIND_SHARED;
	else if (max_holders > 1)
	{
		kind.tag = LEASE_KIND_PERMIT;
		kind.max_holders = max_holders;
	}
	return kind;
}

bool
LeaseKindEqual(const LeaseKind *a, const LeaseKind *b)
{
	return a->tag == b->tag && a->max_holders == b->max_holders;
}

/*
 * LeaseKindShares - whether a lease of kind asked may be live while one of
 * kind held is: the conflict table of kinds, once
 */
bool
LeaseKindShares(const LeaseKind *held, const LeaseKind *asked)
{
	switch (asked->tag)
	{
		case LEASE_KIND_EXCLUSIVE:
			return false;
		case LEASE_KIND_SHARED:
		case LEASE_KIND_PERMIT:
			return LeaseKindEqual(held, asked);
	}
	return false;				/* keep compiler quiet */
}

/*
 * LeaseKindCapacity - how many leases of kind may be live at once, which is
 * also the number of slots rows of that kind are written in
 */
int32
LeaseKindCapacity(const LeaseKind *kind)
{
	switch (kind->tag)
	{
		case LEASE_KIND_EXCLUSIVE:
			return 1;
		case LEASE_KIND_SHARED:
			return DLOCK_MAX_HOLDERS;
		case LEASE_KIND_PERMIT:
			return kind->max_holders;
	}
	return 1;					/* keep compiler quiet */
}

/*
 * LeaseKindText - a kind as messages name it
 */
const char *
LeaseKindText(const LeaseKind *kind)
{
	switch (kind->tag)
	{
		case LEASE_KIND_EXCLUSIVE:
			return "an exclusive lease";
		case LEASE_KIND_SHARED:
			return "a shared lease";
		case LEASE_KIND_PERMIT:
			return psprintf("a permit of a semaphore of %d", kind->max_holders);
	}
	return "a lease";			/* keep compiler quiet */
}

/*
 * LeaseDecide - what a request of kind by owner may do with the rows of a
 * name at time now: extend the owner's own live lease (mine), be granted
 * into a slot (LEASE_FREE), or wait (LEASE_LIVE or LEASE_DELAYED, until);
 * changes nothing
 *
 * This is the table of several holders in the banner, in code.  A request
 * that contradicts the live leases is an error (22023), raised before
 * anything is written.  owner NULL looks for no own lease.
 */
void
LeaseDecide(const LeaseName *name, const LeaseRows *rows, const LeaseKind *kind,
			const char *owner, TimestampTz now, LeaseDecision *d)
{
	int32		capacity = LeaseKindCapacity(kind);
	LeaseClassification *lease = palloc(sizeof(LeaseClassification) *
										Max(rows->count, 1));
	int			occupied = 0;
	bool		occupied_live = false;
	bool		blocked = false;
	bool		blocked_live = false;
	TimestampTz all_end = 0;
	TimestampTz first_end = DT_NOEND;

	d->mine = -1;
	d->slot = -1;
	d->target = -1;
	d->ncandidates = 0;
	d->candidate_slot = NULL;
	d->candidate_target = NULL;
	d->until = 0;
	d->session_token = 0;

	for (int i = 0; i < rows->count; i++)
	{
		const LeaseRow *row = &rows->row[i];

		LeaseClassify(row, now, LeaseHolderAlive(row), &lease[i]);
		if (lease[i].availability != LEASE_LIVE || owner == NULL ||
			!IsSameHolder(row, owner))
			continue;
		if (!LeaseKindEqual(&row->kind, kind))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("owner \"%s\" already holds lease \"%.*s\" as another kind of lease",
							owner, name->len, name->data),
					 errdetail("It holds %s; the request is for %s.",
							   LeaseKindText(&row->kind), LeaseKindText(kind)),
					 errhint("Release the lease first, or ask for the kind it holds.")));
		d->mine = i;
		d->availability = LEASE_LIVE;
		d->until = row->expires_at;
		pfree(lease);
		return;
	}

	for (int i = 0; i < rows->count; i++)
	{
		const LeaseRow *row = &rows->row[i];

		if (lease[i].availability == LEASE_FREE)
			continue;
		if (lease[i].availability == LEASE_LIVE &&
			row->kind.max_holders != kind->max_holders)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_holders %d does not match the live leases of \"%.*s\"",
							kind->max_holders, name->len, name->data),
					 errdetail("The live leases of \"%.*s\" have max_holders = %d.",
							   name->len, name->data, row->kind.max_holders),
					 errhint("Ask with max_holders => %d, or wait until those leases have ended.",
							 row->kind.max_holders)));
		if (!LeaseKindShares(&row->kind, kind))
		{
			blocked = true;
			all_end = Max(all_end, lease[i].until);
			if (lease[i].availability == LEASE_LIVE)
			{
				blocked_live = true;
				if (row->session_bound)
					d->session_token = row->token;
			}
		}
		else
		{
			occupied++;
			occupied_live |= (lease[i].availability == LEASE_LIVE);
			first_end = Min(first_end, lease[i].until);
		}
	}

	if (blocked)
	{
		d->availability = blocked_live ? LEASE_LIVE : LEASE_DELAYED;
		d->until = all_end;
	}
	else if (occupied >= capacity)
	{
		d->availability = occupied_live ? LEASE_LIVE : LEASE_DELAYED;
		d->until = first_end;
	}
	else
	{
		int			i = 0;

		/*
		 * The slots below the limit whose row is free, and the lowest few
		 * that have no row (shared grants made at once each claim one),
		 * lowest first.  There is one: fewer than capacity
		 * rows are occupied, and rows of this kind are only ever written
		 * below its limit.  The grant takes the first whose pin it can have:
		 * a free row whose old token a transaction still has fenced must not
		 * hold up a grant that another slot can take.
		 */
		int			empty = 0;

		d->availability = LEASE_FREE;
		d->candidate_slot = palloc(sizeof(int32) * (rows->count + EMPTY_CANDIDATES));
		d->candidate_target = palloc(sizeof(int) * (rows->count + EMPTY_CANDIDATES));
		for (int32 slot = 0; slot < capacity && empty < EMPTY_CANDIDATES; slot++)
		{
			while (i < rows->count && rows->row[i].slot < slot)
				i++;
			if (i < rows->count && rows->row[i].slot == slot)
			{
				if (lease[i].availability != LEASE_FREE)
					continue;
				d->candidate_slot[d->ncandidates] = slot;
				d->candidate_target[d->ncandidates++] = i;
				continue;
			}
			d->candidate_slot[d->ncandidates] = slot;
			d->candidate_target[d->ncandidates++] = -1;
			empty++;
		}
		Assert(d->ncandidates > 0);
		LeaseDecisionUseCandidate(d, 0);
	}
	pfree(lease);
}

/*
 * LeaseDecisionUseCandidate - make a granting decision write its
 * candidate-th slot
 */
void
LeaseDecisionUseCandidate(LeaseDecision *d, int candidate)
{
	Assert(d->availability == LEASE_FREE && candidate < d->ncandidates);
	d->slot = d->candidate_slot[candidate];
	d->target = d->candidate_target[candidate];
}

/*
 * LeaseRowPinConflicts - whether a grant of kind must wait for the
 * transactions that fenced row's token (besides those of the slot it
 * writes): rows of another kind, and every row for an exclusive grant
 */
bool
LeaseRowPinConflicts(const LeaseRow *row, const LeaseKind *kind)
{
	return !LeaseKindShares(&row->kind, kind);
}

/*
 * LeaseRowsNewestLive - the index of the live row with the largest token,
 * or -1 when none is live; *earliest_expiry is the soonest expiry of the
 * live rows (the next moment the answer can change without a commit)
 */
int
LeaseRowsNewestLive(const LeaseRows *rows, TimestampTz now,
					TimestampTz *earliest_expiry)
{
	int			newest = -1;

	*earliest_expiry = DT_NOEND;
	for (int i = 0; i < rows->count; i++)
	{
		const LeaseRow *row = &rows->row[i];
		TimestampTz until;

		if (LeaseAvailabilityNow(row, now, &until) != LEASE_LIVE)
			continue;
		*earliest_expiry = Min(*earliest_expiry, until);
		if (newest < 0 || row->token > rows->row[newest].token)
			newest = i;
	}
	return newest;
}
