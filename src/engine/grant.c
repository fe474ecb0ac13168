/*-------------------------------------------------------------------------
 *
 * grant.c
 *	  The grant engine: every decision to grant, extend or end a lease, the
 *	  writes that carry it out, and the conflict rule they all follow.
 *
 * The SQL entry points (lease_api.c, lease_set.c) parse arguments, wait and
 * shape results; what a name's rows allow is decided here, from the state
 * model and the kinds in lease_model.c, under the locks below.
 *
 * The conflict rule.  A decision is only as good as the rows it was made
 * from.  So every decision that leads to a write is made from rows read
 * while holding a lock that conflicts with the lock of every other writer
 * whose write could change that decision; where the rule needs a narrower
 * lock to let writers of one kind run side by side, the decision is read
 * again once the narrower lock is held.  The locks, by who holds them while
 * it reads, decides and writes (N: the name's lock, in the modes of
 * base/base.h; C(s): the claim of slot s; O: the claim of an owner; K: the
 * claim of a kind; P(t): the pin of token t, which is N itself for slot
 * 0):
 *
 *    request                        N mode       also holds       writes
 *    fence                          FENCE        P(t) FENCE       nothing
 *    watch                          -            (fresh snapshot) nothing
 *    grant alongside (shared or     ALONGSIDE    O, C(s),         slot s > 0;
 *      permit, rows all its kind)                P(old) GRANT     slot 0 with
 *                                                (slot 0: P(old)  no row or an
 *                                                checked), K if   ended token
 *                                                no rows
 *    renew, release, re-acquire     CHANGE       C(s) if s > 0    its slot s
 *    grant (exclusive, set member,  SERIAL       P of the slot    any slot
 *      first grant, mixed kinds),                and of rows it
 *      force_release                             does not share
 *                                                with, GRANT
 *    purge                          GRANT        every P, GRANT   deletes
 *
 * and the conflicts on N that follow from PostgreSQL's lock table (x:
 * conflict; these modes are AccessShare, RowExclusive,
 * ShareUpdateExclusive, ShareRowExclusive and AccessExclusive):
 *
 *                 FENCE  ALONGSIDE  CHANGE  SERIAL  GRANT
 *    FENCE          .        .        .       .       x
 *    ALONGSIDE      .        .        .       x       x
 *    CHANGE         .        .        x       x       x
 *    SERIAL         .        x        x       x       x
 *    GRANT          x        x        x       x       x
 *
 * (DlockConflictRule below is this table in C; an assert-enabled build
 * checks it against the lock manager's at load time.)
 *
 * Why each decision holds:
 *
 *	- SERIAL and GRANT conflict with every mode that writes, so a serialized
 *	  grant, force_release and purge decide from rows nobody else can be
 *	  changing.  An exclusive lease is never granted while a shared lease or
 *	  a permit is being granted alongside, and the other way round.
 *	- CHANGE excludes other changes and serialized grants.  It does not
 *	  exclude grants made alongside, which write slots > 0, and slot 0 only
 *	  when it has no row or an ended token, which no change writes; so a
 *	  change of a row in a slot > 0 claims the slot and reads the row again
 *	  before it decides (ClaimOwnRow), and a change of slot 0's row needs no
 *	  claim.
 *	- A grant made alongside decides three things.  That every row of the
 *	  name is of its kind: while it holds ALONGSIDE only grants made
 *	  alongside and changes can write, a change never alters a kind, and a
 *	  grant made alongside of another kind would have had to see rows of its
 *	  own kind, which cannot exist next to this one's; so the kinds stay as
 *	  read.  A name without rows says nothing about its kind, so the first
 *	  grants made alongside claim one (K: shared leases share it, permits,
 *	  whose limits may differ, take it one at a time) and read again.  That the owner
 *	  holds no live lease: grants for one owner made alongside exclude one
 *	  another by O, and a change can end a lease but never make one.  And
 *	  that slot s is free: read again once C(s) and the pin of its old
 *	  token are held, when no one else can write it.  Slots below the kind's
 *	  capacity only, so a semaphore of N has at most N rows.  Slot 0 is one
 *	  of them, so that a grant or change in progress, which holds N, does
 *	  not keep a free permit from being granted; but its pin is N itself,
 *	  which this way cannot take in GRANT, so it takes slot 0 last, and only
 *	  when it has no row (no old token to pin) or its token was ended by
 *	  another transaction's commit: such a token is never true again, so a
 *	  look at the lock table, after the row was read ended, for other
 *	  holders of N in FENCE shows every transaction that may have fenced
 *	  it (ClaimFreeSlot).  An expired token's row in slot 0 is reused only
 *	  the serialized way, which holds its pin to commit.
 *	- dlock.fence() decides whether its token is live.  A grant that replaces
 *	  that token holds its pin in GRANT, which waits for the fence (or, made
 *	  alongside into slot 0, finds the ended token fenced and does not
 *	  replace it); an end of the lease does not, and the fence then simply
 *	  came first.
 *	- dlock.watch() writes nothing; it reads through a fresh snapshot, so it
 *	  never waits for a lock, and who it is woken by is decided at commit,
 *	  once the change is visible (waiting.c).
 *
 * Lock waits.  A grant takes pins without waiting; when one is busy it gives
 * back everything, waits for that one alone, and reads again, so it never
 * waits for a pin while holding the name's lock or another pin.  A grant
 * made alongside never waits at all but for N: whatever it cannot have at
 * once, the serialized way decides instead.
 *
 * The commit of a grant is always durable, locally and on synchronous
 * standbys (durability.c), because a grant lost in a crash or a failover
 * would let its token be issued again.
 *
 * Invariants: I2, I3, I12 and I16 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/engine/grant.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/int.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/timestamp.h"

#include "engine/engine.h"
#include "base/test_hooks.h"

/*
 * HeldNameBegin - take the name's lock in mode within limit and open the
 * store: the begin of every decision about a name's rows (the conflict rule
 * above says which mode); false, holding nothing, when the lock was not had
 * in time
 */
