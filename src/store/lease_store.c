/*-------------------------------------------------------------------------
 *
 * lease_store.c
 *	  Reading and writing lease rows of dlock.lease_state, and finding dlock's
 *	  relations (tokens are issued by token.c).
 *
 * The table is read and written directly through the heap and its primary
 * key index, not through SPI, for two reasons:
 *
 *	- A grant must be made from the latest committed state of the row, also
 *	  in a REPEATABLE READ or SERIALIZABLE transaction whose snapshot is older.
 *	  Rows are therefore looked up with SnapshotSelf (committed or our own),
 *	  which is exact because the caller holds the name's lock and every
 *	  writer of the row held it until its commit became visible.  Such reads
 *	  take no SSI predicate locks, so dlock calls on different names never
 *	  cause serialization failures among themselves.
 *	- The update replaces a tuple that the transaction snapshot may not see;
 *	  an executor UPDATE would raise a serialization error there.
 *
 * The one reader that uses the caller's snapshot is the scan of all rows
 * behind the view dlock.leases (LeaseStoreBeginScan), which only shows them.
 *
 * Callers need no privileges on the table: access control is done by the
 * SQL-callable functions, by role.
 *
 * An ended lease stays as a marked row, so updates of a name's row stay on
 * its page (HOT) and the index does not grow.  Rows are deleted only by
 * dlock.purge() (purge.c), long after their lease ended.
 *
 * Rows are fetched with the heap's HOT-chain search rather than through an
 * index scan's slot, because the latter prunes the page on every visit once
 * its free space is below the fillfactor's reserve, which with this table's
 * fillfactor is always: that was one prune (and one WAL record) per call.
 * Here a page is pruned only when its free space runs low, so one prune
 * clears the versions left by many updates.
 *
 * The rows of the one name that a transaction holds in
 * DLOCK_SERIAL_LOCKMODE are kept once read (HeldRows below), so that the
 * next call of the transaction on that name reads no index (I5 in
 * docs/internals.md).
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/store/lease_store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/index.h"
#include "catalog/indexing.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_index.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "nodes/execnodes.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "store/store.h"
#include "dlock_compat.h"

#define DLOCK_EXTENSION		"dlock"
#define DLOCK_SCHEMA		"dlock"
#define LEASE_TABLE			"lease_state"
#define LEASE_INDEX			"lease_state_pkey"
#define TOKEN_SEQUENCE		"token_seq"
#define TOKEN_INCARNATION	"token_incarnation"

/* Columns of dlock.lease_state, in the order dlock--1.0.sql creates them */
#define Anum_lease_name			1
#define Anum_lease_token		2
#define Anum_lease_owner		3
#define Anum_lease_holder_role	4
#define Anum_lease_acquired_at	5
#define Anum_lease_expires_at	6
#define Anum_lease_ended_at		7
#define Anum_lease_end_reason	8
#define Anum_lease_lock_delay	9
#define Anum_lease_session_bound 10
#define Anum_lease_holder_pid	11
#define Natts_lease_1_0			11
/* Added by dlock--1.0--1.1.sql, which also makes the key (name, slot) */
#define Anum_lease_value		12
#define Anum_lease_slot			13
#define Anum_lease_shared		14
#define Anum_lease_max_holders	15
#define Natts_lease				15

/*
 * Prune a page when its free space falls below this: room for a few more
 * new row versions, so that updates stay HOT, while each prune clears many
 * dead versions at once.
 */
#define PRUNE_BELOW_FREE_SPACE	(BLCKSZ / 8)

/*
 * OIDs of dlock's relations, looked up (and checked to belong to extension
 * dlock) once per backend, which keeps the catalog lookups off the path of
 * every call.  A relcache
 * invalidation of any of them (DROP EXTENSION, a rename) forgets them all.
 */
static Oid	lease_table_oid = InvalidOid;
static Oid	lease_index_oid = InvalidOid;
static Oid	token_seq_oid = InvalidOid;
static Oid	token_incarnation_oid = InvalidOid;
static bool token_incarnation_looked_up = false;	/* InvalidOid: before 1.3 */

