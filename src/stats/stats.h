/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  Per-name statistics and the stale-fence log (with shared_preload_libraries only).
 *
 * Counting never decides anything: it only watches the layers below.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/stats/stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_STATS_H
#define DLOCK_STATS_H

#include "waiting/waiting.h"

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

#endif							/* DLOCK_STATS_H */
