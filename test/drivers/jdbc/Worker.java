// dlock from pgjdbc: take a lease, do the job, record it with a fenced write,
// release. The connection runs in autocommit mode, so every call is its own
// transaction; behind pgbouncer in transaction mode, connect with
// prepareThreshold=0 (jdbc:postgresql://host:6432/db?prepareThreshold=0).
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

public final class Worker {
    public record Lease(String name, String owner, long token) {}

    public static final class LeaseLost extends Exception {
        LeaseLost(Lease lease) { super("lease \"" + lease.name() + "\" lost"); }
    }

    public interface Job<T> { T run(Lease lease) throws Exception; }

    // A grant left uncommitted holds the name past its ttl, unseen in dlock.leases.
    private static void requireAutoCommit(Connection db) throws SQLException {
        if (!db.getAutoCommit()) throw new IllegalStateException("dlock calls need autocommit");
    }

    private static Lease leaseFrom(PreparedStatement ps) throws SQLException {
        try (ResultSet rs = ps.executeQuery()) {
            if (!rs.next()) return null;            // refused (dlock 1.2: no row)
            long token = rs.getLong("token");
            if (rs.wasNull()) return null;          // refused by a database still at 1.1
            return new Lease(rs.getString("name"), rs.getString("owner"), token);
        }
    }

    // Never waits: a lease, or null when it is not free. The ttl is text such as
    // "30s", so the SQL casts it: ?::interval.
    public static Lease tryAcquire(Connection db, String name, String ttl, String owner)
            throws SQLException {
        requireAutoCommit(db);
        try (PreparedStatement ps = db.prepareStatement(
                "SELECT name, owner, token FROM dlock.try_acquire(?, ?::interval, ?)")) {
            ps.setString(1, name);
            ps.setString(2, ttl);
            ps.setString(3, owner);
            return leaseFrom(ps);
        }
    }

    // Waits in arrival order for at most timeout; then 55P03, and nothing is
    // granted afterwards.
    public static Lease acquire(Connection db, String name, String ttl, String owner,
            String timeout) throws SQLException {
        requireAutoCommit(db);
        try (PreparedStatement ps = db.prepareStatement(
                "SELECT name, owner, token FROM dlock.acquire(?, ?::interval, ?, timeout => ?::interval)")) {
            ps.setString(1, name);
            ps.setString(2, ttl);
            ps.setString(3, owner);
            ps.setString(4, timeout);
            return leaseFrom(ps);
        }
    }

    // true: released; false: it had already ended (expired, taken over)
    public static boolean release(Connection db, Lease lease) throws SQLException {
        try (PreparedStatement ps = db.prepareStatement("SELECT dlock.release(?, ?)")) {
            ps.setString(1, lease.name());
            ps.setString(2, lease.owner());
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getBoolean(1);
            }
        }
    }

    // The guarded write changes its row only while the lease is live. No row
    // changed: the lease is lost, so stop and write nothing more under it.
    public static void recordRun(Connection db, Lease lease, String jobId)
            throws SQLException, LeaseLost {
        try (PreparedStatement ps = db.prepareStatement(
                "UPDATE jobs SET done_by = ?, runs = runs + 1 WHERE id = ? AND dlock.fence(?, ?)")) {
            ps.setLong(1, lease.token());
            ps.setString(2, jobId);
            ps.setString(3, lease.name());
            ps.setLong(4, lease.token());
            if (ps.executeUpdate() == 0) throw new LeaseLost(lease);
        }
    }

    public static <T> T withLease(Connection db, Lease lease, String jobId, Job<T> job)
            throws Exception {
        try {
            T result = job.run(lease);
            recordRun(db, lease, jobId);
            return result;
        } finally {
            release(db, lease);
        }
    }

    // One turn of the worker loop: wait up to 5 s for the job's lease, run it.
    public static <T> T runJob(Connection db, String jobId, String owner, Job<T> job)
            throws Exception {
        Lease lease = acquire(db, "job:" + jobId, "30s", owner, "5s");
        return withLease(db, lease, jobId, job);
    }

    // Or skip a job whose lease someone else holds: null, and job is not run.
    public static <T> T tryRunJob(Connection db, String jobId, String owner, Job<T> job)
            throws Exception {
        Lease lease = tryAcquire(db, "job:" + jobId, "30s", owner);
        if (lease == null) return null;
        return withLease(db, lease, jobId, job);
    }
}
