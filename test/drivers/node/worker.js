// dlock from node-postgres (npm pg 8): take a lease, do the job, record it with
// a fenced write, release. `db` is a pg.Client or a pg.Pool. Every call is its
// own transaction and no query is named, so the same code works directly and
// through pgbouncer in transaction mode.
'use strict';

class LeaseLost extends Error {}

// The token is an int8, which node-postgres returns as a string: keep it a
// string (or a BigInt), never a Number.
function leaseFrom(rows) {
  // refused: no row (dlock 1.2), or a row of NULLs (a database still at 1.1)
  if (rows.length === 0 || rows[0].token === null) return null;
  return { name: rows[0].name, owner: rows[0].owner, token: rows[0].token };
}

// Never waits: a lease, or null when it is not free.
async function tryAcquire(db, name, ttl, owner) {
  const { rows } = await db.query(
    'SELECT name, owner, token FROM dlock.try_acquire($1, $2::interval, $3)',
    [name, ttl, owner]);
  return leaseFrom(rows);
}

// Waits in arrival order for at most `timeout` (an interval such as '5s'); the
// server then ends the wait with 55P03 and grants nothing afterwards.
async function acquire(db, name, ttl, owner, timeout) {
  const { rows } = await db.query(
    'SELECT name, owner, token FROM dlock.acquire($1, $2::interval, $3, timeout => $4::interval)',
    [name, ttl, owner, timeout]);
  return leaseFrom(rows);
}

// true: released; false: it had already ended (expired, taken over)
async function release(db, lease) {
  const { rows } = await db.query('SELECT dlock.release($1, $2) AS released',
    [lease.name, lease.owner]);
  return rows[0].released;
}

// The guarded write changes its row only while the lease is live. No row
// changed: the lease is lost, so stop and write nothing more under it.
async function recordRun(db, lease, jobId) {
  const r = await db.query(
    'UPDATE jobs SET done_by = $3, runs = runs + 1 WHERE id = $1 AND dlock.fence($2, $3)',
    [jobId, lease.name, lease.token]);
  if (r.rowCount === 0) throw new LeaseLost(`lease "${lease.name}" lost`);
}

async function withLease(db, lease, jobId, job) {
  try {
    const result = await job(lease);
    await recordRun(db, lease, jobId);
    return result;
  } finally {
    await release(db, lease);
  }
}

// One turn of the worker loop: wait up to 5 s for the job's lease, run it.
async function runJob(db, jobId, owner, job) {
  const lease = await acquire(db, `job:${jobId}`, '30s', owner, '5s');
  return withLease(db, lease, jobId, job);
}

// Or skip a job whose lease someone else holds: null, and `job` is not run.
async function tryRunJob(db, jobId, owner, job) {
  const lease = await tryAcquire(db, `job:${jobId}`, '30s', owner);
  if (lease === null) return null;
  return withLease(db, lease, jobId, job);
}

module.exports = { LeaseLost, tryAcquire, acquire, release, recordRun, withLease, runJob, tryRunJob };
