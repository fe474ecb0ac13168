/*-------------------------------------------------------------------------
 *
 * test_hooks.c
 *	  The pause points of the test build (see test_hooks.h).
 *
 * Only a build with DLOCK_TEST_HOOKS defined has them, and the two settings
 * that steer them; the module of every other build defines neither.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/base/test_hooks.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/guc.h"

#include "dlock_compat.h"
#include "base/test_hooks.h"

#ifdef DLOCK_TEST_HOOKS

/* dlock.pause_at: the point at which this session pauses, or empty */
static char *dlock_pause_at = NULL;

/* dlock.pause_key: the bigint advisory lock a paused session waits for */
static char *dlock_pause_key = NULL;

/*
 * DlockPause - wait at point, if this session pauses there, until the
 * advisory lock dlock.pause_key is free
 */
void
DlockPause(const char *point)
{
	LOCKTAG		tag;
	int64		key;

	if (dlock_pause_at == NULL || strcmp(dlock_pause_at, point) != 0)
		return;
	key = strtoi64(dlock_pause_key, NULL, 10);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (key >> 32), (uint32) key, 1);
	(void) LockAcquire(&tag, ShareLock, false, false);
	LockRelease(&tag, ShareLock, false);
}

void
DlockTestHooksInit(void)
{
	DefineCustomStringVariable("dlock.pause_at",
							   "Test build: the pause point at which this session waits.",
							   NULL,
							   &dlock_pause_at,
							   "",
							   PGC_USERSET,
							   0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("dlock.pause_key",
							   "Test build: the bigint advisory lock that a paused session waits for.",
							   NULL,
							   &dlock_pause_key,
							   "17480",
							   PGC_USERSET,
							   0,
							   NULL, NULL, NULL);
}

#else

void
DlockTestHooksInit(void)
{
}

#endif							/* DLOCK_TEST_HOOKS */
