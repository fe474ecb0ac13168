/*-------------------------------------------------------------------------
 *
 * test_hooks.h
 *	  Pause points of the test build: places where a session can be held
 *	  between reading a name's rows and acting on them.
 *
 * Built with DLOCK_TEST_HOOKS defined (make DLOCK_TEST_HOOKS=1; never in a
 * package), DLOCK_PAUSE(point) makes a session whose dlock.pause_at names
 * that point wait until the advisory lock dlock.pause_key is free, the way
 * pg_advisory_lock_shared() waits.  An isolation spec holds that lock with
 * pg_advisory_lock() in another session, so it can open the window between
 * a read and the write that depends on it, let other sessions act, and
 * close it again; the lock wait shows in pg_locks as any lock wait does.
 * In every other build DLOCK_PAUSE() is nothing.
 *
 * The points, each named for the step it follows:
 *
 *	grant_read, grant_decide, grant_pin	a grant under DLOCK_SERIAL_LOCKMODE
 *	alongside_read, alongside_decide,	a grant made alongside, before its
 *	alongside_claim						slot is read again
 *	alongside_unfenced					a grant made alongside into slot 0's
 *										ended row, between finding its old
 *										token fenced by no other transaction
 *										and writing
 *	change_read, change_decide,			renew, release, re-acquire
 *	change_claim
 *	set_read, set_pin					the *_all functions
 *	purge_read, purge_pin				dlock.purge(), holding the name's lock
 *	watch_read							dlock.watch()
 *	token_move							the first grant of an incarnation,
 *										between reading the token counter
 *										and moving it up to the clock
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/base/test_hooks.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_TEST_HOOKS_H
#define DLOCK_TEST_HOOKS_H

extern void DlockTestHooksInit(void);

#ifdef DLOCK_TEST_HOOKS
extern void DlockPause(const char *point);
#define DLOCK_PAUSE(point)	DlockPause(point)
#else
#define DLOCK_PAUSE(point)	((void) 0)
#endif

#endif							/* DLOCK_TEST_HOOKS_H */