bool
HeldNameBegin(HeldName *held, const LeaseName *name, LOCKMODE mode,
			  WaitLimit limit)
{
	held->name = name;
	held->mode = mode;
	held->rows.count = 0;
	held->now = 0;
	if (!NameLockAcquire(name, mode, limit))
		return false;
	LeaseStoreOpen(&held->store, RowExclusiveLock);
	return true;
}

/*
 * HeldNameRead - the name's rows in their latest committed state (the rows
 * kept by this transaction, or read), then the clock: a decision compares
 * rows with a time taken after they were read.  In the test build a session
 * can be held at pause_point (if not NULL) between the two.
 */
void
HeldNameRead(HeldName *held, const char *pause_point)
{
	LeaseStoreFetchAll(&held->store, held->name, &held->rows);
	if (pause_point != NULL)
		DLOCK_PAUSE(pause_point);
	held->now = GetCurrentTimestamp();
}

/*
 * HeldNameEnd - the end of a decision: the store closed, and the name's lock
 * given back unless a write was made under it (a written row is protected
 * by that lock until the transaction ends: I2)
 */
void
HeldNameEnd(HeldName *held, bool wrote)
{
	if (!wrote)
		NameLockRelease(held->name, held->mode);
	LeaseStoreClose(&held->store);
}

/*
 * WriteChange - store a changed row; this backend's cached fence answers
 * may no longer hold
 */
static void
WriteChange(LeaseStore *store, const LeaseName *name, LeaseRow *row)
{
	LeaseStoreWrite(store, name, row);
	FenceCacheLeaseChanged();
}

/*
 * ExtendLease - the same owner asked again: same token, expiry from now,
 * and the value, when one is given
 */
void
ExtendLease(LeaseStore *store, const LeaseName *name, LeaseRow *row,
			int64 ttl_us, const char *value, TimestampTz now)
{
	row->expires_at = ExpiryAfter(now, ttl_us);
	if (value != NULL)
		row->value = unconstify(char *, value);
	WriteChange(store, name, row);
	DlockStatsCount(name, DLOCK_STAT_RENEWAL);
}

/*
 * EndLease - mark a live lease ended; its token fails dlock.fence() from
 * the commit on, when the first waiter is woken
 */
void
EndLease(LeaseStore *store, const LeaseName *name, LeaseRow *row,
		 TimestampTz now, LeaseEndReason reason)
{
	row->ended = true;
	row->ended_at = now;
	row->end_reason = reason;
	WriteChange(store, name, row);
	WakeQueueHeadAtCommit(name);
	WakeWatchersAtCommit(name);
	if (row->session_bound)
		SessionLeaseForgetAtCommit(row->token);
}

/*
 * GrantLeaseWithToken - write the grant of a token that the caller took
 * from TokenNext() into row (GrantTargetRow); the caller holds
 * the grant's pins (GrantPinsTake) or, alongside, its slot's claim
 */
