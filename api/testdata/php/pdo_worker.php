<?php
// A worker writing with PHP's PDO (pdo_pgsql over libpq; Debian's
// php-pgsql) through fencegate's PostgreSQL listener, as api/pgwire's
// TestDrivers runs it:
//   php pdo_worker.php <port> <fence> <token> <set-token|-> <table> <tag>
// It connects with the fence and token in the DSN's options, SETs
// fencegate.token first unless set-token is -, then writes rows whose v
// starts with tag: a server-side prepared statement run twice, a
// transaction begun with beginTransaction and made serializable with SET
// TRANSACTION, COPY FROM STDIN (pgsqlCopyFromArray), a rolled-back
// transaction, and an emulated prepare (the values in the query text). It
// prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
[, $port, $fence, $token, $setToken, $table, $tag] = $argv;
try {
    $db = new PDO("pgsql:host=127.0.0.1;port=$port;dbname=postgres;user=worker;" .
        "options='-c fencegate.fence=$fence -c fencegate.token=$token'");
    $db->setAttribute(PDO::ATTR_ERRMODE, PDO::ERRMODE_EXCEPTION);
    if ($setToken !== '-') {
        $db->exec("SET fencegate.token = '$setToken'");
    }
    $ins = $db->prepare("INSERT INTO $table (v) VALUES (?)");
    $ins->execute(["$tag-prep1"]);
    $ins->execute(["$tag-prep2"]);

    $db->beginTransaction();
    $db->exec('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE');
    $ins->execute(["$tag-ser"]);
    $db->commit();

    $db->beginTransaction();
    $db->pgsqlCopyFromArray($table, ["$tag-copy1", "$tag-copy2"], "\t", "\\\\N", 'v');
    $db->commit();

    $db->beginTransaction();
    $ins->execute(["$tag-rolledback"]);
    $db->rollBack();

    $db->setAttribute(PDO::ATTR_EMULATE_PREPARES, true);
    $db->prepare("INSERT INTO $table (v) VALUES (?)")->execute(["$tag-emulated"]);
    $db->setAttribute(PDO::ATTR_EMULATE_PREPARES, false);

    $n = $db->prepare("SELECT count(*) FROM $table WHERE v LIKE ?");
    $n->execute(["$tag-%"]);
    echo 'OK ', $n->fetchColumn(), "\n";
} catch (PDOException $e) {
    $state = $e->errorInfo[0] ?? $e->getCode();
    $msg = $e->errorInfo[2] ?? $e->getMessage();
    $msg = preg_replace('/^(ERROR|FATAL): +/', '', strtok($msg, "\n"));
    echo "ERR $state $msg\n";
}
