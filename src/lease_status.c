/*-------------------------------------------------------------------------
 *
 * lease_status.c
 *	  What a lease row means at a given moment: free, live, or in its
 *	  lock-delay.
 *
 * The rules, all on the server's clock:
 *
 *	- A lease is live from its grant until it expires or is released.  A
 *	  session-bound lease also ends as soon as the backend that took it exits
 *	  (its session lock is gone).
 *	- Released by its owner: free at once.
 *	- Ended by expiry or force_release: free only once its lock-delay has
 *	  passed, so that a holder that stalled, and cannot be fenced, has time to
 *	  notice before someone else gets the name.
 *	- Ended because its backend exited: free at once.  The holder process is
 *	  gone, so there is nobody to wait for.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/lease_status.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"

#include "dlock.h"

/*
 * LeaseHolderAlive - whether the holder of a row's lease is still there: for
 * a session-bound lease, whether its backend runs (a momentary lock probe,
 * so call this with the name's lock held); always true for the others
 */
bool
LeaseHolderAlive(const LeaseRow *row)
{
	if (!row->found || !row->session_bound || row->ended)
		return true;
	return SessionLeaseAlive(row->token);
}

/*
 * LeaseStatusAt - classify a row at time now, given whether its holder is
 * alive (LeaseHolderAlive); changes nothing
 *
 * For LEASE_LIVE, *until is the expiry; for LEASE_DELAYED, the moment the
 * name becomes grantable.
 */
LeaseStatus
LeaseStatusAt(const LeaseRow *row, TimestampTz now, bool holder_alive,
			  TimestampTz *until)
{
	TimestampTz ended;
	TimestampTz grantable;

	if (!row->found)
		return LEASE_FREE;

	if (row->ended)
	{
		if (strcmp(row->end_reason, END_RELEASED) == 0)
			return LEASE_FREE;
		ended = row->ended_at;
	}
	else
	{
		if (row->session_bound && !holder_alive)
			return LEASE_FREE;
		if (row->expires_at > now)
		{
			*until = row->expires_at;
			return LEASE_LIVE;
		}
		ended = row->expires_at;
	}

	if (row->lock_delay_us <= 0)
		return LEASE_FREE;
	if (pg_add_s64_overflow(ended, row->lock_delay_us, &grantable))
		grantable = DT_NOEND;
	if (now < grantable)
	{
		*until = grantable;
		return LEASE_DELAYED;
	}
	return LEASE_FREE;
}
