/*-------------------------------------------------------------------------
 *
 * token.c
 *	  Issuing fencing tokens: the counter, its log-ahead flush, and the
 *	  clock that every new incarnation of the database moves it up to.
 *
 * A token is the next value of dlock.token_seq, the one counter of the
 * database.  Two things could make a value come again:
 *
 *	- A crash that loses the counter's log-ahead record.  nextval() WAL-logs
 *	  the sequence some values ahead of the one it returns and hands out the
 *	  following values without writing WAL; recovery restores the sequence
 *	  as that record left it.  So the record is flushed before a value is
 *	  handed out (FlushSequenceLogAhead).
 *	- A copy of the counter that lacks later values.  A standby that is
 *	  promoted (an asynchronous one that fell behind, a synchronous one with
 *	  dlock.durable_grants off, or a sibling of a standby promoted before it
 *	  that never streamed from it), the end of a point-in-time recovery, a
 *	  base backup started as it is, a dump restored into this cluster or
 *	  another: each carries on from its own copy of the counter, while the
 *	  holders of values issued after the copy keep them.
 *
 * The clock.  Tokens follow the server's clock, counted in ticks of 2^-22
 * seconds since 2026-01-01 00:00 UTC (TOKEN_TICKS_PER_SECOND): the first
 * grant of every incarnation of the database moves the counter up to the
 * clock's tick then, if it is below.  From there the counter moves by one
 * per token, far slower than the clock (2^22 ticks a second; no server
 * grants millions of leases a second), so every token that a server issues
 * is below its clock's tick at that moment, and a counter moved up to a
 * later clock reading is above every token issued before that reading,
 * on any server whose clock agreed (I1 in docs/internals.md states the
 * assumption and what holds without it).  The counter is only ever moved
 * up: a copy that is ahead of the clock carries on from its own value.
 *
 * Incarnations.  An incarnation is the life of one copy of the counter
 * on one running server, with one history: it is named by the cluster's
 * system identifier, the timeline WAL is written on, the postmaster's start
 * time, the database and the counter's relation.  A promotion or the end
 * of a point-in-time recovery changes the timeline; a base backup started
 * as it is, or any restart, the start time; a restore, the database and
 * relation OIDs; pg_upgrade, the system identifier.  Two siblings promoted
 * one after the other pick the same timeline number without an archive,
 * but their start times differ, and each moves to its own clock.
 *
 * The marker.  dlock.token_incarnation holds a hash of the incarnation
 * that last moved the counter.  It is a sequence, not a table, so that it
 * is written outside the granting transaction: a grant rolled back, or
 * left prepared, neither undoes the move nor keeps anyone waiting for it.
 * The move and the marker's write are made under the incarnation lock,
 * held only for the move itself; a backend takes values from the counter
 * only after it has seen the marker name its incarnation, which happens
 * only once the counter is at or above the move, so no nextval() runs
 * between the counter's read and its set.  Moves are WAL-logged before the
 * marker, and flushed with the counter before a token is handed out.
 *
 * A catalog from before version 1.3 (ALTER EXTENSION dlock UPDATE has not
 * run yet) has no marker: tokens then come from the counter alone, with
 * its log-ahead flush, as in version 1.1.
 *
 * Invariants: I1 in docs/internals.md.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/engine/token.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "engine/engine.h"
#include "dlock_compat.h"
#include "base/test_hooks.h"

/* Clock ticks per second: tokens are counted in these */
#define TOKEN_TICK_BITS			22
#define TOKEN_TICKS_PER_SECOND	(INT64CONST(1) << TOKEN_TICK_BITS)

/* 2026-01-01 00:00:00 UTC, in seconds since PostgreSQL's epoch (2000-01-01) */
#define TOKEN_CLOCK_ORIGIN_SECONDS	INT64CONST(820540800)

/* The largest token that JavaScript's numbers hold exactly */
#define TOKEN_EXACT_IN_DOUBLE	((INT64CONST(1) << 53) - 1)

/* A counter this far ahead of the clock is worth a warning: one hour */
#define TOKEN_AHEAD_WARNING		(INT64CONST(3600) * TOKEN_TICKS_PER_SECOND)

/*
 * What names an incarnation of the database (see the banner); its hash is
 * what dlock.token_incarnation holds
 */
typedef struct TokenIncarnation
{
	uint64		system_identifier;
	TimestampTz postmaster_start;
	Oid			database;
	Oid			counter;
	TimeLineID	timeline;
} TokenIncarnation;

/* The incarnation this backend has seen the marker name, if any */
static bool incarnation_seen = false;
static TokenIncarnation seen_incarnation;
static uint64 seen_generation = 0;

static bool budget_warned = false;

/*
 * TokenClockTicks - a timestamp in token ticks since the origin (0 before it)
 */
static int64
TokenClockTicks(TimestampTz ts)
{
	int64		since = ts - TOKEN_CLOCK_ORIGIN_SECONDS * USECS_PER_SEC;

	if (since <= 0)
		return 0;
	return ((since / USECS_PER_SEC) << TOKEN_TICK_BITS) +
		((since % USECS_PER_SEC) << TOKEN_TICK_BITS) / USECS_PER_SEC;
}

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
 * SequenceLastValue - a sequence's last value as nextval() or setval() left
 * it; *is_called says whether that value was handed out (or set so)
 */