/* Counts the invalidations above: answers derived from the store expire */
static uint64 lease_store_generation = 0;

static void
ForgetDlockRelations(Datum arg pg_attribute_unused(), Oid relid)
{
	if (!OidIsValid(relid) || relid == lease_table_oid ||
		relid == lease_index_oid || relid == token_seq_oid ||
		relid == token_incarnation_oid)
	{
		lease_table_oid = InvalidOid;
		lease_index_oid = InvalidOid;
		token_seq_oid = InvalidOid;
		token_incarnation_oid = InvalidOid;
		token_incarnation_looked_up = false;
		lease_store_generation++;
	}
}

/*
 * LeaseStoreGeneration - changes whenever dlock's relations may have been
 * replaced (DROP and CREATE EXTENSION, even within one transaction), so
 * that per-transaction caches of lease answers know to start over
 */
uint64
LeaseStoreGeneration(void)
{
	return lease_store_generation;
}

/*
 * LeaseStoreCacheInit - register the invalidation of the cached OIDs (once,
 * from _PG_init)
 */
void
LeaseStoreCacheInit(void)
{
	CacheRegisterRelcacheCallback(ForgetDlockRelations, (Datum) 0);
}

/*
 * ExtensionSchema - the schema of an installed extension
 *
 * (get_extension_schema() is not exported before PostgreSQL 16.)
 */
static Oid
ExtensionSchema(Oid extoid)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			nspid = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		nspid = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return nspid;
}

/*
 * LookupDlockRelation - OID of one of dlock's relations
 *
 * The relation is the one of that name in the extension's schema, and it
 * must belong to the extension: a table (or sequence) that is a member of
 * extension dlock, or for the index, the primary key of the member table.
 * A relation of the same name that CREATE EXTENSION did not make (a
 * look-alike put in place of the real one) is refused rather than used, as
 * dlock's functions read and write it without privilege checks.  No
 * search_path is involved.
 */
static Oid
LookupDlockRelation(const char *relname, Oid owning_table)
{
	Oid			extoid = get_extension_oid(DLOCK_EXTENSION, true);
	Oid			nspid = InvalidOid;
	Oid			relid = InvalidOid;
	bool		belongs;

	if (OidIsValid(extoid))
		nspid = ExtensionSchema(extoid);
	if (!OidIsValid(nspid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" does not exist", DLOCK_EXTENSION),
				 errhint("Run CREATE EXTENSION dlock in this database.")));

	relid = get_relname_relid(relname, nspid);
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("relation \"%s.%s\" of extension dlock does not exist",
						get_namespace_name(nspid), relname),
				 errhint("Run CREATE EXTENSION dlock in this database.")));

	if (OidIsValid(owning_table))
	{
		HeapTuple	indextup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(relid));

		belongs = false;
		if (HeapTupleIsValid(indextup))
		{
			Form_pg_index index = (Form_pg_index) GETSTRUCT(indextup);

			belongs = index->indrelid == owning_table && index->indisprimary;
			ReleaseSysCache(indextup);
		}
	}
	else
		belongs = getExtensionOfObject(RelationRelationId, relid) == extoid;

	if (!belongs)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("relation \"%s.%s\" is not a member of extension dlock",
						get_namespace_name(nspid), relname),
				 errdetail("dlock uses only the relations that its extension script created."),
				 errhint("Drop or rename the relation that took the place of dlock's own, or drop and re-create extension dlock.")));
	return relid;
}

/*
 * CachedDlockRelation - *cached, or looked up and remembered; owning_table
 * is the table of an index, InvalidOid for a member relation
 */
static Oid
CachedDlockRelation(Oid *cached, const char *relname, Oid owning_table)
{
	if (!OidIsValid(*cached))
		*cached = LookupDlockRelation(relname, owning_table);
	return *cached;
}

/*
 * LeaseStoreTokenSequence - dlock.token_seq, the token counter
 */
