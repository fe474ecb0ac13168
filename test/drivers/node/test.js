// The node-postgres recipes of docs/drivers/node.md (worker.js), and the traps
// they avoid, against a real server, directly and through pgbouncer in
// transaction mode. Each check prints "ok - ..." or "not ok - ..."; the exit
// status is the number of failures. Environment: see test/drivers/run.sh.
'use strict';

const { execFileSync } = require('child_process');
const pg = require('pg');
const W = require('./worker');

const DIRECT = process.env.DLOCK_DIRECT_URL;
const BOUNCER = process.env.DLOCK_BOUNCER_URL;
const SUPER = process.env.DLOCK_SUPER_URL;
const SQL_EDITION = process.env.DLOCK_EDITION === 'sql';
const TWO53 = 9007199254740992n;
let failures = 0;
let checks = 0;

function ok(cond, what, diag) {
  checks++;
  console.log(`${cond ? 'ok' : 'not ok'} - ${what}`);
  if (!cond) {
    failures++;
    if (diag !== undefined) console.log(`# ${String(diag).replace(/\n/g, '\n# ')}`);
  }
  return cond;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(url, extra = {}) {
  const c = new pg.Client({ connectionString: url, ...extra });
  c.on('error', () => {}); // a connection closed under a test is reported by its query
  await c.connect();
  return c;
}

// The error a promise rejects with, or null when it resolves
async function errorOf(promise) {
  try { await promise; return null; } catch (e) { return e; }
}

let su; // superuser, for set-up and inspection
const run = `${process.pid}`; // names unique to this run

async function newJob(id) {
  await su.query('INSERT INTO jobs (id) VALUES ($1)', [id]);
}
async function job(id) {
  return (await su.query('SELECT done_by::text, runs FROM jobs WHERE id = $1', [id])).rows[0];
}
// the live holders of a name, as dlock.leases shows them
async function live(name) {
  return (await su.query(
    `SELECT owner, token::text, extract(epoch FROM expires_at - clock_timestamp()) AS left
       FROM dlock.leases WHERE name = $1 AND state = 'live'`, [name])).rows;
}
// waits up to ms for a live lease of name
async function liveWithin(name, ms) {
  const end = Date.now() + ms;
  for (;;) {
    const rows = await live(name);
    if (rows.length > 0 || Date.now() > end) return rows;
    await sleep(20);
  }
}
async function cleanUp(name) {
  await su.query('SELECT dlock.force_release($1)', [name]);
}

// A URL of the database dbname: url's server and role
function urlOf(url, dbname) {
  const u = new URL(url);
  u.pathname = `/${dbname}`;
  return u.toString();
}

// dlock installed in the database dbname as test/drivers/run.sh does: the C
// edition by the superuser (s, connected to it), or the SQL edition's
// script run with psql by the application role, which owns the database
async function installDlock(s, dbname, version) {
  if (!SQL_EDITION) {
    await s.query(`CREATE EXTENSION dlock${version ? ` VERSION '${version}'` : ''}`);
    return;
  }
  execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', urlOf(DIRECT, dbname),
    '-f', process.env.DLOCK_SQL_EDITION], { stdio: ['ignore', 'ignore', 'inherit'] });
}

