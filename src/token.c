/*-------------------------------------------------------------------------
 *
 * token.c
 *	  Issuing fencing tokens: the counter, its log-ahead flush, and the
 *	  epochs that keep tokens growing across every failover.
 *
 * A token is the next value of dlock.token_seq, the one counter of the
 * database.  Two things could make a value come again:
 *
 *	- A crash that loses the counter's log-ahead record.  nextval() WAL-logs
 *	  the sequence some values ahead of the one it returns and hands out the
 *	  following values without writing WAL; recovery restores the sequence
 *	  as that record left it.  So the record is flushed before a value is
 *	  handed out (FlushSequenceLogAhead).
 *	- A timeline that is abandoned.  A standby that is promoted (or a
 *	  point-in-time recovery, or a restore of a dump into another cluster)
 *	  carries on from its own copy of the counter, which lacks whatever the
 *	  old primary issued after the copy: an asynchronous standby that fell
 *	  behind, a synchronous one with dlock.durable_grants off, a recovery
 *	  target before some grants.  The old primary's holders keep those
 *	  tokens, and the new primary would issue the same values again.
 *
 * Epochs.  The high bits of a token, from bit TOKEN_EPOCH_SHIFT up, are its
 * epoch: the timeline it was issued on (the WAL insertion timeline) less
 * one, plus the cluster's epoch base (0 in a cluster that never was
 * restored from another, so that timeline 1 issues 1, 2, 3, ...).  A timeline is never reused: a promotion and the
 * end of a point-in-time recovery both switch to a timeline larger than any
 * in the history.  The first token of a timeline moves the counter up to
 * the start of its epoch (TokenEpochAdvance), so every token issued on a
 * timeline is larger than every token issued on every earlier one, lost or
 * not, as long as a timeline issues fewer than 2^TOKEN_EPOCH_SHIFT tokens.
 * A restore into another cluster starts again at timeline 1; so does a
 * cluster made by pg_upgrade.  dlock.token_epoch remembers the system
 * identifier of the cluster whose base it holds: in a cluster with another
 * identifier, the first token sets the base to one more than the
 * counter's epoch then, so that the restored cluster's epochs are above
 * every dumped token.  A
 * standby that lost that row on promotion computes a base from its own
 * copy of the counter, which is at least the one the row was computed
 * from, on a larger timeline, so its epochs are larger still.
 *
 * The budget: TOKEN_EPOCH_SHIFT = 40 gives each timeline 2^40 tokens (35
 * years at a thousand grants a second) and keeps a token below 2^53, which
 * JavaScript clients parse exactly, for the first 2^13 - 1 epochs (timelines
 * plus restores).  Past half a timeline's range, and past 2^53, a warning
 * says so once per backend.  A token issued before the epochs existed (by
 * version 1.1) is below every epoch's range and still fences while its lease
 * lives.  Before ALTER EXTENSION dlock UPDATE has created dlock.token_epoch,
 * tokens come from the counter alone, as in 1.1.
 *
 * Invariants: I1 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/token.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "dlock.h"
#include "dlock_compat.h"

/* A token's epoch is its value shifted right by this */
#define TOKEN_EPOCH_SHIFT	40

/* The largest token that JavaScript's numbers hold exactly */
#define TOKEN_EXACT_IN_DOUBLE	((INT64CONST(1) << 53) - 1)

/* The columns of dlock.token_epoch */
#define Natts_token_epoch				2
#define Anum_token_epoch_system_id		1
#define Anum_token_epoch_base			2

/* The epoch base of this cluster, once read (committed) from the table */
static bool epoch_base_known = false;
static int64 epoch_base = 0;
static uint64 epoch_base_generation = 0;

static bool budget_warned = false;

/*
 * FlushSequenceLogAhead - flush the WAL up to the last change of seqrelid's
 * page
 *
 * It is not enough to look at whether our own nextval() wrote WAL: another
 * backend may have written the record that covers our value and not yet
 * flushed it (its transaction is still running, or committed without
 * waiting for its flush).  Every such record updates the page's LSN while
 * the buffer is locked exclusively, so once our nextval() has returned, the
 * page LSN is at or past the record covering our value.  Flushing up to it
 * costs nothing when that is already on disk, which it is for all but the
 * first value of each logged range (and the first after a checkpoint, when
 * nextval() logs the page again).
 */