Oid
LeaseStoreTokenSequence(void)
{
	return CachedDlockRelation(&token_seq_oid, TOKEN_SEQUENCE, InvalidOid);
}

/*
 * LeaseStoreTokenIncarnation - dlock.token_incarnation, the marker of the
 * incarnation that last moved the token counter (token.c), or InvalidOid
 * while the extension's objects are those of a version before 1.3, which
 * has no such sequence (ALTER EXTENSION dlock UPDATE has not run yet)
 */
Oid
LeaseStoreTokenIncarnation(void)
{
	if (!token_incarnation_looked_up)
	{
		Oid			extoid = get_extension_oid(DLOCK_EXTENSION, true);

		token_incarnation_oid = InvalidOid;
		if (OidIsValid(extoid) &&
			OidIsValid(get_relname_relid(TOKEN_INCARNATION, ExtensionSchema(extoid))))
			token_incarnation_oid = LookupDlockRelation(TOKEN_INCARNATION, InvalidOid);
		token_incarnation_looked_up = true;
	}
	return token_incarnation_oid;
}

/*
 * LeaseStoreOpen - open the lease table and its index
 *
 * lockmode is RowExclusiveLock for callers that may write, AccessShareLock
 * for readers.  The relation locks are kept until the end of the transaction
 * as the executor would keep them.
 */
void
LeaseStoreOpen(LeaseStore *store, LOCKMODE lockmode)
{
	store->lockmode = lockmode;
	store->heap = table_open(CachedDlockRelation(&lease_table_oid, LEASE_TABLE,
												 InvalidOid),
							 lockmode);
	store->natts = RelationGetDescr(store->heap)->natts;
	if (store->heap->rd_rel->relkind != RELKIND_RELATION ||
		(store->natts != Natts_lease && store->natts != Natts_lease_1_0))
		elog(ERROR, "relation \"%s.%s\" does not have the expected shape",
			 DLOCK_SCHEMA, LEASE_TABLE);
	store->index = index_open(CachedDlockRelation(&lease_index_oid, LEASE_INDEX,
												  RelationGetRelid(store->heap)),
							  lockmode);
	/* The key is (name) before version 1.1, (name, slot) since */
	if (IndexRelationGetNumberOfKeyAttributes(store->index) !=
		(store->natts == Natts_lease ? 2 : 1))
		elog(ERROR, "index \"%s.%s\" does not have the expected shape",
			 DLOCK_SCHEMA, LEASE_INDEX);
}

void
LeaseStoreClose(LeaseStore *store)
{
	index_close(store->index, NoLock);
	table_close(store->heap, NoLock);
}

/*
 * DecodeRow - a lease_state tuple as a LeaseRow (strings copied)
 */
static void
DecodeRow(LeaseStore *store, HeapTuple tuple, LeaseRow *row)
{
	Datum		values[Natts_lease];
	bool		isnull[Natts_lease];
	Interval   *delay;

	heap_deform_tuple(tuple, RelationGetDescr(store->heap), values, isnull);

	row->found = true;
	row->tid = tuple->t_self;
	row->token = DatumGetInt64(values[Anum_lease_token - 1]);
	row->owner = TextDatumGetCString(values[Anum_lease_owner - 1]);
	row->holder_role = DatumGetObjectId(values[Anum_lease_holder_role - 1]);
	row->acquired_at = DatumGetTimestampTz(values[Anum_lease_acquired_at - 1]);
	row->expires_at = DatumGetTimestampTz(values[Anum_lease_expires_at - 1]);
	row->ended = !isnull[Anum_lease_ended_at - 1];
	row->end_reason = LEASE_NOT_ENDED;
	if (row->ended)
	{
		const char *reason = isnull[Anum_lease_end_reason - 1] ? NULL :
			TextDatumGetCString(values[Anum_lease_end_reason - 1]);

		row->ended_at = DatumGetTimestampTz(values[Anum_lease_ended_at - 1]);
		row->end_reason = LeaseEndReasonFromText(reason);
	}
	delay = DatumGetIntervalP(values[Anum_lease_lock_delay - 1]);
	row->lock_delay_us = delay->time + delay->day * USECS_PER_DAY;
	row->session_bound = DatumGetBool(values[Anum_lease_session_bound - 1]);
	row->holder_pid = isnull[Anum_lease_holder_pid - 1] ? 0 :
		DatumGetInt32(values[Anum_lease_holder_pid - 1]);
	row->value = NULL;
	row->slot = 0;
	row->kind = ExclusiveKind;
	if (store->natts >= Natts_lease)
	{
		if (!isnull[Anum_lease_value - 1])
			row->value = TextDatumGetCString(values[Anum_lease_value - 1]);
		row->slot = DatumGetInt32(values[Anum_lease_slot - 1]);
		row->kind = LeaseKindFrom(DatumGetBool(values[Anum_lease_shared - 1]),
								  DatumGetInt32(values[Anum_lease_max_holders - 1]));
	}
}