//
// The recipe: worker loop, refusal, lost lease
//
async function recipe(where, url) {
  const db = await connect(url);
  const other = await connect(url);
  try {
    // the worker loop: three turns, each a new lease whose fenced write lands once
    const id = `node-loop-${where}-${run}`;
    await newJob(id);
    const tokens = [];
    for (let i = 0; i < 3; i++) {
      await W.runJob(db, id, 'node-worker-1', async (lease) => { tokens.push(lease.token); });
    }
    const row = await job(id);
    ok(row.runs === 3 && row.done_by === tokens[2],
      `[${where}] worker loop: 3 turns, the job row written once per turn, by the last token`,
      JSON.stringify({ row, tokens }));
    ok(typeof tokens[0] === 'string' && BigInt(tokens[0]) < BigInt(tokens[1]) && BigInt(tokens[1]) < BigInt(tokens[2]),
      `[${where}] worker loop: tokens come back as strings, each larger than the last`, tokens);
    ok((await live(`job:${id}`)).length === 0,
      `[${where}] worker loop: the lease is gone from dlock.leases after the release`);

    // a refused lease: no row (1.2), so the job does not run
    const rid = `node-refused-${where}-${run}`;
    await newJob(rid);
    const holder = await W.tryAcquire(other, `job:${rid}`, '30s', 'node-holder');
    const { rows } = await db.query(
      'SELECT name, owner, token FROM dlock.try_acquire($1, $2::interval, $3)',
      [`job:${rid}`, '30s', 'node-worker-1']);
    ok(holder !== null && rows.length === 0,
      `[${where}] refused: try_acquire returns no row while another owner holds the lease`,
      JSON.stringify(rows));
    let ran = false;
    const res = await W.tryRunJob(db, rid, 'node-worker-1', async () => { ran = true; });
    const rrow = await job(rid);
    ok(res === null && !ran && rrow.runs === 0,
      `[${where}] refused: tryRunJob returns null, the job did not run, nothing was written`,
      JSON.stringify({ res, ran, rrow }));
    await W.release(other, holder);

    // a lost lease: the ttl passes during the job and another owner takes it
    const lid = `node-lost-${where}-${run}`;
    await newJob(lid);
    const short = await W.tryAcquire(db, `job:${lid}`, '300ms', 'node-slow');
    let taker = null;
    const err = await errorOf(W.withLease(db, short, lid, async () => {
      await sleep(500);
      taker = await W.tryAcquire(other, `job:${lid}`, '30s', 'node-taker');
    }));
    const lrow = await job(lid);
    ok(taker !== null && err instanceof W.LeaseLost && lrow.runs === 0,
      `[${where}] lost: the slow worker's fenced write changes no row and it gets LeaseLost`,
      JSON.stringify({ taker, err: String(err), lrow }));
    await W.recordRun(other, taker, lid);
    const l2 = await job(lid);
    ok(l2.runs === 1 && l2.done_by === taker.token,
      `[${where}] lost: the new holder's fenced write lands`, JSON.stringify(l2));
    ok(await W.release(other, taker), `[${where}] lost: the new holder releases its lease`);
  } finally {
    await db.end();
    await other.end();
  }
}

//
// A database still at 1.1: a row of NULLs, which rows.length alone misreads.
// The SQL edition has one version, 1.3: there, a new database refuses with
// no row, and the recipe reads that as refused
//
async function version11() {
  const dbname = `dlock_node_v11_${run}`;
  await su.query(`CREATE DATABASE ${dbname} OWNER app`);
  const s11 = await connect(urlOf(SUPER, dbname));
  try {
    if (SQL_EDITION) {
      await installDlock(s11, dbname);
      const db = await connect(urlOf(DIRECT, dbname));
      const holder = await W.tryAcquire(db, 'job:x', '30s', 'node-holder');
      const { rows } = await db.query(
        'SELECT name, owner, token FROM dlock.try_acquire($1, $2::interval, $3)',
        ['job:x', '30s', 'node-worker-1']);
      const edition = (await s11.query(
        "SELECT obj_description('dlock'::regnamespace, 'pg_namespace') AS c")).rows[0].c;
      ok(holder !== null && rows.length === 0 && edition.startsWith('dlock 1.3, SQL edition')
         && await W.tryAcquire(db, 'job:x', '30s', 'node-worker-1') === null,
        '[SQL edition] no database at 1.1 (one version, 1.3): a new database refuses with no row, and tryAcquire returns null',
        JSON.stringify({ rows, edition }));
      await db.end();
      return;
    }
    await installDlock(s11, dbname, '1.1');
    const db = await connect(urlOf(DIRECT, dbname));
    const holder = await W.tryAcquire(db, 'job:x', '30s', 'node-holder');
    const { rows } = await db.query(
      'SELECT name, owner, token FROM dlock.try_acquire($1, $2::interval, $3)',
      ['job:x', '30s', 'node-worker-1']);
    ok(holder !== null && rows.length === 1 && rows[0].token === null,
      '[1.1] refused: try_acquire returns one row of NULLs, which a check of rows.length alone takes for a grant',
      JSON.stringify(rows));
    ok(await W.tryAcquire(db, 'job:x', '30s', 'node-worker-1') === null,
      '[1.1] refused: tryAcquire of the recipe returns null there too');
    await db.end();
  } finally {
    await s11.end();
    await su.query(`DROP DATABASE ${dbname} WITH (FORCE)`);
  }
}