void
GrantLeaseWithToken(LeaseStore *store, const GrantRequest *req, LeaseRow *row,
					int64 token)
{
	TimestampTz now;

	/*
	 * The counter can only be behind the table if someone reset it by hand
	 * (setval).  Refuse rather than issue a token that does not grow.
	 */
	if (row->found && token <= row->token)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("token counter is behind lease \"%.*s\"",
						req->name.len, req->name.data),
				 errdetail("The counter gave token " INT64_FORMAT ", but the lease already had token " INT64_FORMAT ".",
						   token, row->token),
				 errhint("Advance the counter with SELECT setval('dlock.token_seq', (SELECT max(token) FROM dlock.lease_state)).")));

	now = GetCurrentTimestamp();
	if (dlock_stats_counting)
		DlockStatsGranted(&req->name, row, now);
	row->token = token;
	row->kind = req->kind;
	row->owner = req->owner;
	row->holder_role = GetUserId();
	row->acquired_at = now;
	row->expires_at = ExpiryAfter(now, req->ttl_us);
	row->ended = false;
	row->end_reason = LEASE_NOT_ENDED;
	row->lock_delay_us = req->lock_delay_us;
	row->session_bound = req->session_bound;
	row->holder_pid = req->session_bound ? MyProcPid : 0;
	row->value = req->value;
	WriteChange(store, &req->name, row);
	WakeWatchersAtCommit(&req->name);

	if (req->session_bound)
		SessionLeaseTake(&req->name, token);

	RequireDurableCommit();
}

/*
 * GrantNewLease - issue a new token into row; the caller holds what the
 * conflict rule asks of a grant into its slot
 */
static void
GrantNewLease(LeaseStore *store, const GrantRequest *req, LeaseRow *row)
{
	if (req->session_bound)
		SessionLeasePrune();
	GrantLeaseWithToken(store, req, row, TokenNext());
}

/*
 * GrantTargetRow - the row a grant decided by LeaseDecide writes: the free
 * row of its slot, or a new one
 */
LeaseRow *
GrantTargetRow(const LeaseRows *rows, const LeaseDecision *d)
{
	LeaseRow   *row;

	Assert(d->availability == LEASE_FREE);
	if (d->target >= 0)
		return &rows->row[d->target];
	row = palloc0(sizeof(LeaseRow));
	row->found = false;
	row->slot = d->slot;
	return row;
}

/*
 * GrantPinTags - the pins a grant must hold in DLOCK_GRANT_LOCKMODE before
 * it writes: that of the slot it writes (for slot 0 always the name's own
 * lock, also when the slot has no row yet), and that of every other row
 * whose fenced transactions it must wait for (LeaseRowPinConflicts).  For
 * an exclusive name that is one lock.
 */
static int
GrantPinTags(const LeaseName *name, const LeaseRows *rows,
			 const LeaseDecision *d, const LeaseKind *kind, LOCKTAG **tags)
{
	int			count = 0;

	*tags = palloc(sizeof(LOCKTAG) * (rows->count + 1));
	if (d->target >= 0)
		PinLockTag(&(*tags)[count++], name, &rows->row[d->target]);
	else if (d->slot == 0)
	{
		LeaseRow	first = {0};

		PinLockTag(&(*tags)[count++], name, &first);
	}
	for (int i = 0; i < rows->count; i++)
	{
		if (i != d->target && LeaseRowPinConflicts(&rows->row[i], kind))
			PinLockTag(&(*tags)[count++], name, &rows->row[i]);
	}
	return count;
}

/*
 * GrantPinsTake - take the grant's pins (GrantPinTags) without waiting;
 * false, holding none of them, with *busy the one that was not available
 */
bool
GrantPinsTake(const LeaseName *name, const LeaseRows *rows,
			  const LeaseDecision *d, const LeaseKind *kind, LOCKTAG *busy)
{
	LOCKTAG    *tags;
	int			count = GrantPinTags(name, rows, d, kind, &tags);

	for (int i = 0; i < count; i++)
	{
		if (!LockAcquireWithin(&tags[i], DLOCK_GRANT_LOCKMODE, NoWait))
		{
			*busy = tags[i];
			while (--i >= 0)
				LockRelease(&tags[i], DLOCK_GRANT_LOCKMODE, false);
			pfree(tags);
			return false;
		}
	}
	pfree(tags);
	return true;
}

/*
 * GrantPinsRelease - give back the pins that GrantPinsTake took, when the
 * grant is not made after all (a set that another name holds up)
 */
void
GrantPinsRelease(const LeaseName *name, const LeaseRows *rows,
				 const LeaseDecision *d, const LeaseKind *kind)
{
	LOCKTAG    *tags;
	int			count = GrantPinTags(name, rows, d, kind, &tags);

	for (int i = 0; i < count; i++)
		LockRelease(&tags[i], DLOCK_GRANT_LOCKMODE, false);
	pfree(tags);
}

