// A worker writing through a HikariCP pool (Spring Boot's default) of
// PgJDBC connections through fencegate's PostgreSQL listener, as
// TestDrivers runs it:
//   java -cp HikariCP.jar:slf4j-api.jar:slf4j-nop.jar:postgresql.jar HikariWorker.java <port> <fence> <token> <set-token|-> <table> <tag>
// It opens a pool of two with the fence and token in the startup options
// (connectionInitSql SETs fencegate.token on each new connection unless
// set-token is -), then writes rows whose v starts with tag: statements on
// a borrowed connection, a transaction, a transaction left open when its
// connection goes back to the pool (Hikari rolls it back), two
// connections at once, a serializable connection (Hikari resets the
// isolation as it takes it back), and a borrow after the pool's validation
// window (isValid). It prints "OK <rows with tag>" or
// "ERR <SQLSTATE> <message>".
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

public class HikariWorker {
    static String ins;

    static void insert(Connection c, String v) throws SQLException {
        try (PreparedStatement s = c.prepareStatement(ins)) {
            s.setString(1, v);
            s.executeUpdate();
        }
    }

    public static void main(String[] a) throws Exception {
        String port = a[0], fence = a[1], token = a[2], setToken = a[3], table = a[4], tag = a[5];
        ins = "INSERT INTO " + table + " (v) VALUES (?)";
        HikariConfig cfg = new HikariConfig();
        cfg.setJdbcUrl("jdbc:postgresql://127.0.0.1:" + port + "/postgres");
        cfg.setUsername("worker");
        cfg.addDataSourceProperty("sslmode", "disable");
        cfg.addDataSourceProperty("options", "-c fencegate.fence=" + fence + " -c fencegate.token=" + token);
        for (int i = 6; i < a.length; i++) { // PgJDBC properties
            String[] kv = a[i].split("=", 2);
            cfg.addDataSourceProperty(kv[0], kv[1]);
        }
        cfg.setMaximumPoolSize(2);
        cfg.setMinimumIdle(0);
        if (!setToken.equals("-")) {
            cfg.setConnectionInitSql("SET fencegate.token = " + Long.parseUnsignedLong(setToken));
        }
        try (HikariDataSource ds = new HikariDataSource(cfg)) {
            try (Connection c = ds.getConnection()) {
                insert(c, tag + "-1");
                insert(c, tag + "-2");
            }
            try (Connection c = ds.getConnection()) {
                c.setAutoCommit(false);
                insert(c, tag + "-tx");
                c.commit();
            }
            try (Connection c = ds.getConnection()) {
                c.setAutoCommit(false);
                insert(c, tag + "-left-open"); // rolled back by the pool
            }
            try (Connection c1 = ds.getConnection(); Connection c2 = ds.getConnection()) {
                insert(c1, tag + "-c1");
                insert(c2, tag + "-c2");
            }
            try (Connection c = ds.getConnection()) {
                c.setTransactionIsolation(Connection.TRANSACTION_SERIALIZABLE);
                c.setAutoCommit(false);
                insert(c, tag + "-ser");
                c.commit();
            }
            Thread.sleep(600); // past the 500 ms in which Hikari skips isValid
            try (Connection c = ds.getConnection();
                 PreparedStatement s = c.prepareStatement("SELECT count(*) FROM " + table + " WHERE v LIKE ?")) {
                s.setString(1, tag + "-%");
                try (ResultSet r = s.executeQuery()) {
                    r.next();
                    System.out.println("OK " + r.getInt(1));
                }
            }
        } catch (RuntimeException e) { // the pool's, with the SQLException as its cause
            Throwable t = e;
            while (t != null && !(t instanceof SQLException)) {
                t = t.getCause();
            }
            if (t == null) {
                throw e;
            }
            SQLException s = (SQLException) t;
            System.out.println("ERR " + s.getSQLState() + " " + s.getMessage().split("\n")[0]);
        } catch (SQLException e) {
            System.out.println("ERR " + e.getSQLState() + " " + e.getMessage().split("\n")[0]);
        }
    }
}
