/*-------------------------------------------------------------------------
 *
 * waiting.h
 *	  Waiting: the FIFO queue of waiters, watchers, wake-ups and the places kept between polls.
 *
 * A waiter sleeps on its latch and is woken at a release's commit, an
 * expiry or its deadline; places keep a poller's turn across calls.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/waiting/waiting.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_WAITING_H
#define DLOCK_WAITING_H

#include "locks/locks.h"

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

#endif							/* DLOCK_WAITING_H */