/*
 * NotGranted - the outcome of a decision that grants nothing (a free name
 * that the caller may only extend its own lease of is GRANT_QUEUED), with
 * until when in *wait
 */
static GrantOutcome
NotGranted(const LeaseDecision *d, GrantWait *wait)
{
	wait->until = d->until;
	wait->session_token = d->session_token;
	if (d->availability == LEASE_FREE)
		return GRANT_QUEUED;
	return d->availability == LEASE_LIVE ? GRANT_HELD : GRANT_DELAYED;
}

/*
 * RowOfSlot - the row of slot in rows, or NULL
 */
static LeaseRow *
RowOfSlot(const LeaseRows *rows, int32 slot)
{
	for (int i = 0; i < rows->count; i++)
		if (rows->row[i].slot == slot)
			return &rows->row[i];
	return NULL;
}

/*
 * AlongsideApplies - whether a request of kind may be granted alongside the
 * rows of a name: it is not exclusive, and every row of the name is of its
 * kind (see the banner for why that stays so while it decides)
 */
static bool
AlongsideApplies(const LeaseRows *rows, const LeaseKind *kind)
{
	if (LeaseKindExclusive(kind))
		return false;
	for (int i = 0; i < rows->count; i++)
	{
		if (!LeaseKindEqual(&rows->row[i].kind, kind))
			return false;
	}
	return true;
}

/*
 * The conflict rule on the name's lock, as drawn in the banner: the modes in
 * their order there, and which conflict (row, column)
 */
static const LOCKMODE DlockRuleModes[5] pg_attribute_unused() = {
	DLOCK_FENCE_LOCKMODE, DLOCK_ALONGSIDE_LOCKMODE, DLOCK_CHANGE_LOCKMODE,
	DLOCK_SERIAL_LOCKMODE, DLOCK_GRANT_LOCKMODE
};
static const bool DlockConflictRule[5][5] pg_attribute_unused() = {
	/* FENCE  ALONGSIDE  CHANGE  SERIAL  GRANT */
	{false, false, false, false, true},	/* FENCE */
	{false, false, false, true, true},	/* ALONGSIDE */
	{false, false, true, true, true},	/* CHANGE */
	{false, true, true, true, true},	/* SERIAL */
	{true, true, true, true, true}	/* GRANT */
};

/*
 * DlockConflictRuleCheck - the banner's table is the lock manager's for
 * these modes (assert-enabled builds; from _PG_init)
 */
void
DlockConflictRuleCheck(void)
{
#ifdef USE_ASSERT_CHECKING
	LOCKTAG		tag;
	LockMethod	method;

	DlockLockTag(&tag, DLOCK_SPACE_NAME, 0);
	method = GetLockTagsMethodTable(&tag);
	for (int i = 0; i < 5; i++)
		for (int j = 0; j < 5; j++)
			Assert(((method->conflictTab[DlockRuleModes[i]] &
					 LOCKBIT_ON(DlockRuleModes[j])) != 0) == DlockConflictRule[i][j]);
#endif
}

/* The mode in which the first grants made alongside claim a kind */
static LOCKMODE
FirstKindMode(const LeaseKind *kind)
{
	return LeaseKindIsShared(kind) ? DLOCK_FIRST_SHARED_LOCKMODE : DLOCK_FIRST_PERMIT_LOCKMODE;
}

/*
 * ClaimFirstKind - for a name without rows, claim the kind that grants made
 * alongside give it, without waiting, and read the rows again: true when
 * the claim is held (until the end of the transaction) and held->rows are
 * read under it
 *
 * Without rows, nothing read says which kind the name is being granted to,
 * so the first grants made alongside claim it: shared leases in ShareLock,
 * which they share with one another, permits in ExclusiveLock, so that the
 * first permits, whose max_holders may differ, are granted one at a time.
 * Once the name has rows, its kind is what they say.
 */
static bool
ClaimFirstKind(HeldName *held, const LeaseKind *kind)
{
	LOCKTAG		claim;

	KindClaimTag(&claim, held->name);
	if (!LockAcquireWithin(&claim, FirstKindMode(kind), NoWait))
		return false;
	HeldNameRead(held, NULL);
	return true;
}

static void
FirstKindRelease(const LeaseName *name, const LeaseKind *kind)
{
	LOCKTAG		claim;

	KindClaimTag(&claim, name);
	LockRelease(&claim, FirstKindMode(kind), false);
}