//
// Trap: query_timeout gives up in the client while the server keeps waiting
//
async function queryTimeout(where, url) {
  const holderDb = await connect(url);
  const name = `node-qt-${where}-${run}`;
  try {
    // shown: the server grants the lease after the client gave up
    let holder = await W.tryAcquire(holderDb, name, '30s', 'node-holder');
    const impatient = await connect(url, { query_timeout: 300 });
    const e = await errorOf(W.acquire(impatient, name, '30s', 'node-impatient', null));
    await W.release(holderDb, holder);
    const rows = await liveWithin(name, 2000);
    ok(e && /timeout/i.test(e.message) && rows.length === 1 && rows[0].owner === 'node-impatient'
       && rows[0].left > 25,
      `[${where}] query_timeout trap: the client gave up, then the server granted the lease to nobody for its full ttl`,
      JSON.stringify({ e: String(e), rows }));
    await impatient.end();
    await cleanUp(name);

    // avoided: the timeout argument ends the wait on the server
    holder = await W.tryAcquire(holderDb, name, '30s', 'node-holder');
    const patient = await connect(url);
    const e2 = await errorOf(W.acquire(patient, name, '30s', 'node-patient', '300ms'));
    await W.release(holderDb, holder);
    await sleep(300);
    const rows2 = await live(name);
    ok(e2 && e2.code === '55P03' && rows2.length === 0,
      `[${where}] query_timeout trap avoided: acquire's timeout argument raises 55P03 and nothing is granted afterwards`,
      JSON.stringify({ e2: String(e2), code: e2 && e2.code, rows2 }));
    await patient.end();
  } finally {
    await holderDb.end();
  }
}

// statement_timeout as a connection setting: works directly; pgbouncer 1.18
// refuses the start-up parameter (use the timeout argument behind it)
async function statementTimeout() {
  const holderDb = await connect(DIRECT);
  const name = `node-st-${run}`;
  try {
    const holder = await W.tryAcquire(holderDb, name, '30s', 'node-holder');
    const bounded = await connect(DIRECT, { statement_timeout: 300 });
    const e = await errorOf(W.acquire(bounded, name, '30s', 'node-bounded', null));
    await W.release(holderDb, holder);
    await sleep(300);
    const rows = await live(name);
    ok(e && e.code === '57014' && rows.length === 0,
      '[direct] query_timeout trap avoided: statement_timeout cancels the wait on the server (57014), nothing is granted',
      JSON.stringify({ e: String(e), rows }));
    await bounded.end();
    const e2 = await errorOf(connect(BOUNCER, { statement_timeout: 300 }));
    ok(e2 && /statement_timeout/.test(e2.message),
      '[pgbouncer] statement_timeout as a connection setting is refused by pgbouncer: use the timeout argument',
      String(e2));
  } finally {
    await holderDb.end();
  }
}