/*
 * The rows of the one name that this transaction holds in
 * DLOCK_SERIAL_LOCKMODE, kept from the read made under that lock and
 * updated as this backend writes them.  That lock keeps every other writer
 * of the name out (each holds at least DLOCK_ALONGSIDE_LOCKMODE: I2 in
 * docs/internals.md), so until it is given back the kept rows are the
 * latest committed ones, and the next read of the name in the transaction
 * (the release or fence() after a grant in one transaction) need not
 * descend the index again.  They are kept only in a transaction block
 * (BEGIN, or statements sent together): a transaction of one statement
 * seldom reads a name twice.  They are forgotten when the lock may have been
 * given back (NameLockRelease, the end of a subtransaction that rolled
 * back: LeaseStoreHeldRowsForget), at the end of the transaction, when a
 * row of the name is inserted or deleted, and when dlock's relations are
 * replaced.  Callers get copies: what they change is written through
 * LeaseStoreWrite.
 */
static struct
{
	bool		valid;
	uint64		generation;		/* lease_store_generation when kept */
	char	   *name;			/* in cxt */
	int			name_len;
	LeaseRows	rows;			/* in cxt, strings included */
	MemoryContext cxt;
}			HeldRows;

/* CopyRows - a copy of from in cxt, the rows' strings included */
static void
CopyRows(const LeaseRows *from, LeaseRows *to, MemoryContext cxt)
{
	to->count = from->count;
	to->space = Max(from->count, 4);
	to->row = MemoryContextAlloc(cxt, sizeof(LeaseRow) * to->space);
	for (int i = 0; i < from->count; i++)
	{
		to->row[i] = from->row[i];
		to->row[i].owner = from->row[i].owner == NULL ? NULL :
			MemoryContextStrdup(cxt, from->row[i].owner);
		to->row[i].value = from->row[i].value == NULL ? NULL :
			MemoryContextStrdup(cxt, from->row[i].value);
	}
}

/*
 * HeldRowsOf - the kept rows when they are name's (and the lock is still
 * held), else NULL
 */
static const LeaseRows *
HeldRowsOf(const LeaseName *name)
{
	if (!HeldRows.valid || HeldRows.generation != lease_store_generation ||
		HeldRows.name_len != name->len ||
		memcmp(HeldRows.name, name->data, name->len) != 0)
		return NULL;
	/* Forgotten whenever the lock may be given back; checked all the same */
	if (!NameLockHeld(name, DLOCK_SERIAL_LOCKMODE))
	{
		LeaseStoreHeldRowsForget(NULL);
		return NULL;
	}
	return &HeldRows.rows;
}