/*
 * LockTagsEqual - whether two lock tags name the same object
 */
static bool
LockTagsEqual(const LOCKTAG *a, const LOCKTAG *b)
{
	return a->locktag_field1 == b->locktag_field1 &&
		a->locktag_field2 == b->locktag_field2 &&
		a->locktag_field3 == b->locktag_field3 &&
		a->locktag_field4 == b->locktag_field4 &&
		a->locktag_type == b->locktag_type &&
		a->locktag_lockmethodid == b->locktag_lockmethodid;
}

/*
 * NameFencedByOthers - whether a transaction other than this one holds the
 * name's lock in DLOCK_FENCE_LOCKMODE, as the true fences of slot 0's
 * tokens do (ClaimFreeSlot)
 *
 * No lock request can ask this: DLOCK_GRANT_LOCKMODE, the one mode that
 * conflicts with DLOCK_FENCE_LOCKMODE, conflicts with the modes of every
 * grant and change in progress as well.  So it is read from a snapshot of
 * the lock table, the one pg_locks shows, prepared transactions included.
 * Other transactions that hold the mode for a moment (a fence of a token
 * in another slot, before it takes that token's pin) make the answer true
 * when it need not be, which costs only a grant made the serialized way.
 * This transaction's own fences are not counted, as the lock manager does
 * not count them against its own lock requests either.
 */
static bool
NameFencedByOthers(const LeaseName *name)
{
	LOCKTAG		tag;
	LockData   *locks;
	bool		fenced = false;

	DlockLockTag(&tag, DLOCK_SPACE_NAME, name->hash);
	locks = GetLockStatusData();
	for (int i = 0; i < locks->nelements && !fenced; i++)
	{
		const LockInstanceData *lock = &locks->locks[i];

		fenced = (lock->holdMask & LOCKBIT_ON(DLOCK_FENCE_LOCKMODE)) != 0 &&
			lock->pid != MyProcPid &&
			LockTagsEqual(&lock->locktag, &tag);
	}
	pfree(locks->locks);
	pfree(locks);
	return fenced;
}

/*
 * ClaimFreeSlot - claim the candidate-th slot of a decision to grant
 * alongside, without waiting, and read it again: true when it is still
 * free, with *row the row to write and the claim (and the pin of the old
 * token) held until the end of the transaction; false, holding neither,
 * when the slot is busy or no longer free, or is slot 0 with a row this
 * way may not reuse
 *
 * Slot 0 is the one slot whose pin is the name's own lock, which this way
 * cannot take in DLOCK_GRANT_LOCKMODE while any other grant or change of
 * the name is in progress: a free permit would then wait for a renew or a
 * release of another one.  So slot 0 is taken without that pin when it has
 * no row (there is no old token to pin, and a change writes only a row
 * that exists), and when its token has ended, by another transaction's
 * committed release or force_release: then the pin is checked instead of
 * taken, once the row has been read ended (NameFencedByOthers).  That check
 * is exact for such a token: a true fence holds the name's lock in
 * DLOCK_FENCE_LOCKMODE from before it reads the row until its transaction
 * ends, and an ended token is never live again, so every fence that can be
 * true of it holds that lock before the row is read ended, and every later
 * one is false.  Neither holds for the other rows of slot 0, which are left
 * to the serialized way: an expired token can still be renewed by a change
 * that read it live, or read live again after the clock stepped back; a
 * token ended by this transaction is live to the others until it commits.
 */