//
// Trap: int8 tokens above 2^53 as a Number
//
async function int8() {
  const dbname = `dlock_node_big_${run}`;
  await su.query(`CREATE DATABASE ${dbname} OWNER app`);
  const s = await connect(urlOf(SUPER, dbname));
  const app = new URL(urlOf(DIRECT, dbname));
  const clients = [];
  try {
    await installDlock(s, dbname);
    await s.query(`CREATE TABLE jobs (id text PRIMARY KEY, done_by bigint, runs int NOT NULL DEFAULT 0);
                   ALTER TABLE jobs OWNER TO app;
                   INSERT INTO jobs (id) VALUES ('a'), ('b'), ('c'), ('d')`);
    // tokens of epoch 8192 on: 2^53 and more (here without 8192 failovers)
    await s.query(`SELECT setval('dlock.token_seq', ${TWO53})`);
    const asNumber = {
      getTypeParser: (oid, format) => (oid === 20 ? Number : pg.types.getTypeParser(oid, format)),
    };
    const asBigInt = {
      getTypeParser: (oid, format) => (oid === 20 ? BigInt : pg.types.getTypeParser(oid, format)),
    };
    const plain = await connect(app.toString());
    const numeric = await connect(app.toString(), { types: asNumber });
    const big = await connect(app.toString(), { types: asBigInt });
    clients.push(plain, numeric, big);

    const a = await W.tryAcquire(plain, 'job:a', '30s', 'node-a');
    ok(a.token === String(TWO53 + 1n),
      `int8: node-postgres returns the token ${TWO53 + 1n} as that string`, a.token);
    const e = await errorOf(W.recordRun(plain, { ...a, token: Number(a.token) }, 'a'));
    ok(Number(a.token) === Number(TWO53) && e instanceof W.LeaseLost,
      'int8 trap: Number(token) rounds it to 2^53 and the fence refuses the write', String(e));
    ok(await errorOf(W.recordRun(plain, a, 'a')) === null,
      'int8 trap avoided: the token kept a string fences the write');

    // the next token odd again (2^53 + 3), which no Number can hold
    await s.query(`SELECT setval('dlock.token_seq', ${TWO53 + 2n})`);
    const b = await W.tryAcquire(numeric, 'job:b', '30s', 'node-b');
    const e2 = await errorOf(W.recordRun(numeric, b, 'b'));
    const granted = (await s.query("SELECT token::text FROM dlock.leases WHERE name = 'job:b'")).rows[0].token;
    ok(typeof b.token === 'number' && granted === String(TWO53 + 3n) && String(b.token) !== granted
       && e2 instanceof W.LeaseLost,
      `int8 trap: a Number type parser for int8 (parseInt8) reads ${granted} as ${b.token} and the fence refuses`,
      JSON.stringify({ token: String(b.token), granted, e2: String(e2) }));

    const c = await W.tryAcquire(big, 'job:c', '30s', 'node-c');
    ok(typeof c.token === 'bigint' && c.token > TWO53 && await errorOf(W.recordRun(big, c, 'c')) === null,
      'int8 trap avoided: a BigInt type parser keeps the token exact and the fence passes',
      String(c.token));
    const row = (await s.query("SELECT done_by::text FROM jobs WHERE id = 'c'")).rows[0];
    ok(row.done_by === String(c.token), 'int8: the BigInt token written is the one granted', row.done_by);
  } finally {
    for (const c of clients) await c.end();
    await s.end();
    await su.query(`DROP DATABASE ${dbname} WITH (FORCE)`);
  }
}