/* KeepHeldRows - rows were read under name's DLOCK_SERIAL_LOCKMODE: keep them */
static void
KeepHeldRows(const LeaseName *name, const LeaseRows *rows)
{
	if (HeldRows.cxt == NULL)
		HeldRows.cxt = AllocSetContextCreate(TopMemoryContext,
											 "dlock held rows",
											 ALLOCSET_SMALL_SIZES);
	HeldRows.valid = false;		/* until the copy is whole */
	MemoryContextReset(HeldRows.cxt);
	HeldRows.name = MemoryContextAlloc(HeldRows.cxt, name->len);
	memcpy(HeldRows.name, name->data, name->len);
	HeldRows.name_len = name->len;
	CopyRows(rows, &HeldRows.rows, HeldRows.cxt);
	HeldRows.generation = lease_store_generation;
	HeldRows.valid = true;
}

/*
 * LeaseStoreHeldRowsForget - forget the kept rows: the transaction or a
 * subtransaction ended (dispatcher, dlock.c), or the name's
 * DLOCK_SERIAL_LOCKMODE lock was given back (name_lock.c: NULL for any
 * name)
 */
void
LeaseStoreHeldRowsForget(const LeaseName *name)
{
	if (!HeldRows.valid)
		return;
	if (name != NULL &&
		(HeldRows.name_len != name->len ||
		 memcmp(HeldRows.name, name->data, name->len) != 0 ||
		 NameLockHeld(name, DLOCK_SERIAL_LOCKMODE)))
		return;
	HeldRows.valid = false;
	MemoryContextReset(HeldRows.cxt);
}

/*
 * HeldRowsWritten - this backend wrote row of name: the kept rows follow
 * an update; an insert makes them forgotten (rare: a slot's first grant)
 */
static void
HeldRowsWritten(const LeaseName *name, const LeaseRow *row, bool inserted)
{
	LeaseRows  *rows = (LeaseRows *) HeldRowsOf(name);

	if (rows == NULL)
		return;
	if (inserted)
	{
		LeaseStoreHeldRowsForget(NULL);
		return;
	}
	for (int i = 0; i < rows->count; i++)
	{
		if (rows->row[i].slot == row->slot)
		{
			LeaseRow	old = rows->row[i];

			/* The old strings are freed: a loop of renewals keeps one copy */
			rows->row[i] = *row;
			rows->row[i].owner = row->owner == NULL ? NULL :
				MemoryContextStrdup(HeldRows.cxt, row->owner);
			rows->row[i].value = row->value == NULL ? NULL :
				MemoryContextStrdup(HeldRows.cxt, row->value);
			if (old.owner != NULL)
				pfree(old.owner);
			if (old.value != NULL)
				pfree(old.value);
			return;
		}
	}
	LeaseStoreHeldRowsForget(NULL);
}

/*
 * FetchFromChain - the version of the HOT chain at *tid visible to
 * snapshot, decoded into *row; false when there is none, with *all_dead
 * telling whether the whole chain is dead to everyone
 */
static bool
FetchFromChain(LeaseStore *store, ItemPointer tid, Snapshot snapshot,
			   LeaseRow *row, bool *all_dead)
{
	Buffer		buffer = ReadBuffer(store->heap, ItemPointerGetBlockNumber(tid));
	ItemPointerData version_tid = *tid;
	HeapTupleData tuple;
	bool		found;
	bool		prune;

	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	found = heap_hot_search_buffer(&version_tid, store->heap, buffer, snapshot,
								   &tuple, all_dead, true);
	if (found)
		DecodeRow(store, &tuple, row);
	prune = PageGetHeapFreeSpace(BufferGetPage(buffer)) < PRUNE_BELOW_FREE_SPACE;
	LockBuffer(buffer, BUFFER_LOCK_UNLOCK);

	/* Takes its own cleanup lock, and gives up if it cannot have it at once */
	if (prune)
		heap_page_prune_opt(store->heap, buffer);
	ReleaseBuffer(buffer);
	return found;
}

/*
 * ScanName - visit the row of each slot of a name that snapshot sees, in
 * slot order, until visit returns false
 *
 * With SnapshotSelf, the latest committed rows: the caller must hold the
 * name's lock in some mode, which is what makes the answer current rather
 * than a guess (and one version per slot: no writer commits meanwhile).
 * With an MVCC snapshot, what it sees.  visit gets each row in a variable
 * that the next row overwrites: it copies what it keeps.
 */
