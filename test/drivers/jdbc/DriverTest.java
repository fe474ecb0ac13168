// The pgjdbc recipes of docs/drivers/java.md (Worker.java), and the traps they
// avoid, against a real server, directly and through pgbouncer in transaction
// mode. Each check prints "ok - ..." or "not ok - ..."; the exit status is 1
// when one failed. Environment: see test/drivers/run.sh.
import java.net.URI;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.postgresql.util.PGInterval;

public final class DriverTest {
    private static int checks = 0;
    private static int failures = 0;
    private static final String RUN = Long.toString(ProcessHandle.current().pid());
    private static final boolean SQL_EDITION = "sql".equals(System.getenv("DLOCK_EDITION"));
    private static Connection su;

    private static boolean ok(boolean cond, String what, Object diag) {
        checks++;
        System.out.println((cond ? "ok" : "not ok") + " - " + what);
        if (!cond) {
            failures++;
            if (diag != null) System.out.println("# " + String.valueOf(diag).replace("\n", "\n# "));
        }
        return cond;
    }

    // a libpq URL postgresql://user:pw@host:port/db as a pgjdbc connection
    private static Connection connect(String libpqUrl, String db, String params) throws SQLException {
        URI u = URI.create(libpqUrl);
        String[] auth = u.getUserInfo() == null ? new String[0] : u.getUserInfo().split(":", 2);
        String path = db != null ? "/" + db : u.getPath();
        Properties p = new Properties();
        if (auth.length > 0) p.setProperty("user", auth[0]);
        if (auth.length > 1) p.setProperty("password", auth[1]);
        String url = "jdbc:postgresql://" + u.getHost() + ":" + u.getPort() + path
            + (params.isEmpty() ? "" : "?" + params);
        return DriverManager.getConnection(url, p);
    }

    private static Connection connect(String libpqUrl, String params) throws SQLException {
        return connect(libpqUrl, null, params);
    }

    private static SQLException sqlErrorOf(ThrowingRunnable r) throws Exception {
        try {
            r.run();
            return null;
        } catch (SQLException e) {
            return e;
        }
    }

    private static Exception errorOf(ThrowingRunnable r) {
        try {
            r.run();
            return null;
        } catch (Exception e) {
            return e;
        }
    }

    interface ThrowingRunnable { void run() throws Exception; }

