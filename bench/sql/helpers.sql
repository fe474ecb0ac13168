-- Loaded into every database of bench/compare.sh that runs pgbench scripts
-- against the C edition.

CREATE EXTENSION dlock;
\ir not_granted.sql