static void
ScanName(LeaseStore *store, const LeaseName *name, Snapshot snapshot,
		 bool (*visit) (LeaseRow *row, void *arg), void *arg)
{
	ScanKeyData key;
	IndexScanDesc scan;
	ItemPointer tid;
	LeaseRow	row;
	text	   *key_text = cstring_to_text_with_len(name->data, name->len);

	/* ScanKeyInit compares under the "C" collation, the column's collation */
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(key_text));

	scan = dlock_index_beginscan(store->heap, store->index, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);

	/* More than one entry per slot only after a non-HOT update, until VACUUM */
	while ((tid = index_getnext_tid(scan, ForwardScanDirection)) != NULL)
	{
		bool		all_dead = false;

		memset(&row, 0, sizeof(LeaseRow));
		if (FetchFromChain(store, tid, snapshot, &row, &all_dead))
		{
			if (!visit(&row, arg))
				break;
			continue;
		}
		/* Let the index mark an entry that leads only to dead versions */
		if (!scan->xactStartedInRecovery)
			scan->kill_prior_tuple = all_dead;
	}

	index_endscan(scan);
	pfree(key_text);
}

static bool
CollectRow(LeaseRow *row, void *arg)
{
	LeaseRows  *rows = (LeaseRows *) arg;

	if (rows->count == rows->space)
	{
		rows->space *= 2;
		rows->row = repalloc(rows->row, sizeof(LeaseRow) * rows->space);
	}
	rows->row[rows->count++] = *row;
	return true;
}

/*
 * LeaseStoreFetchAll - the latest committed rows of a name, by slot; none
 * when the name has never been granted (see ScanName for the lock)
 */
void
LeaseStoreFetchAll(LeaseStore *store, const LeaseName *name, LeaseRows *rows)
{
	const LeaseRows *held = HeldRowsOf(name);

	if (held != NULL)
	{
		CopyRows(held, rows, CurrentMemoryContext);
		return;
	}
	LeaseStoreFetchAllAsOf(store, name, SnapshotSelf, rows);
	/* Worth keeping only when more statements may follow in the transaction */
	if (IsTransactionBlock() && NameLockHeld(name, DLOCK_SERIAL_LOCKMODE))
		KeepHeldRows(name, rows);
}

/*
 * LeaseStoreFetchAllAsOf - the rows of a name that snapshot sees, by slot
 * (dlock.watch(), which holds no lock of the name, passes a fresh MVCC
 * snapshot)
 */
void
LeaseStoreFetchAllAsOf(LeaseStore *store, const LeaseName *name,
					   Snapshot snapshot, LeaseRows *rows)
{
	rows->count = 0;
	rows->space = 4;
	rows->row = palloc(sizeof(LeaseRow) * rows->space);
	ScanName(store, name, snapshot, CollectRow, rows);
}

typedef struct TokenSearch
{
	int64		token;
	bool		found;
	LeaseRow   *row;
} TokenSearch;

static bool
MatchToken(LeaseRow *row, void *arg)
{
	TokenSearch *search = (TokenSearch *) arg;

	*search->row = *row;
	search->found = (row->token == search->token);
	return !search->found;
}

/*
 * LeaseStoreFetchToken - the latest committed row of a name that has token
 * (see ScanName for the lock); false when none has, and then *row is the
 * name's last row (row->found false when it has none).  An exclusive
 * lease's row is the name's first, so this reads one row for it.
 */
bool
LeaseStoreFetchToken(LeaseStore *store, const LeaseName *name, int64 token,
					 LeaseRow *row)
{
	TokenSearch search = {token, false, row};
	const LeaseRows *held = HeldRowsOf(name);

	memset(row, 0, sizeof(LeaseRow));
	if (held != NULL)
	{
		LeaseRows	rows;

		CopyRows(held, &rows, CurrentMemoryContext);
		for (int i = 0; i < rows.count; i++)
		{
			if (!MatchToken(&rows.row[i], &search))
				break;
		}
		return search.found;
	}
	ScanName(store, name, SnapshotSelf, MatchToken, &search);
	return search.found;
}

