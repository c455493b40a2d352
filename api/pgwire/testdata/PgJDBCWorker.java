// A worker writing with PgJDBC (extended protocol only: prepared
// statements, batches, savepoints) through fencegate's PostgreSQL
// listener, as TestDrivers runs it:
//   java -cp postgresql.jar PgJDBCWorker.java <port> <fence> <token> <set-token|-> <table> <tag> [property=value ...]
// It connects with the fence and token in the startup options, SETs
// fencegate.token first unless set-token is -, then writes rows whose v
// starts with tag. It prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.Properties;

public class PgJDBCWorker {
    public static void main(String[] a) {
        String port = a[0], fence = a[1], token = a[2], setToken = a[3], table = a[4], tag = a[5];
        Properties p = new Properties();
        p.setProperty("user", "worker");
        p.setProperty("sslmode", "disable");
        p.setProperty("options", "-c fencegate.fence=" + fence + " -c fencegate.token=" + token);
        p.setProperty("prepareThreshold", "2"); // named server-side statements from the second run
        for (int i = 6; i < a.length; i++) {
            String[] kv = a[i].split("=", 2);
            p.setProperty(kv[0], kv[1]);
        }
        String ins = "INSERT INTO " + table + " (v) VALUES (?)";
        try (Connection c = DriverManager.getConnection("jdbc:postgresql://127.0.0.1:" + port + "/postgres", p)) {
            if (!setToken.equals("-")) {
                try (Statement s = c.createStatement()) {
                    s.execute("SET fencegate.token = " + Long.parseUnsignedLong(setToken));
                }
            }
            try (PreparedStatement s = c.prepareStatement(ins)) {
                for (int i = 0; i < 3; i++) {
                    s.setString(1, tag + "-" + i);
                    s.executeUpdate();
                }
            }
            c.setAutoCommit(false);
            try (PreparedStatement s = c.prepareStatement(ins)) {
                s.setString(1, tag + "-tx");
                s.executeUpdate();
                for (int i = 0; i < 3; i++) {
                    s.setString(1, tag + "-b" + i);
                    s.addBatch();
                }
                s.executeBatch();
            }
            c.commit();
            try (Statement s = c.createStatement()) {
                s.execute("INSERT INTO " + table + " (v) VALUES ('" + tag + "-st')");
                Savepoint sp = c.setSavepoint();
                s.execute("INSERT INTO " + table + " (v) VALUES ('" + tag + "-rolled-back')");
                c.rollback(sp);
            }
            c.commit();
            c.setAutoCommit(true);
            try (PreparedStatement s = c.prepareStatement(ins)) {
                for (int i = 0; i < 2; i++) {
                    s.setString(1, tag + "-ab" + i);
                    s.addBatch();
                }
                s.executeBatch();
            }
            try (PreparedStatement s = c.prepareStatement("SELECT count(*) FROM " + table + " WHERE v LIKE ?")) {
                s.setString(1, tag + "-%");
                try (ResultSet r = s.executeQuery()) {
                    r.next();
                    System.out.println("OK " + r.getInt(1));
                }
            }
        } catch (SQLException e) {
            System.out.println("ERR " + e.getSQLState() + " " + e.getMessage().split("\n")[0]);
        }
    }
}