static void
FlushSequenceLogAhead(Oid seqrelid)
{
	Relation	seqrel;
	Buffer		buf;
	XLogRecPtr	lsn;

	/* nextval() holds a stronger lock until the end of the transaction */
	seqrel = relation_open(seqrelid, AccessShareLock);
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	lsn = PageGetLSN(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, NoLock);

	XLogFlush(lsn);
}

/*
 * SequenceLastValue - the counter's last value, as nextval() left it
 */
static int64
SequenceLastValue(Oid seqrelid)
{
	Relation	seqrel;
	Buffer		buf;
	Page		page;
	HeapTupleData tuple;
	int64		last;

	seqrel = relation_open(seqrelid, AccessShareLock);
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	tuple.t_data = (HeapTupleHeader) PageGetItem(page,
												 PageGetItemId(page, FirstOffsetNumber));
	last = ((Form_pg_sequence_data) GETSTRUCT(&tuple))->last_value;
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, NoLock);
	return last;
}

/*
 * SequenceSet - make the counter's next value value + 1, as
 * the sequence's owner (callers of dlock's functions have no privilege on
 * it; setval() checks one)
 */
static void
SequenceSet(Oid seqrelid, int64 value)
{
	Oid			owner;
	Oid			save_userid;
	int			save_sec_context;
	Relation	seqrel;

	seqrel = relation_open(seqrelid, AccessShareLock);
	owner = seqrel->rd_rel->relowner;
	relation_close(seqrel, NoLock);

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(seqrelid),
						Int64GetDatum(value), BoolGetDatum(true));
	SetUserIdAndSecContext(save_userid, save_sec_context);
}

/*
 * EpochLock - serializes the moves of the counter to a new epoch and the
 * writes of dlock.token_epoch, in the database
 */
static void
EpochLockTag(LOCKTAG *tag)
{
	DlockLockTag(tag, DLOCK_SPACE_EPOCH, 0);
}

/*
 * ReadEpochRow - the base in dlock.token_epoch, if its row is this
 * cluster's (its latest committed state, or this transaction's own write);
 * *other says whether it holds another cluster's row instead
 */
static bool
ReadEpochRow(Oid epochrelid, int64 *base, bool *other)
{
	Relation	rel = table_open(epochrelid, AccessShareLock);
	TableScanDesc scan = table_beginscan(rel, SnapshotSelf, 0, NULL);
	HeapTuple	tuple;
	bool		found = false;

	*other = false;
	if (RelationGetDescr(rel)->natts != Natts_token_epoch)
		elog(ERROR, "relation \"dlock.token_epoch\" does not have the expected shape");
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Datum		values[Natts_token_epoch];
		bool		isnull[Natts_token_epoch];

		heap_deform_tuple(tuple, RelationGetDescr(rel), values, isnull);
		if (isnull[Anum_token_epoch_system_id - 1] || isnull[Anum_token_epoch_base - 1])
			continue;
		if ((uint64) DatumGetInt64(values[Anum_token_epoch_system_id - 1]) ==
			GetSystemIdentifier())
		{
			*base = DatumGetInt64(values[Anum_token_epoch_base - 1]);
			found = true;
		}
		else
			*other = true;
	}
	table_endscan(scan);
	table_close(rel, NoLock);
	return found;
}

/*
 * WriteEpochRow - make dlock.token_epoch hold this cluster's base, and only
 * that; the caller holds the epoch lock until the end of its transaction
 */
static void
WriteEpochRow(Oid epochrelid, int64 base)
{
	Relation	rel = table_open(epochrelid, RowExclusiveLock);
	TableScanDesc scan = table_beginscan(rel, SnapshotSelf, 0, NULL);
	HeapTuple	tuple;
	Datum		values[Natts_token_epoch];
	bool		nulls[Natts_token_epoch] = {false, false};

	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
		simple_heap_delete(rel, &tuple->t_self);
	table_endscan(scan);

	values[Anum_token_epoch_system_id - 1] = Int64GetDatum((int64) GetSystemIdentifier());
	values[Anum_token_epoch_base - 1] = Int64GetDatum(base);
	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	simple_heap_insert(rel, tuple);
	table_close(rel, NoLock);
	CommandCounterIncrement();
}