/* A scan of the whole lease table */
struct LeaseStoreScan
{
	LeaseStore *store;
	TableScanDesc scan;
};

/*
 * LeaseStoreBeginScan - start reading every row of the lease table through
 * snapshot (see LeaseStoreScanNext)
 *
 * Unlike LeaseStoreFetchAll, this takes no name locks: the rows are what the
 * snapshot sees, for callers that only show them.
 */
LeaseStoreScan *
LeaseStoreBeginScan(LeaseStore *store, Snapshot snapshot)
{
	LeaseStoreScan *scan = palloc(sizeof(LeaseStoreScan));

	scan->store = store;
	scan->scan = table_beginscan(store->heap, snapshot, 0, NULL);
	return scan;
}

/*
 * LeaseStoreScanNext - the next row of the scan, and its name (palloc'd in
 * the current memory context, as are the row's strings); false at the end
 */
bool
LeaseStoreScanNext(LeaseStoreScan *scan, LeaseRow *row, text **name)
{
	HeapTuple	tuple = heap_getnext(scan->scan, ForwardScanDirection);
	bool		isnull;

	if (tuple == NULL)
		return false;
	memset(row, 0, sizeof(LeaseRow));
	DecodeRow(scan->store, tuple, row);
	*name = DatumGetTextPCopy(heap_getattr(tuple, Anum_lease_name,
										   RelationGetDescr(scan->store->heap),
										   &isnull));
	return true;
}

void
LeaseStoreEndScan(LeaseStoreScan *scan)
{
	table_endscan(scan->scan);
	pfree(scan);
}

/*
 * InsertIndexEntry - add the primary key entry for a new heap tuple
 */
static void
InsertIndexEntry(LeaseStore *store, HeapTuple tuple, Datum name_datum,
				 int32 slot, bool index_unchanged)
{
	IndexInfo  *index_info = BuildIndexInfo(store->index);
	Datum		values[2];
	bool		isnull[2];

	/* (name) before version 1.1, (name, slot) since */
	values[0] = name_datum;
	isnull[0] = false;
	values[1] = Int32GetDatum(slot);
	isnull[1] = false;
	dlock_index_insert(store->index, values, isnull, &tuple->t_self,
					   store->heap, UNIQUE_CHECK_YES, index_unchanged,
					   index_info);
	pfree(index_info);
}

/*
 * LeaseStoreWrite - store a row as the name's new committed-to-be state
 *
 * Updates the row in place when row->found (the tid it was read from),
 * inserts it into row->slot otherwise; on return row->found and row->tid
 * describe the new version.  The caller holds the name's lock in a mode that excludes other
 * writers, so the update cannot meet a concurrent one.
 */
