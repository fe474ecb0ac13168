/*-------------------------------------------------------------------------
 *
 * store.h
 *	  The lease store: dlock.lease_state's rows of a name, read and written.
 *
 * Reads in the latest committed state, writes, the rows a transaction keeps
 * for the one name it holds serialized, and the scan of every row.
 *
 * Copyright (c) 2026, dlock developers
 *
 * IDENTIFICATION
 *	  src/store/store.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_STORE_H
#define DLOCK_STORE_H

#include "model/model.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
#include "access/htup.h"

/* The relations behind the lease store, opened for one call */
typedef struct LeaseStore
{
	Relation	heap;
	Relation	index;
	LOCKMODE	lockmode;
	int			natts;			/* 11 before version 1.1: no value, no slots */
} LeaseStore;

/* lease_store.c */
extern void LeaseStoreCacheInit(void);
extern uint64 LeaseStoreGeneration(void);
extern void LeaseStoreOpen(LeaseStore *store, LOCKMODE lockmode);
extern void LeaseStoreClose(LeaseStore *store);
extern void LeaseStoreFetchAll(LeaseStore *store, const LeaseName *name, LeaseRows *rows);
extern void LeaseStoreFetchAllAsOf(LeaseStore *store, const LeaseName *name,
								   Snapshot snapshot, LeaseRows *rows);
extern bool LeaseStoreFetchToken(LeaseStore *store, const LeaseName *name,
								 int64 token, LeaseRow *row);
extern void LeaseStoreWrite(LeaseStore *store, const LeaseName *name, LeaseRow *row);
extern text *LeaseStoreDecode(LeaseStore *store, HeapTuple tuple, LeaseRow *row);
extern void LeaseStoreDelete(LeaseStore *store, LeaseRow *row);
extern void LeaseStoreHeldRowsForget(const LeaseName *name);
extern Oid	LeaseStoreTokenSequence(void);
extern Oid	LeaseStoreTokenIncarnation(void);

/* A scan of every lease row, through a given snapshot (lease_store.c) */
typedef struct LeaseStoreScan LeaseStoreScan;

extern LeaseStoreScan *LeaseStoreBeginScan(LeaseStore *store, Snapshot snapshot);
extern bool LeaseStoreScanNext(LeaseStoreScan *scan, LeaseRow *row, text **name);
extern void LeaseStoreEndScan(LeaseStoreScan *scan);

#endif							/* DLOCK_STORE_H */
