/*-------------------------------------------------------------------------
 *
 * locks.h
 *	  Name locks and wait limits: taking and giving back the locks of the conflict rule, and the arguments of the SQL calls.
 *
 * Every lock dlock takes goes through here, within a wait limit.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/locks/locks.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_LOCKS_H
#define DLOCK_LOCKS_H

#include "store/store.h"

/*
 * How long a call may wait: not at all, until a deadline, or (deadline =
 * DT_NOEND) until cancelled.
 */
typedef struct WaitLimit
{
	bool		wait;
	TimestampTz deadline;
} WaitLimit;

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

#endif							/* DLOCK_LOCKS_H */
