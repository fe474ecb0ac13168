-- Tables of bench/compare.sh, loaded once into its throwaway cluster (after
-- helpers.sql and plpgsql_lease.sql).  Every method gets the same 10,000
-- names ('k1' .. 'k10000'), already present and free, so that all runs
-- measure updates of existing rows rather than first inserts (dlock's rows
-- are made by dlock_fill.sql).

-- Durable floor: the cheapest durable change, a one-row UPDATE of a table
-- with the same number of rows as there are names.
CREATE TABLE bench_floor (id integer PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
INSERT INTO bench_floor (id) SELECT g FROM generate_series(1, 10000) g;

-- ShedLock's table as its PostgreSQL lock provider uses it.
CREATE TABLE shedlock (
  name       text PRIMARY KEY,
  lock_until timestamptz NOT NULL,
  locked_at  timestamptz NOT NULL,
  locked_by  text NOT NULL
);
INSERT INTO shedlock
SELECT 'k' || g, now(), now(), 'setup' FROM generate_series(1, 10000) g;

-- The PL/pgSQL lease's rows, expired.
INSERT INTO plpgsql_lease
SELECT 'k' || g, 'setup', nextval('plpgsql_lease_token_seq'), clock_timestamp()
  FROM generate_series(1, 10000) g;

-- A table for the fenced-UPDATE timing.
CREATE TABLE bench_fence (id integer PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
INSERT INTO bench_fence (id) SELECT g FROM generate_series(1, 100000) g;