    private static void exec(Connection c, String sql, Object... args) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) ps.setObject(i + 1, args[i]);
            ps.execute();
        }
    }

    private static List<List<String>> rows(Connection c, String sql, Object... args) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) ps.setObject(i + 1, args[i]);
            try (ResultSet rs = ps.executeQuery()) {
                List<List<String>> out = new ArrayList<>();
                int n = rs.getMetaData().getColumnCount();
                while (rs.next()) {
                    List<String> row = new ArrayList<>();
                    for (int i = 1; i <= n; i++) row.add(rs.getString(i));
                    out.add(row);
                }
                return out;
            }
        }
    }

    private static void newJob(String id) throws SQLException {
        exec(su, "INSERT INTO jobs (id) VALUES (?)", id);
    }

    // [done_by, runs]
    private static List<String> job(String id) throws SQLException {
        return rows(su, "SELECT done_by::text, runs::text FROM jobs WHERE id = ?", id).get(0);
    }

    // the live holders of a name in dlock.leases: [owner, token, seconds left]
    private static List<List<String>> live(String name) throws SQLException {
        return rows(su, "SELECT owner, token::text, round(extract(epoch FROM expires_at - clock_timestamp()))::text"
            + " FROM dlock.leases WHERE name = ? AND state = 'live'", name);
    }

    private static void cleanUp(String name) throws SQLException {
        exec(su, "SELECT dlock.force_release(?)", name);
    }

    //
    // The recipe: worker loop, refusal, lost lease
    //
    static void recipe(String where, String url, String params) throws Exception {
        try (Connection db = connect(url, params); Connection other = connect(url, params)) {
            String id = "jdbc-loop-" + where + "-" + RUN;
            newJob(id);
            List<Long> tokens = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                Worker.runJob(db, id, "jdbc-worker-1", lease -> tokens.add(lease.token()));
            }
            List<String> row = job(id);
            ok(row.get(1).equals("3") && row.get(0).equals(tokens.get(2).toString())
                && tokens.get(0) < tokens.get(1) && tokens.get(1) < tokens.get(2),
                "[" + where + "] worker loop: 3 turns, the job row written once per turn, by the last of growing tokens",
                row + " " + tokens);
            ok(live("job:" + id).isEmpty(),
                "[" + where + "] worker loop: the lease is gone from dlock.leases after the release", null);

            // a refused lease: no row (1.2), so the job does not run
            String rid = "jdbc-refused-" + where + "-" + RUN;
            newJob(rid);
            Worker.Lease holder = Worker.tryAcquire(other, "job:" + rid, "30s", "jdbc-holder");
            boolean hasRow;
            try (PreparedStatement ps = db.prepareStatement(
                    "SELECT name, owner, token FROM dlock.try_acquire(?, ?::interval, ?)")) {
                ps.setString(1, "job:" + rid);
                ps.setString(2, "30s");
                ps.setString(3, "jdbc-worker-1");
                try (ResultSet rs = ps.executeQuery()) {
                    hasRow = rs.next();
                }
            }
            ok(holder != null && !hasRow,
                "[" + where + "] refused: try_acquire returns no row (!rs.next()) while another owner holds the lease", null);
            boolean[] ran = { false };
            Object res = Worker.tryRunJob(db, rid, "jdbc-worker-1", lease -> ran[0] = true);
            ok(res == null && !ran[0] && job(rid).get(1).equals("0"),
                "[" + where + "] refused: tryRunJob returns null, the job did not run, nothing was written",
                res + " " + ran[0] + " " + job(rid));
            Worker.release(other, holder);

            // a lost lease: the ttl passes during the job and another owner takes it
            String lid = "jdbc-lost-" + where + "-" + RUN;
            newJob(lid);
            Worker.Lease slow = Worker.tryAcquire(db, "job:" + lid, "300ms", "jdbc-slow");
            Worker.Lease[] taker = { null };
            Exception e = errorOf(() -> Worker.withLease(db, slow, lid, lease -> {
                Thread.sleep(500);
                taker[0] = Worker.tryAcquire(other, "job:" + lid, "30s", "jdbc-taker");
                return true;
            }));
            ok(taker[0] != null && e instanceof Worker.LeaseLost && job(lid).get(1).equals("0"),
                "[" + where + "] lost: the slow worker's fenced write changes no row and it gets LeaseLost",
                e + " " + job(lid));
            Worker.recordRun(other, taker[0], lid);
            ok(job(lid).equals(List.of(Long.toString(taker[0].token()), "1")),
                "[" + where + "] lost: the new holder's fenced write lands", job(lid));
            ok(Worker.release(other, taker[0]), "[" + where + "] lost: the new holder releases its lease", null);
        }
    }

    // dlock installed in the database dbname as test/drivers/run.sh does: the C
    // edition by the superuser, at version (null: the default), or the SQL
    // edition's script run with psql by the application role, which owns the
    // database
    static void installDlock(String dbname, String version) throws Exception {
        if (!SQL_EDITION) {
            try (Connection s = connect(System.getenv("DLOCK_SUPER_URL"), dbname, "")) {
                exec(s, "CREATE EXTENSION dlock" + (version == null ? "" : " VERSION '" + version + "'"));
            }
            return;
        }
        URI app = URI.create(System.getenv("DLOCK_DIRECT_URL"));
        String url = new URI(app.getScheme(), app.getUserInfo(), app.getHost(), app.getPort(),
            "/" + dbname, null, null).toString();
        Process p = new ProcessBuilder("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url,
            "-f", System.getenv("DLOCK_SQL_EDITION")).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        if (p.waitFor() != 0) throw new IllegalStateException("the SQL edition's script: " + out);
    }

    //
    // A database still at 1.1: a row of NULLs, which rs.next() alone misreads.
    // The SQL edition has one version, 1.3: there, a new database refuses with
    // no row, and the recipe reads that as refused
    //
    static void version11() throws Exception {
        String dbname = "dlock_jdbc_v11_" + RUN;
        exec(su, "CREATE DATABASE " + dbname + " OWNER app");
        try {
            if (SQL_EDITION) {
                installDlock(dbname, null);
                try (Connection db = connect(System.getenv("DLOCK_DIRECT_URL"), dbname, "")) {
                    Worker.Lease holder = Worker.tryAcquire(db, "job:x", "30s", "jdbc-holder");
                    boolean hasRow;
                    try (PreparedStatement ps = db.prepareStatement(
                            "SELECT name, owner, token FROM dlock.try_acquire(?, ?::interval, ?)")) {
                        ps.setString(1, "job:x");
                        ps.setString(2, "30s");
                        ps.setString(3, "jdbc-worker-1");
                        try (ResultSet rs = ps.executeQuery()) {
                            hasRow = rs.next();
                        }
                    }
                    String edition = rows(db, "SELECT obj_description('dlock'::regnamespace, 'pg_namespace')").get(0).get(0);
                    ok(holder != null && !hasRow && edition.startsWith("dlock 1.3, SQL edition")
                        && Worker.tryAcquire(db, "job:x", "30s", "jdbc-worker-1") == null,
                        "[SQL edition] no database at 1.1 (one version, 1.3): a new database refuses with no row, and tryAcquire returns null",
                        hasRow + " " + edition);
                }
                return;
            }
            installDlock(dbname, "1.1");
            try (Connection db = connect(System.getenv("DLOCK_DIRECT_URL"), dbname, "")) {
                Worker.Lease holder = Worker.tryAcquire(db, "job:x", "30s", "jdbc-holder");
                boolean hasRow;
                long token;
                boolean wasNull;
                try (PreparedStatement ps = db.prepareStatement(
                        "SELECT name, owner, token FROM dlock.try_acquire(?, ?::interval, ?)")) {
                    ps.setString(1, "job:x");
                    ps.setString(2, "30s");
                    ps.setString(3, "jdbc-worker-1");
                    try (ResultSet rs = ps.executeQuery()) {
                        hasRow = rs.next();
                        token = rs.getLong("token");
                        wasNull = rs.wasNull();
                    }
                }
                ok(holder != null && hasRow && token == 0 && wasNull,
                    "[1.1] refused: a row of NULLs: rs.next() alone takes it for a grant, and getLong reads the token as 0",
                    hasRow + " " + token + " " + wasNull);
                ok(Worker.tryAcquire(db, "job:x", "30s", "jdbc-worker-1") == null,
                    "[1.1] refused: tryAcquire of the recipe returns null there too", null);
            }
        } finally {
            exec(su, "DROP DATABASE " + dbname + " WITH (FORCE)");
        }
    }

    //
    // Trap: the ttl bound with setString, without a cast
    //
    static void ttlAsText(String where, String url, String params) throws Exception {
        String name = "jdbc-ttl-" + where + "-" + RUN;
        try (Connection db = connect(url, params)) {
            SQLException e = sqlErrorOf(() -> {
                try (PreparedStatement ps = db.prepareStatement(
                        "SELECT name, owner, token FROM dlock.try_acquire(?, ?, ?)")) {
                    ps.setString(1, name);
                    ps.setString(2, "30s");
                    ps.setString(3, "jdbc-text");
                    ps.executeQuery().close();
                }
            });
            ok(e != null && "42883".equals(e.getSQLState()) && e.getMessage().contains("does not exist"),
                "[" + where + "] ttl trap: setString for the ttl without a cast: function dlock.try_acquire(...) does not exist (42883)",
                e);
            Worker.Lease cast = Worker.tryAcquire(db, name, "30s", "jdbc-cast");
            ok(cast != null, "[" + where + "] ttl trap avoided: ?::interval takes the same string", null);
            Worker.release(db, cast);
            try (PreparedStatement ps = db.prepareStatement(
                    "SELECT token FROM dlock.try_acquire(?, ?, ?)")) {
                ps.setString(1, name);
                ps.setObject(2, new PGInterval("30 seconds"));
                ps.setString(3, "jdbc-pginterval");
                try (ResultSet rs = ps.executeQuery()) {
                    ok(rs.next() && rs.getLong(1) > cast.token(),
                        "[" + where + "] ttl trap avoided: setObject with a PGInterval needs no cast", null);
                }
            }
            cleanUp(name);
        }
    }

    //
    // Trap: autoCommit=false leaves the grant uncommitted past its ttl
    //
    static void autoCommitOff(String where, String url, String params) throws Exception {
        String name = "jdbc-tx-" + where + "-" + RUN;
        try (Connection tx = connect(url, params); Connection other = connect(url, params)) {
            tx.setAutoCommit(false);
            Exception refused = errorOf(() -> Worker.tryAcquire(tx, name, "1s", "jdbc-tx"));
            ok(refused instanceof IllegalStateException,
                "[" + where + "] autocommit trap: the recipe refuses a connection with autoCommit=false", refused);
            // what the recipe refuses: a grant inside a transaction, never committed
            exec(tx, "SELECT * FROM dlock.try_acquire(?, '1s'::interval, 'jdbc-tx')", name);
            Thread.sleep(1300);
            Worker.Lease after = Worker.tryAcquire(other, name, "30s", "jdbc-other");
            ok(after == null && live(name).isEmpty()
                && rows(su, "SELECT 1 FROM dlock.leases WHERE name = ?", name).isEmpty(),
                "[" + where + "] autocommit trap: 1.3 s after a 1 s grant left uncommitted, the name is still refused and dlock.leases shows no row",
                after + " " + live(name));
            tx.rollback();
            after = Worker.tryAcquire(other, name, "30s", "jdbc-other");
            ok(after != null, "[" + where + "] autocommit trap: granted to others once that transaction ends", null);
            Worker.release(other, after);

            // avoided: commit the grant at once (autocommit does that for every call)
            tx.setAutoCommit(true);
            Worker.Lease lease = Worker.tryAcquire(tx, name, "1s", "jdbc-tx");
            List<List<String>> seen = live(name);
            Thread.sleep(1100);
            Worker.Lease next = Worker.tryAcquire(other, name, "30s", "jdbc-other");
            ok(lease != null && seen.size() == 1 && next != null,
                "[" + where + "] autocommit trap avoided: a committed grant is shown live in dlock.leases and ends at its ttl",
                seen + " " + next);
            Worker.release(other, next);
        }
    }

    //
    // Trap: server-side prepared statements (prepareThreshold) through pgbouncer
    //
    // Two workers of one application share the pool. pgjdbc names the
    // statements it prepares S_1, S_2, ... per client connection, from the 5th
    // use of a statement on (prepareThreshold=5). Worker A's five turns prepare
    // its S_1..S_3 on the server connection they all ran on (pgbouncer hands out
    // the connection used last). Worker B's 5th turn prepares its own S_1 for
    // the acquire on another server connection, while a third client's
    // transaction has the first; that transaction ends inside B's lease, so B's
    // fenced write lands on the first connection and its S_2 is already there.
    // Returns the error of B's 5th turn and whether its lease was left live.
    static Object[] preparedTurns(String url, String params, String tag) throws Exception {
        // server connections without statements from earlier clients
        bouncerAdmin("RECONNECT");
        String a = "jdbc-prep-a-" + tag + "-" + RUN;
        String b = "jdbc-prep-b-" + tag + "-" + RUN;
        newJob(a);
        newJob(b);
        try (Connection wa = connect(url, params); Connection wb = connect(url, params);
                Connection other = connect(url, "prepareThreshold=0")) {
            for (int turn = 0; turn < 5; turn++) Worker.runJob(wa, a, "jdbc-a", lease -> true);
            for (int turn = 0; turn < 4; turn++) Worker.runJob(wb, b, "jdbc-b", lease -> true);
            other.setAutoCommit(false);
            rows(other, "SELECT 1");
            Exception e = errorOf(() -> Worker.runJob(wb, b, "jdbc-b", lease -> {
                other.commit();
                return true;
            }));
            boolean stranded = !live("job:" + b).isEmpty();
            cleanUp("job:" + b);
            return new Object[] { e, stranded, job(b).get(1) };
        }
    }

    // one command on pgbouncer's admin console, which speaks the simple query protocol only
    static void bouncerAdmin(String command) throws Exception {
        Process p = new ProcessBuilder("psql", "-X", "-q", "-d", System.getenv("DLOCK_BOUNCER_ADMIN"), "-c", command)
            .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        if (p.waitFor() != 0) throw new IllegalStateException("pgbouncer " + command + ": " + out);
    }

    static void preparedStatements() throws Exception {
        String bouncer = System.getenv("DLOCK_BOUNCER_URL");
        Object[] r = preparedTurns(bouncer, "", "default");
        Exception e = (Exception) r[0];
        String state = e instanceof SQLException ? ((SQLException) e).getSQLState() : null;
        ok("42P05".equals(state) && (Boolean) r[1] && r[2].equals("4"),
            "[pgbouncer] prepareThreshold trap: with the default (5), a worker's fenced write fails in the middle of its lease"
                + " (42P05: prepared statement already exists) and the lease stays live",
            e + " stranded=" + r[1] + " runs=" + r[2]);
        r = preparedTurns(bouncer, "prepareThreshold=0", "zero");
        ok(r[0] == null && !(Boolean) r[1] && r[2].equals("5"),
            "[pgbouncer] prepareThreshold trap avoided: with prepareThreshold=0 the same turns all complete",
            r[0] + " stranded=" + r[1] + " runs=" + r[2]);
        r = preparedTurns(System.getenv("DLOCK_DIRECT_URL"), "", "direct");
        ok(r[0] == null && r[2].equals("5"),
            "[direct] the default prepareThreshold works on connections of one's own", r[0]);
    }

    public static void main(String[] args) throws Exception {
        String direct = System.getenv("DLOCK_DIRECT_URL");
        String bouncer = System.getenv("DLOCK_BOUNCER_URL");
        su = connect(System.getenv("DLOCK_SUPER_URL"), "");
        ThrowingRunnable[] parts = {
            () -> recipe("direct", direct, ""),
            () -> recipe("pgbouncer", bouncer, "prepareThreshold=0"),
            DriverTest::version11,
            () -> ttlAsText("direct", direct, ""),
            () -> ttlAsText("pgbouncer", bouncer, "prepareThreshold=0"),
            () -> autoCommitOff("direct", direct, ""),
            () -> autoCommitOff("pgbouncer", bouncer, "prepareThreshold=0"),
            DriverTest::preparedStatements,
        };
        for (ThrowingRunnable part : parts) {
            Exception e = errorOf(part);
            if (e != null) ok(false, "no unexpected error: " + e, null);
        }
        su.close();
        ok(checks > 0, checks + " checks ran", null);
        System.exit(failures == 0 ? 0 : 1);
    }
}