/*
 * EpochBase - this cluster's epoch base, or -1 before version 1.2's table
 * exists
 *
 * A base read as committed is remembered for the backend (it changes only
 * in another cluster).  Without a row of this cluster, the base is set,
 * under the epoch lock, and written: the counter's epoch now, so that
 * timeline 1 of a new cluster keeps the counter's values (epoch 0); or, in
 * place of another cluster's row (a restore, pg_upgrade), one more than
 * that, so that the first epoch of this cluster is above every token of
 * the other.  The lock is then kept until the end of the transaction, so
 * that no other transaction writes a base meanwhile, and the base is not
 * remembered before it is committed.
 */
static int64
EpochBase(Oid seqrelid)
{
	Oid			epochrelid = LeaseStoreTokenEpoch();
	LOCKTAG		tag;
	int64		base;
	bool		other;

	if (!OidIsValid(epochrelid))
		return -1;
	if (epoch_base_known && epoch_base_generation == LeaseStoreGeneration())
		return epoch_base;

	EpochLockTag(&tag);
	if (ReadEpochRow(epochrelid, &base, &other) &&
		!dlock_lock_held_by_me(&tag, ExclusiveLock))
	{
		epoch_base = base;
		epoch_base_known = true;
		epoch_base_generation = LeaseStoreGeneration();
		return base;
	}

	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	if (!ReadEpochRow(epochrelid, &base, &other))
	{
		base = (SequenceLastValue(seqrelid) >> TOKEN_EPOCH_SHIFT) + (other ? 1 : 0);
		WriteEpochRow(epochrelid, base);
	}
	return base;
}

/*
 * TokenEpochAdvance - move the counter up to floor, the start of this
 * timeline's epoch, and take a token from there
 *
 * Every backend whose nextval() gave a value below floor comes here, so the
 * moves are serialized by the epoch lock, and the counter is set only while
 * it is still below floor: it never goes down.  A value that another
 * backend's nextval() handed out between the look and the set would have
 * to be above floor, which the counter reaches only after a timeline's
 * 2^TOKEN_EPOCH_SHIFT tokens.
 */
static int64
TokenEpochAdvance(Oid seqrelid, int64 floor)
{
	LOCKTAG		tag;
	int64		token;

	EpochLockTag(&tag);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	if (SequenceLastValue(seqrelid) < floor)
		SequenceSet(seqrelid, floor);
	token = nextval_internal(seqrelid, false);
	LockRelease(&tag, ExclusiveLock, false);
	return token;
}

/*
 * TokenNext - the next fencing token (see the banner)
 */
int64
TokenNext(void)
{
	Oid			seqrelid = LeaseStoreTokenSequence();
	int64		token = nextval_internal(seqrelid, false);
	int64		base = EpochBase(seqrelid);

	if (base >= 0)
	{
		int64		epoch = base + (int64) dlock_insert_timeline() - 1;
		int64		floor = epoch << TOKEN_EPOCH_SHIFT;

		if (token <= floor)
			token = TokenEpochAdvance(seqrelid, floor);
		if (!budget_warned &&
			(token - floor > (INT64CONST(1) << (TOKEN_EPOCH_SHIFT - 1)) ||
			 token > TOKEN_EXACT_IN_DOUBLE))
		{
			budget_warned = true;
			ereport(WARNING,
					(errmsg("dlock token " INT64_FORMAT " is far into its budget", token),
					 errdetail("A timeline may issue 2^%d tokens, and tokens stay exact in JavaScript numbers up to 2^53; this timeline's epoch is " INT64_FORMAT ".",
							   TOKEN_EPOCH_SHIFT, epoch),
					 errhint("See docs/internals.md, I1, for the token budget.")));
		}
	}
	FlushSequenceLogAhead(seqrelid);
	return token;
}
