/*-------------------------------------------------------------------------
 *
 * watch.c
 *	  dlock.watch(): waiting, without polling, for the live lease of a name
 *	  to change.
 *
 * A watcher holds the name's watch lock (waiting.c) while it watches, so
 * that every transaction that grants or ends a lease of the name sets its
 * latch once the commit is visible, and a session-bound holder's exit sets
 * it too.  Between wake-ups it sleeps on its latch until the live lease
 * expires on the server's clock, when the live token changes without any
 * commit.  It reads the rows through a fresh MVCC snapshot, without any
 * lock of the name: it reports only committed changes, never one that is
 * still in progress or that rolled back, and it never waits for, nor makes
 * wait, a grant, a change or a fenced transaction (a lock request of its
 * own, even a brief one, would queue in the lock manager, and every later
 * request that conflicts with it would queue behind it).  No change is
 * missed: a transaction looks for watchers to wake once its commit is
 * visible (waiting.c), so a watcher that read before then is woken, and
 * one that joined after then reads the change.
 *
 * On a hot standby no commit wakes it (the standby replays WAL; nobody
 * takes the locks there), so it also reads the row every
 * WATCH_STANDBY_POLL_MS.
 *
 * Invariants: I14 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/sql/watch.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "sql/sql.h"
#include "dlock_compat.h"
#include "base/test_hooks.h"

PG_FUNCTION_INFO_V1(dlock_watch);

#define WATCH_STANDBY_POLL_MS	100

/*
 * ReadLiveToken - the name's live token in *token, if a lease is live (then
 * *until is the soonest expiry of its live leases); false when none is
 *
 * With several holders (shared leases, permits), the live token is the
 * newest of them.
 */
static bool
ReadLiveToken(const LeaseName *name, int64 *token, TimestampTz *until)
{
	LeaseStore	store;
	LeaseRows	rows;
	Snapshot	snapshot;
	int			newest;

	LeaseStoreOpen(&store, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	LeaseStoreFetchAllAsOf(&store, name, snapshot, &rows);
	UnregisterSnapshot(snapshot);
	DLOCK_PAUSE("watch_read");
	newest = LeaseRowsNewestLive(&rows, GetCurrentTimestamp(), until);
	LeaseStoreClose(&store);

	*token = newest >= 0 ? rows.row[newest].token : 0;
	return newest >= 0;
}

/* Error context of watch()'s waits */
static void
WatchErrorContext(void *arg)
{
	const LeaseName *name = (const LeaseName *) arg;

	errcontext("watching lease \"%.*s\"", name->len, name->data);
}

/*
 * dlock_watch - SQL function dlock.watch(name, token, timeout)
 *
 * Returns as soon as the name's live token differs from token: the live
 * token, or NULL when no lease is live.  token NULL waits until a lease is
 * live.  When the timeout passes first, returns token.  timeout NULL waits
 * until cancelled (or statement_timeout); 0 looks once.
 */
Datum
dlock_watch(PG_FUNCTION_ARGS)
{
	LeaseName	name;
	bool		watching_token = !PG_ARGISNULL(1);
	int64		watched = watching_token ? PG_GETARG_INT64(1) : 0;
	int64		timeout_us;
	WaitLimit	limit = {true, DT_NOEND};
	ErrorContextCallback waitcontext;

	DlockCheckModuleVersion();
	ArgGetName(fcinfo, 0, &name);
	timeout_us = ArgGetTimeout(fcinfo, 2);
	if (timeout_us == 0)
		limit.wait = false;
	else if (timeout_us > 0)
		limit.deadline = ExpiryAfter(GetCurrentTimestamp(), timeout_us);

	waitcontext.callback = WatchErrorContext;
	waitcontext.arg = &name;
	waitcontext.previous = error_context_stack;
	error_context_stack = &waitcontext;

	WatchersJoin(&name);
	for (;;)
	{
		int64		token;
		TimestampTz until = DT_NOEND;
		bool		live;

		/* A wake-up sent after this point interrupts the sleep below */
		ResetLatch(MyLatch);

		live = ReadLiveToken(&name, &token, &until);
		if (live != watching_token || (live && token != watched))
		{
			WatchersLeave(&name);
			error_context_stack = waitcontext.previous;
			if (!live)
				PG_RETURN_NULL();
			PG_RETURN_INT64(token);
		}
		if (!limit.wait ||
			(limit.deadline != DT_NOEND && GetCurrentTimestamp() >= limit.deadline))
			break;

		if (!live)
			until = DT_NOEND;
		if (RecoveryInProgress())
		{
			TimestampTz poll = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   WATCH_STANDBY_POLL_MS);

			until = Min(until, poll);
		}
		SleepUntil(until, limit);
	}

	WatchersLeave(&name);
	error_context_stack = waitcontext.previous;
	if (!watching_token)
		PG_RETURN_NULL();
	PG_RETURN_INT64(watched);
}