static bool
ClaimFreeSlot(LeaseStore *store, const LeaseName *name, const LeaseRows *rows,
			  LeaseDecision *d, int candidate, LeaseRow *row)
{
	LOCKTAG		claim;
	LOCKTAG		pin;
	LeaseRow   *target;
	LeaseRows	again;
	LeaseRow   *now_there;
	TimestampTz until;
	bool		free;
	bool		pinned = false;

	LeaseDecisionUseCandidate(d, candidate);
	target = d->target >= 0 ? &rows->row[d->target] : NULL;

	if (d->slot == 0 && target != NULL &&
		(!target->ended ||
		 NameLockHeld(name, DLOCK_CHANGE_LOCKMODE) ||
		 NameLockHeld(name, DLOCK_SERIAL_LOCKMODE)))
		return false;

	SlotClaimTag(&claim, name, d->slot);
	if (!LockAcquireWithin(&claim, DLOCK_CLAIM_LOCKMODE, NoWait))
		return false;
	if (target != NULL && d->slot != 0)
	{
		PinLockTag(&pin, name, target);
		if (!LockAcquireWithin(&pin, DLOCK_GRANT_LOCKMODE, NoWait))
		{
			LockRelease(&claim, DLOCK_CLAIM_LOCKMODE, false);
			return false;
		}
		pinned = true;
	}
	DLOCK_PAUSE("alongside_claim");

	/* Still free, now that nobody else can write it? */
	LeaseStoreFetchAll(store, name, &again);
	now_there = RowOfSlot(&again, d->slot);
	if (target == NULL)
		free = (now_there == NULL);
	else
		free = (now_there != NULL && now_there->token == target->token &&
				LeaseAvailabilityNow(now_there, GetCurrentTimestamp(), &until) == LEASE_FREE);

	/* Slot 0's ended token: its pin checked, now that it was read ended */
	if (free && target != NULL && !pinned)
	{
		free = now_there->ended && !NameFencedByOthers(name);
		DLOCK_PAUSE("alongside_unfenced");
	}
	if (free)
	{
		*row = target == NULL ? *GrantTargetRow(rows, d) : *now_there;
		return true;
	}
	if (pinned)
		LockRelease(&pin, DLOCK_GRANT_LOCKMODE, false);
	LockRelease(&claim, DLOCK_CLAIM_LOCKMODE, false);
	return false;
}

/*
 * AlongsideCandidate - the i-th candidate a grant made alongside tries:
 * the decision's order (lowest slot first), but slot 0 last
 *
 * A row in slot 0 is reused this way only once its token has ended, and
 * then at the price of a look at the lock table (ClaimFreeSlot); filling
 * the other slots first leaves slot 0 without a row until the kind's last
 * slot is needed.  LeaseDecide lists the slots in ascending order, so slot
 * 0, when offered, is the first candidate.
 */
static int
AlongsideCandidate(const LeaseDecision *d, int i)
{
	if (d->candidate_slot[0] != 0)
		return i;
	return i + 1 < d->ncandidates ? i + 1 : 0;
}

/*
 * AttemptGrantAlongside - grant a shared lease or a permit at the same time
 * as other grants of its kind (the banner says why that is exact); true
 * when granted, false when this way does not apply or cannot have what it
 * needs at once, and then the serialized way decides.
 */
static bool
AttemptGrantAlongside(const GrantRequest *req, WaitLimit limit, LeaseRow *row)
{
	const LeaseName *name = &req->name;
	HeldName	held;
	LeaseDecision d;
	LOCKTAG		owner_claim;
	bool		kind_claimed = false;
	bool		granted = false;

	if (LeaseKindExclusive(&req->kind))
		return false;
	if (!HeldNameBegin(&held, name, DLOCK_ALONGSIDE_LOCKMODE, limit))
		return false;
	OwnerClaimTag(&owner_claim, name, req->owner);
	if (!LockAcquireWithin(&owner_claim, DLOCK_CLAIM_LOCKMODE, NoWait))
	{
		HeldNameEnd(&held, false);
		return false;
	}

	HeldNameRead(&held, "alongside_read");
	if (held.rows.count == 0)
		kind_claimed = ClaimFirstKind(&held, &req->kind);
	if ((held.rows.count > 0 || kind_claimed) && AlongsideApplies(&held.rows, &req->kind))
	{
		LeaseDecide(name, &held.rows, &req->kind, req->owner, held.now, &d);
		DLOCK_PAUSE("alongside_decide");
		for (int i = 0; !granted && d.mine < 0 && d.availability == LEASE_FREE &&
			 i < d.ncandidates; i++)
			granted = ClaimFreeSlot(&held.store, name, &held.rows, &d,
									AlongsideCandidate(&d, i), row);
		if (granted)
			GrantNewLease(&held.store, req, row);
	}

	if (!granted)
	{
		if (kind_claimed)
			FirstKindRelease(name, &req->kind);
		LockRelease(&owner_claim, DLOCK_CLAIM_LOCKMODE, false);
	}
	HeldNameEnd(&held, granted);
	return granted;
}

/*
 * ChangeLockMode - the mode in which a holder's change of its own lease
 * takes the name's lock: DLOCK_CHANGE_LOCKMODE, or DLOCK_SERIAL_LOCKMODE
 * when this transaction holds that already (it granted the name itself).
 * The stronger mode decides just as well, and asking for the weaker one
 * would queue behind a waiter for the name (the lock manager lets no new
 * request pass a waiter it conflicts with), which waits for this very
 * transaction.
 */
static LOCKMODE
ChangeLockMode(const LeaseName *name)
{
	return NameLockHeld(name, DLOCK_SERIAL_LOCKMODE) ?
		DLOCK_SERIAL_LOCKMODE : DLOCK_CHANGE_LOCKMODE;
}