void
LeaseStoreWrite(LeaseStore *store, const LeaseName *name, LeaseRow *row)
{
	Datum		values[Natts_lease];
	bool		nulls[Natts_lease];
	HeapTuple	tuple;
	Interval   *lock_delay;
	bool		inserted;
	text	   *name_text = cstring_to_text_with_len(name->data, name->len);

	memset(nulls, false, sizeof(nulls));
	values[Anum_lease_name - 1] = PointerGetDatum(name_text);
	values[Anum_lease_token - 1] = Int64GetDatum(row->token);
	values[Anum_lease_owner - 1] = CStringGetTextDatum(row->owner);
	values[Anum_lease_holder_role - 1] = ObjectIdGetDatum(row->holder_role);
	values[Anum_lease_acquired_at - 1] = TimestampTzGetDatum(row->acquired_at);
	values[Anum_lease_expires_at - 1] = TimestampTzGetDatum(row->expires_at);
	if (row->ended)
	{
		values[Anum_lease_ended_at - 1] = TimestampTzGetDatum(row->ended_at);
		values[Anum_lease_end_reason - 1] =
			CStringGetTextDatum(LeaseEndReasonText(row->end_reason));
	}
	else
	{
		nulls[Anum_lease_ended_at - 1] = true;
		nulls[Anum_lease_end_reason - 1] = true;
		values[Anum_lease_ended_at - 1] = (Datum) 0;
		values[Anum_lease_end_reason - 1] = (Datum) 0;
	}

	lock_delay = palloc0(sizeof(Interval));
	lock_delay->time = row->lock_delay_us;
	values[Anum_lease_lock_delay - 1] = IntervalPGetDatum(lock_delay);
	values[Anum_lease_session_bound - 1] = BoolGetDatum(row->session_bound);
	values[Anum_lease_holder_pid - 1] = Int32GetDatum(row->holder_pid);
	nulls[Anum_lease_holder_pid - 1] = !row->session_bound;
	if (store->natts >= Natts_lease)
	{
		nulls[Anum_lease_value - 1] = (row->value == NULL);
		values[Anum_lease_value - 1] = row->value == NULL ? (Datum) 0 :
			CStringGetTextDatum(row->value);
		values[Anum_lease_slot - 1] = Int32GetDatum(row->slot);
		values[Anum_lease_shared - 1] = BoolGetDatum(LeaseKindIsShared(&row->kind));
		values[Anum_lease_max_holders - 1] = Int32GetDatum(row->kind.max_holders);
	}
	else if (row->value != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("lease values need dlock version 1.1"),
				 errhint("Run ALTER EXTENSION dlock UPDATE.")));
	else if (!LeaseKindExclusive(&row->kind))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("shared leases and semaphores need dlock version 1.1"),
				 errhint("Run ALTER EXTENSION dlock UPDATE.")));

	tuple = heap_form_tuple(RelationGetDescr(store->heap), values, nulls);

	inserted = !row->found;
	if (row->found)
	{
		if (dlock_simple_heap_update(store->heap, &row->tid, tuple))
			InsertIndexEntry(store, tuple, PointerGetDatum(name_text),
							 row->slot, true);
	}
	else
	{
		simple_heap_insert(store->heap, tuple);
		InsertIndexEntry(store, tuple, PointerGetDatum(name_text), row->slot,
						 false);
	}

	row->found = true;
	row->tid = tuple->t_self;
	heap_freetuple(tuple);
	HeldRowsWritten(name, row, inserted);

	/* Later reads and updates in this transaction must see this version */
	CommandCounterIncrement();
}

/*
 * LeaseStoreDecode - a tuple that the caller's own scan of the lease table
 * returned, as a LeaseRow; returns the name (palloc'd)
 *
 * What a scan returns is a candidate only: the caller must take the name's
 * lock and read the rows again with LeaseStoreFetchAll before acting on it.
 */
text *
LeaseStoreDecode(LeaseStore *store, HeapTuple tuple, LeaseRow *row)
{
	bool		isnull;
	Datum		name = heap_getattr(tuple, Anum_lease_name,
									RelationGetDescr(store->heap), &isnull);

	memset(row, 0, sizeof(LeaseRow));
	DecodeRow(store, tuple, row);
	return DatumGetTextPCopy(name);
}

/*
 * LeaseStoreDelete - delete a row of a name (dlock.purge())
 *
 * row is what LeaseStoreFetchAll returned under the name's lock, which the
 * caller holds in DLOCK_GRANT_LOCKMODE until the end of its transaction, so
 * no other transaction reads the row to act on it, or writes it, before the
 * delete has committed or rolled back.  The index entry stays, for VACUUM
 * to remove with the dead tuple; a later grant of the name inserts a new
 * row, which the unique check allows once the delete has committed.
 */
void
LeaseStoreDelete(LeaseStore *store, LeaseRow *row)
{
	Assert(row->found);
	simple_heap_delete(store->heap, &row->tid);
	row->found = false;
	LeaseStoreHeldRowsForget(NULL);

	/* Later reads in this transaction must not see the row any more */
	CommandCounterIncrement();
}