static int64
SequenceLastValue(Oid seqrelid, bool *is_called)
{
	Relation	seqrel;
	Buffer		buf;
	Page		page;
	HeapTupleData tuple;
	Form_pg_sequence_data seq;
	int64		last;

	seqrel = relation_open(seqrelid, AccessShareLock);
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	tuple.t_data = (HeapTupleHeader) PageGetItem(page,
												 PageGetItemId(page, FirstOffsetNumber));
	seq = (Form_pg_sequence_data) GETSTRUCT(&tuple);
	last = seq->last_value;
	*is_called = seq->is_called;
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, NoLock);
	return last;
}

/*
 * SequenceSet - make a sequence's last value value (handed out), as the
 * sequence's owner (callers of dlock's functions have no privilege on it;
 * setval() checks one)
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
 * CurrentIncarnation - what names this incarnation of the database
 */
static void
CurrentIncarnation(TokenIncarnation *inc, Oid seqrelid)
{
	memset(inc, 0, sizeof(*inc));
	inc->system_identifier = GetSystemIdentifier();
	inc->postmaster_start = PgStartTime;
	inc->database = MyDatabaseId;
	inc->counter = seqrelid;
	inc->timeline = dlock_insert_timeline();
}

/*
 * IncarnationMark - the value dlock.token_incarnation holds once inc has
 * moved the counter: a hash, within the sequence's range (1 and up)
 */
static int64
IncarnationMark(const TokenIncarnation *inc)
{
	uint64		h = hash_bytes_extended((const unsigned char *) inc, sizeof(*inc), 0);

	return (int64) (h & ~(UINT64CONST(1) << 63)) | 1;
}

/*
 * MarkerNames - dlock.token_incarnation names inc
 */
static bool
MarkerNames(Oid markerrelid, const TokenIncarnation *inc)
{
	bool		is_called;
	int64		mark = SequenceLastValue(markerrelid, &is_called);

	return is_called && mark == IncarnationMark(inc);
}

/*
 * IncarnationMove - the first grant of an incarnation: move the counter up
 * to the clock, once, and mark it moved
 *
 * The incarnation lock serializes the moves.  It is held for the move
 * alone, never to the end of the transaction: whoever waits for it waits
 * for a few buffer writes, and its holder waits for no lock a grant holds
 * (it takes only the two sequences' relation locks, which only DDL
 * conflicts with).  Under it the marker is read again: another backend may
 * have moved the counter for this incarnation meanwhile.
 */
static void
IncarnationMove(Oid seqrelid, Oid markerrelid, const TokenIncarnation *inc)
{
	LOCKTAG		tag;

	DlockLockTag(&tag, DLOCK_SPACE_EPOCH, 0);
	(void) LockAcquire(&tag, DLOCK_EPOCH_LOCKMODE, false, false);
	if (!MarkerNames(markerrelid, inc))
	{
		bool		is_called;
		int64		counter = SequenceLastValue(seqrelid, &is_called);
		int64		clock = TokenClockTicks(GetCurrentTimestamp());

		DLOCK_PAUSE("token_move");
		if (counter < clock)
			SequenceSet(seqrelid, clock);
		SequenceSet(markerrelid, IncarnationMark(inc));
	}
	LockRelease(&tag, DLOCK_EPOCH_LOCKMODE, false);
}

/*
 * TokenBudgetCheck - warn, once per backend, of a token that JavaScript's
 * numbers no longer hold exactly, or of a counter far ahead of the clock
 * (a clock set back, or a counter set by hand): the order of tokens across
 * incarnations then rests on the counter's copies alone (I1)
 */
static void
TokenBudgetCheck(int64 token)
{
	int64		clock;

	if (budget_warned)
		return;
	clock = TokenClockTicks(GetCurrentTimestamp());
	if (token > TOKEN_EXACT_IN_DOUBLE || token > clock + TOKEN_AHEAD_WARNING)
	{
		budget_warned = true;
		ereport(WARNING,
				(errmsg("dlock token " INT64_FORMAT " is ahead of the server's clock or past 2^53", token),
				 errdetail("Tokens follow the clock at 2^%d a second since 2026-01-01; the clock now is at " INT64_FORMAT ".",
						   TOKEN_TICK_BITS, clock),
				 errhint("See docs/internals.md, I1, for the token budget.")));
	}
}

/*
 * TokenNext - the next fencing token (see the banner)
 */
int64
TokenNext(void)
{
	Oid			seqrelid = LeaseStoreTokenSequence();
	Oid			markerrelid = LeaseStoreTokenIncarnation();
	int64		token;

	if (OidIsValid(markerrelid))
	{
		TokenIncarnation inc;

		CurrentIncarnation(&inc, seqrelid);
		if (!incarnation_seen || seen_generation != LeaseStoreGeneration() ||
			memcmp(&inc, &seen_incarnation, sizeof(inc)) != 0)
		{
			if (!MarkerNames(markerrelid, &inc))
				IncarnationMove(seqrelid, markerrelid, &inc);
			seen_incarnation = inc;
			seen_generation = LeaseStoreGeneration();
			incarnation_seen = true;
		}
	}
	token = nextval_internal(seqrelid, false);
	TokenBudgetCheck(token);
	FlushSequenceLogAhead(seqrelid);
	return token;
}