/* What ClaimOwnRow found */
typedef enum OwnRowClaim
{
	OWN_ROW_CLAIMED,			/* owner's live lease, its slot claimed: *mine */
	OWN_ROW_NONE,				/* owner holds none live; nothing claimed */
	OWN_ROW_BUSY				/* its slot's claim was not had within limit */
} OwnRowClaim;

/*
 * ClaimOwnRow - read the rows of a name held in its change lock and find
 * owner's live lease, with its slot claimed when it is > 0 and the rows
 * read again after the claim (its index in held->rows is *mine)
 */
static OwnRowClaim
ClaimOwnRow(HeldName *held, const char *owner, WaitLimit limit, int *mine_out)
{
	const LeaseName *name = held->name;
	LeaseRows  *rows = &held->rows;
	int32		claimed = 0;
	LOCKTAG		claim = {0};

	for (;;)
	{
		int			mine = -1;

		HeldNameRead(held, claimed == 0 ? "change_read" : NULL);
		for (int i = 0; i < rows->count && mine < 0; i++)
		{
			if (IsSameHolder(&rows->row[i], owner) &&
				LeaseIsLive(&rows->row[i], held->now))
				mine = i;
		}
		if (claimed == 0)
			DLOCK_PAUSE("change_decide");
		if (mine >= 0 && (rows->row[mine].slot == 0 ||
						  rows->row[mine].slot == claimed))
		{
			*mine_out = mine;
			return OWN_ROW_CLAIMED;
		}

		/* Not held, or held in a slot not claimed yet */
		if (claimed != 0)
			LockRelease(&claim, DLOCK_CLAIM_LOCKMODE, false);
		claimed = 0;
		*mine_out = -1;
		if (mine < 0)
			return OWN_ROW_NONE;
		SlotClaimTag(&claim, name, rows->row[mine].slot);
		if (!LockAcquireWithin(&claim, DLOCK_CLAIM_LOCKMODE, limit))
			return OWN_ROW_BUSY;
		claimed = rows->row[mine].slot;
		DLOCK_PAUSE("change_claim");
	}
}

/*
 * AttemptExtend - extend owner's own live lease, and nothing else, under
 * the change lock: it never waits for grants made alongside others
 */
static GrantOutcome
AttemptExtend(const GrantRequest *req, WaitLimit limit, LeaseRow *row,
			  GrantWait *wait)
{
	const LeaseName *name = &req->name;
	HeldName	held;
	LeaseDecision d;
	int			mine;

	if (!HeldNameBegin(&held, name, ChangeLockMode(name), limit))
		return GRANT_BUSY;
	if (ClaimOwnRow(&held, req->owner, limit, &mine) == OWN_ROW_BUSY)
	{
		HeldNameEnd(&held, false);
		return GRANT_BUSY;
	}

	/* The kind's rules, for the own lease (22023) and for the wait */
	LeaseDecide(name, &held.rows, &req->kind, req->owner, held.now, &d);
	Assert(d.mine == mine);
	if (d.mine >= 0)
	{
		*row = held.rows.row[d.mine];
		ExtendLease(&held.store, name, row, req->ttl_us, req->value, held.now);
	}
	HeldNameEnd(&held, d.mine >= 0);
	return d.mine >= 0 ? GRANT_DONE : NotGranted(&d, wait);
}

/*
 * AttemptGrant - one attempt to grant or extend a lease
 *
 * Lock waits (for a transaction that is changing the name, or one that
 * fenced a write under a token the grant must wait for) happen in the lock
 * manager within limit; GRANT_BUSY when they do not end in time.
 * GRANT_HELD and GRANT_DELAYED say, in *wait, until when the name is not
 * grantable.  With extend_only, only the same owner's live lease is
 * extended (AttemptExtend).  A shared lease or a permit is first tried
 * alongside other grants of its kind; every other decision is made under
 * DLOCK_SERIAL_LOCKMODE.
 */
