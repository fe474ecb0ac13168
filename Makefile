# dlock: leased, fenced locks for PostgreSQL

EXTENSION  = dlock
MODULE_big = dlock
OBJS       = src/dlock.o src/args.o src/name_lock.o src/lease_store.o \
             src/lease_status.o src/session.o src/waiting.o \
             src/durability.o src/lease_api.o src/fence.o
DATA       = $(wildcard dlock--*.sql)
PGFILEDESC = "dlock - leased, fenced locks"

REGRESS        = api errors transactions security waiting
REGRESS_OPTS   = --load-extension=dlock
ISOLATION      = race fence_regrant stale_snapshot rollback \
                 fifo queue_timeout lock_delay expiry_wakeup session_bound
ISOLATION_OPTS = --load-extension=dlock
TAP_TESTS      = 1

EXTRA_CLEAN = tmp_instance

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)

# The server headers are treated as system headers, so that warning flags
# such as -Wextra (see .ci/run) judge dlock's own code, not PostgreSQL's.
PG_CPPFLAGS = -isystem $(shell $(PG_CONFIG) --includedir-server)

include $(PGXS)

# Whole suite on a throwaway cluster; installs what is missing (see README)
.PHONY: test demo bench
test:
	bash scripts/test.sh

# The double-debit story on a throwaway cluster
demo:
	bash scripts/demo.sh

# Benchmarks on a throwaway cluster (see README, Performance)
bench:
	bash bench/run.sh