//
// Trap: named (server-side prepared) queries through pgbouncer in transaction mode
//
async function namedQueries(where, url) {
  const db = await connect(url);
  const intruder = await connect(url); // any other client of the same pool
  const id = `node-named-${where}-${run}`;
  const name = `job:${id}`;
  await newJob(id);
  const acq = (owner) => db.query({ name: `dlock-acquire-${run}`,
    text: 'SELECT token, pg_backend_pid() AS pid FROM dlock.acquire($1, $2::interval, $3, timeout => $4::interval)',
    values: [name, '30s', owner, '5s'] });
  const write = (token) => db.query({ name: `dlock-record-${run}`,
    text: 'UPDATE jobs SET done_by = $3, runs = runs + 1 WHERE id = $1 AND dlock.fence($2, $3)',
    values: [id, name, token] });
  const rel = (owner) => db.query({ name: `dlock-release-${run}`,
    text: 'SELECT dlock.release($1, $2) AS released', values: [name, owner] });
  try {
    // turn 1 prepares the three statements on one server connection
    let t = (await acq('node-named')).rows[0];
    await write(t.token);
    await rel('node-named');
    // turn 2: the lease is granted, then another client's transaction has
    // that server connection while the write and the release run
    t = (await acq('node-named')).rows[0];
    await intruder.query('BEGIN');
    const ipid = (await intruder.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const ew = await errorOf(write(t.token));
    const er = await errorOf(rel('node-named'));
    await intruder.query('COMMIT');
    const rows = await live(name);
    if (where === 'pgbouncer') {
      ok(ipid === t.pid && ew && ew.code === '26000' && er && er.code === '26000'
         && rows.length === 1 && rows[0].left > 25,
        '[pgbouncer] named queries trap: in the middle of a lease the write and the release fail (prepared statement does not exist) and the lease stays for its ttl',
        JSON.stringify({ ipid, pid: t.pid, ew: String(ew), er: String(er), rows }));
    } else {
      ok(ew === null && er === null && rows.length === 0,
        '[direct] named queries work on a connection of one\'s own',
        JSON.stringify({ ew: String(ew), er: String(er), rows }));
    }
    await cleanUp(name);

    // avoided: the recipe's unnamed queries, with the same intruder
    const fix = await connect(url);
    const lease = await W.acquire(fix, name, '30s', 'node-unnamed', '5s');
    await intruder.query('BEGIN');
    await intruder.query('SELECT 1');
    const e = await errorOf(W.recordRun(fix, lease, id));
    const released = await W.release(fix, lease);
    await intruder.query('COMMIT');
    ok(e === null && released && (await live(name)).length === 0,
      `[${where}] named queries trap avoided: unnamed queries write and release whichever server connection they get`,
      String(e));
    await fix.end();
  } finally {
    await db.end();
    await intruder.end();
  }
}

//
// Trap: a pg.Pool of N starves with N blocking acquire() waiters and a holder
//
async function poolStarvation() {
  const N = 3;
  const name = `node-pool-${run}`;
  // each waiter takes the lease, then releases it
  const waitersOf = (pool, wait, timeout) => Array.from({ length: N }, (_, i) =>
    errorOf((async () => {
      const l = await wait(pool, name, '1s', `node-waiter-${i}`, timeout);
      await W.release(pool, l);
    })()));
  const settle = () => sleep(300); // the waiters are in the server's queue

  // shown: the holder's release waits for a pool connection until its ttl ends
  let pool = new pg.Pool({ connectionString: DIRECT, max: N });
  let lease = await W.tryAcquire(pool, name, '2s', 'node-holder');
  const t0 = Date.now();
  let waiters = waitersOf(pool, W.acquire, '4s');
  await settle();
  let s = Date.now();
  let released = await W.release(pool, lease);
  let took = Date.now() - s;
  await Promise.all(waiters);
  ok(!released && took > 1200 && Date.now() - t0 >= 1900,
    `pool trap: pg.Pool of ${N}, ${N} blocking acquire() waiters: the holder's release waited ${took} ms for a connection and found its lease expired`,
    JSON.stringify({ released, took }));
  await pool.end();
  await cleanUp(name);

  // avoided: a pool larger than the number of waiters
  pool = new pg.Pool({ connectionString: DIRECT, max: N + 1 });
  lease = await W.tryAcquire(pool, name, '2s', 'node-holder');
  waiters = waitersOf(pool, W.acquire, '4s');
  await settle();
  s = Date.now();
  released = await W.release(pool, lease);
  took = Date.now() - s;
  const got = (await Promise.all(waiters)).filter((e) => e === null).length;
  ok(released && took < 500 && got === N,
    `pool trap avoided: a pool of ${N + 1}: release in ${took} ms, then each waiter granted in turn`,
    JSON.stringify({ released, took, got }));
  await pool.end();
  await cleanUp(name);

  // avoided: try_acquire and a retry, which hold no connection between tries
  pool = new pg.Pool({ connectionString: DIRECT, max: N });
  lease = await W.tryAcquire(pool, name, '2s', 'node-holder');
  const poll = async (db, n, ttl, owner) => {
    for (;;) {
      const l = await W.tryAcquire(db, n, ttl, owner);
      if (l !== null) return l;
      await sleep(50);
    }
  };
  waiters = waitersOf(pool, poll, null);
  await settle();
  s = Date.now();
  released = await W.release(pool, lease);
  took = Date.now() - s;
  const polled = (await Promise.all(waiters)).filter((e) => e === null).length;
  ok(released && took < 500 && polled === N,
    `pool trap avoided: a pool of ${N} and try_acquire retried every 50 ms: release in ${took} ms, each poller granted`,
    JSON.stringify({ released, took, polled }));
  await pool.end();
}

async function main() {
  su = await connect(SUPER);
  const parts = [
    () => recipe('direct', DIRECT), () => recipe('pgbouncer', BOUNCER), version11,
    () => queryTimeout('direct', DIRECT), () => queryTimeout('pgbouncer', BOUNCER), statementTimeout,
    int8, () => namedQueries('direct', DIRECT), () => namedQueries('pgbouncer', BOUNCER), poolStarvation,
  ];
  for (const part of parts) {
    const e = await errorOf(part());
    if (e) ok(false, `no unexpected error: ${e.message}`, e.stack);
  }
  await su.end();
  ok(checks > 0, `${checks} checks ran`);
  process.exit(failures ? 1 : 0);
}

main();