GrantOutcome
AttemptGrant(const GrantRequest *req, WaitLimit limit, bool extend_only,
			 LeaseRow *row, GrantWait *wait)
{
	const LeaseName *name = &req->name;

	if (extend_only)
		return AttemptExtend(req, limit, row, wait);
	if (AttemptGrantAlongside(req, limit, row))
		return GRANT_DONE;

	for (;;)
	{
		HeldName	held;
		LeaseDecision d;
		LOCKTAG		busy;
		bool		granted = false;

		if (!HeldNameBegin(&held, name, DLOCK_SERIAL_LOCKMODE, limit))
			return GRANT_BUSY;
		HeldNameRead(&held, "grant_read");
		LeaseDecide(name, &held.rows, &req->kind, req->owner, held.now, &d);
		DLOCK_PAUSE("grant_decide");
		if (d.mine >= 0)
		{
			*row = held.rows.row[d.mine];
			ExtendLease(&held.store, name, row, req->ttl_us, req->value, held.now);
			HeldNameEnd(&held, true);
			return GRANT_DONE;
		}
		if (d.availability != LEASE_FREE)
		{
			HeldNameEnd(&held, false);
			return NotGranted(&d, wait);
		}

		/*
		 * Grantable, once the transactions fenced under old tokens are done:
		 * into the first slot whose pins are not busy
		 */
		for (int c = 0; !granted && c < d.ncandidates; c++)
		{
			LOCKTAG		busy_here;

			LeaseDecisionUseCandidate(&d, c);
			granted = GrantPinsTake(name, &held.rows, &d, &req->kind, &busy_here);
			if (!granted && c == 0)
				busy = busy_here;
		}
		if (granted)
		{
			DLOCK_PAUSE("grant_pin");
			*row = *GrantTargetRow(&held.rows, &d);
			GrantNewLease(&held.store, req, row);
			HeldNameEnd(&held, true);
			return GRANT_DONE;
		}

		/*
		 * Wait for that pin without holding the name's lock, so that a
		 * fenced transaction that renews or releases before it commits
		 * cannot deadlock with us, then look again: others may have acted
		 * meanwhile.
		 */
		HeldNameEnd(&held, false);
		if (!LockAcquireWithin(&busy, DLOCK_GRANT_LOCKMODE, limit))
			return GRANT_BUSY;
		LockRelease(&busy, DLOCK_GRANT_LOCKMODE, false);
	}
}

/*
 * FetchHeldLease - hold a name for a change of owner's own lease; true if
 * owner holds one of its rows live (and may act as the holder's role):
 * that lease is *row, its slot claimed (ClaimOwnRow), and the caller, which
 * now holds the name (held), writes the change and ends the hold with
 * HeldNameEnd(held, true)
 *
 * When it returns false nothing is held any more.
 */
bool
FetchHeldLease(HeldName *held, const LeaseName *name, const char *owner,
			   LeaseRow *row)
{
	const LeaseRow *lost = NULL;
	int			mine;

	HeldNameBegin(held, name, ChangeLockMode(name), WaitForever);
	if (ClaimOwnRow(held, owner, WaitForever, &mine) == OWN_ROW_CLAIMED)
	{
		*row = held->rows.row[mine];
		return true;
	}

	/* The holder finds its lease lost: counted once per token */
	for (int i = 0; i < held->rows.count; i++)
	{
		if (IsSameHolder(&held->rows.row[i], owner) &&
			(lost == NULL || held->rows.row[i].token > lost->token))
			lost = &held->rows.row[i];
	}
	if (dlock_stats_counting && lost != NULL)
		DlockStatsHolderLost(name, lost, held->now);
	HeldNameEnd(held, false);
	return false;
}

/*
 * ForceReleaseAll - end every live lease of a name, for a role that may act
 * as each holder's role (or end none: 42501); false when none is live
 *
 * It decides under DLOCK_SERIAL_LOCKMODE, so no grant made alongside can
 * write a slot it ends.
 */
bool
ForceReleaseAll(const LeaseName *name)
{
	HeldName	held;
	LeaseRows  *rows = &held.rows;
	bool		ended = false;

	HeldNameBegin(&held, name, DLOCK_SERIAL_LOCKMODE, WaitForever);
	HeldNameRead(&held, NULL);

	for (int i = 0; i < rows->count; i++)
	{
		const LeaseRow *row = &rows->row[i];

		if (LeaseIsLive(row, held.now) && !MayActFor(row->holder_role))
		{
			char	   *holder = GetUserNameFromId(row->holder_role, true);

			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to force-release lease \"%.*s\"",
							name->len, name->data),
					 errdetail("Only roles with the privileges of role \"%s\" may end its leases.",
							   holder ? holder : "(dropped role)")));
		}
	}
	for (int i = 0; i < rows->count; i++)
	{
		if (!LeaseIsLive(&rows->row[i], held.now))
			continue;
		EndLease(&held.store, name, &rows->row[i], held.now, LEASE_END_FORCE_RELEASED);
		DlockStatsCount(name, DLOCK_STAT_FORCE_RELEASE);
		ended = true;
	}
	HeldNameEnd(&held, ended);
	return ended;
}
