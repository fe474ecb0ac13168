-- The whole set-up of the benchmark database of bench/compare.sh and
-- bench/instructions.sh: run with psql -v names=N from the directory the
-- scripts were copied to, with bench/plpgsql_lease.sql.
\ir helpers.sql
\ir plpgsql_lease.sql
\ir setup.sql
\ir guarded_setup.sql
\ir dlock_fill.sql
VACUUM ANALYZE;
