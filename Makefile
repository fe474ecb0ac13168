# dlock: leased, fenced locks for PostgreSQL

EXTENSION  = dlock
MODULE_big = dlock
# The C sources, by layer, lowest first (src/LAYERS names the layers; each
# folder's README.md states its rule): src/LAYER/*.c, then src/dlock.c
DLOCK_LAYERS := $(shell sed -e 's/\#.*//' $(dir $(lastword $(MAKEFILE_LIST)))src/LAYERS)
OBJS       = $(patsubst %.c,%.o,$(foreach layer,$(DLOCK_LAYERS),$(sort $(wildcard src/$(layer)/*.c)))) \
             src/dlock.o
DATA       = $(wildcard dlock--*.sql)
PGFILEDESC = "dlock - leased, fenced locks"

REGRESS        = api errors transactions security waiting storage extension subtransactions holder lease_state purge observability sets kinds
# Regression and isolation tests start a private instance unless TEMP_INSTANCE
# is set empty (then they use the server of the libpq environment); with
# PRELOADED=1 that instance has dlock in shared_preload_libraries
TEMP_INSTANCE ?= --temp-instance=$(CURDIR)/tmp_instance \
                 --temp-config=$(CURDIR)/test/temp-instance.conf \
                 $(if $(PRELOADED),--temp-config=$(CURDIR)/test/temp-instance-preloaded.conf)
# The tests live under test/ (sql/, expected/, specs/ and t/), as in pgvector
REGRESS_OPTS   = --inputdir=test --load-extension=dlock $(TEMP_INSTANCE)
# The regression files that check what dlock says when it is not preloaded
# (queue => true and dlock.stats refused, with the hint to preload it): a
# PRELOADED=1 run leaves them out
REGRESS_NOT_PRELOADED = errors observability
ifdef PRELOADED
REGRESS := $(filter-out $(REGRESS_NOT_PRELOADED),$(REGRESS))
endif
ISOLATION      = race fence_regrant stale_snapshot rollback self_wait cycle_shapes held_rows \
                 fifo queue_timeout lock_delay expiry_wakeup session_bound \
                 same_owner_retry purge_race sets_order \
                 shared_fence semaphore kinds_fifo watch_grants first_permits \
                 semaphore_wake first_grant semaphore_change
# The test build's specs, which hold the windows of the conflict rule open
# with its pause points (src/base/test_hooks.h): make installcheck of a module
# built and installed with DLOCK_TEST_HOOKS=1 runs them too
ISOLATION_HOOKS = hook_exclusive_alongside hook_renew_at_expiry hook_change_claim \
                  hook_watch hook_token_move hook_semaphore_change hook_serial_grant \
                  hook_change_read hook_set hook_purge
ifdef DLOCK_TEST_HOOKS
ISOLATION += $(ISOLATION_HOOKS)
endif
ISOLATION_OPTS = --inputdir=test --load-extension=dlock $(TEMP_INSTANCE)
TAP_TESTS      = 1
PROVE_TESTS   ?= test/t/*.pl

EXTRA_CLEAN = tmp_instance cli/dlock

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)

# The server headers are treated as system headers, so that warning flags
# such as -Wextra (see scripts/common.sh) judge dlock's own code, not PostgreSQL's.
PG_CPPFLAGS = -isystem $(shell $(PG_CONFIG) --includedir-server)

# dlock's own headers are named from src/: "engine/engine.h"
PG_CPPFLAGS += -I$(srcdir)/src

# The module knows its own version (module_version.c): dlock.control's
# default_version, written once there
DLOCK_MODULE_VERSION := $(shell sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" $(dir $(lastword $(MAKEFILE_LIST)))dlock.control)
PG_CPPFLAGS += -DDLOCK_MODULE_VERSION='"$(DLOCK_MODULE_VERSION)"'

# The test build (make DLOCK_TEST_HOOKS=1): pause points that isolation
# specs drive (src/base/test_hooks.h).  Never set for a package.
ifdef DLOCK_TEST_HOOKS
PG_CPPFLAGS += -DDLOCK_TEST_HOOKS
endif

include $(PGXS)

# Only the entry points the server looks up are exported (PGDLLEXPORT, see
# src/dlock_compat.h): dlock's internal functions stay out of the backend's
# namespace, where another library's symbols of the same name could collide.
# PostgreSQL 16 and later build modules so themselves; this does it on 13-15.
override CFLAGS += -fvisibility=hidden

# The TAP tests compile helpers found under $TESTDIR, the source directory,
# which PGXS sets only up to 16 (17 has TESTLOGDIR and TESTDATADIR instead)
export TESTDIR = $(CURDIR)

# The TAP tests' shared module, test/perl/DlockTest.pm
PG_PROVE_FLAGS += -I test/perl

# Every module includes its layer's header, which includes the ones below:
# a change to any header rebuilds all
$(OBJS): src/dlock_compat.h $(wildcard src/*/*.h)

# Against one's own server the suite needs prepared transactions: say so
# instead of failing in the middle
ifeq ($(strip $(TEMP_INSTANCE)),)
installcheck: check-server-settings
endif
.PHONY: check-server-settings
check-server-settings:
	@test "$$(psql -XAtc 'SHOW max_prepared_transactions' 2>/dev/null || echo 0)" -gt 0 || \
		{ echo "make installcheck needs a server with max_prepared_transactions > 0 (the tests use PREPARE TRANSACTION), and a superuser"; exit 1; }

# The dlock command-line client (cli/), built and installed with the module
# unless NO_CLI=1 (the Debian build packages it on its own: it links only
# libpq, so one copy serves every major)
CLI_SRCS   = cli/main.c cli/db.c cli/run.c cli/watch.c
CLI_BINDIR ?= /usr/local/bin

ifndef NO_CLI
all: cli/dlock
install: install-cli
uninstall: uninstall-cli
endif

# The command's version (dlock --version) is META.json's, which must be
# dlock.control's default_version with a patch level (1.2 -> 1.2.N), as make
# dist checks it: one version, written once, not a copy in the C source
CLI_VERSION         = $(shell perl -MJSON::PP -0777 -ne 'print JSON::PP->new->decode($$_)->{version} // ""' META.json)
CLI_CONTROL_VERSION = $(shell sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" dlock.control)

cli/dlock: $(CLI_SRCS) cli/dlock_cli.h META.json dlock.control
	@echo '$(CLI_VERSION)' | grep -Eqx '$(subst .,\.,$(CLI_CONTROL_VERSION))\.[0-9]+' || \
		{ echo "META.json's version \"$(CLI_VERSION)\" is not dlock.control's default_version \"$(CLI_CONTROL_VERSION)\" with a patch level (such as $(CLI_CONTROL_VERSION).0)" >&2; exit 1; }
	$(CC) $(CFLAGS) $(PG_CFLAGS) -DDLOCK_VERSION='"$(CLI_VERSION)"' \
		-I$(shell $(PG_CONFIG) --includedir) -o $@ $(CLI_SRCS) \
		$(LDFLAGS) -L$(shell $(PG_CONFIG) --libdir) -lpq -lm

# Installed on this machine (no DESTDIR: not staged for a package), the
# command may shadow another dlock on PATH, such as the package's
# /usr/bin/dlock behind /usr/local/bin, or be shadowed by one: say which
# runs
install-cli: cli/dlock
	$(MKDIR_P) '$(DESTDIR)$(CLI_BINDIR)'
	$(INSTALL_PROGRAM) cli/dlock '$(DESTDIR)$(CLI_BINDIR)/dlock'
	$(if $(DESTDIR),,@bash scripts/dlock-on-path.sh '$(CLI_BINDIR)/dlock')

uninstall-cli:
	rm -f '$(DESTDIR)$(CLI_BINDIR)/dlock'

.PHONY: install-cli uninstall-cli

# The PGXN archive dlock-VERSION.zip of the committed tree, in DIST_DIR
# (META.json's version checked against dlock.control's default_version)
.PHONY: dist
dist:
	DIST_DIR='$(or $(DIST_DIR),.)' bash scripts/dist.sh

# Whole suite on a throwaway cluster; installs what is missing (see README)
.PHONY: test test-ha test-drivers test-histories demo bench
test:
	bash scripts/test.sh

# The recipes of docs/drivers/ with real client drivers, directly and through
# pgbouncer in transaction mode, against the installed build
test-drivers: install
	bash test/drivers/run.sh

# The SQL edition for managed PostgreSQL (sql-edition/dlock.sql): the
# regression files and isolation specs against it, on a copy of
# PG_CONFIG's installation without dlock's files (make test runs it too)
.PHONY: test-sql-edition
test-sql-edition:
	bash scripts/test-sql-edition.sh

# The token history explorer at length (make test runs a few histories)
test-histories:
	bash scripts/test-histories.sh

# dlock under Patroni in network namespaces with partitions, packet loss,
# pauses, clock faults and kill -9 (as root; CI runs a three-minute
# schedule of it, FAULTS_MINUTES=3)
.PHONY: test-faults
test-faults:
	bash test/faults/run.sh

# dlock under real HA managers (pg_auto_failover, then Patroni with etcd): switchover and crash
test-ha:
	bash test/ha/run.sh

# The Prometheus alerting rules of monitoring/ (promtool, from Debian's
# prometheus package, which it installs when missing)
.PHONY: check-alerts
check-alerts:
	bash scripts/check-alerts.sh

# The README's own checks: its size, the links of README.md and docs/*.md,
# and its first SQL block run in psql on a fresh database
.PHONY: check-readme
check-readme:
	PG_CONFIG='$(PG_CONFIG)' bash scripts/check-readme.sh

# The double-debit story on a throwaway cluster
demo:
	bash scripts/demo.sh

# Benchmarks on throwaway clusters (see docs/performance.md): waiting and
# handoff, dlock.purge() on a million names, dlock side by side with its
# alternatives, the nightly-invoice workload, then a lock cycle's
# instructions (about 50 minutes)
bench:
	bash bench/run.sh
	bash bench/purge.sh
	bash bench/compare.sh
	bash bench/invoice.sh
	bash bench/instructions.sh
