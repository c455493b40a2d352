# A worker writing with Perl's DBI and DBD::Pg (over libpq; Debian's
# libdbd-pg-perl) through fencegate's PostgreSQL listener, as TestDrivers
# runs it:
#   perl dbdpg_worker.pl <port> <fence> <token> <set-token|-> <table> <tag>
# It connects with the fence and token in the DSN's options, SETs
# fencegate.token first unless set-token is -, then writes rows whose v
# starts with tag: with AutoCommit off (DBD::Pg sends its own BEGIN before
# the transaction's first statement), a statement prepared on the server
# and run twice, a savepoint rolled back, COPY FROM STDIN
# (pg_putcopydata), a rolled-back transaction, and with AutoCommit on a
# do() of a query with its values inline. It prints "OK <rows with tag>"
# or "ERR <SQLSTATE> <message>".
use strict;
use warnings;
use DBI;

my ($port, $fence, $token, $set_token, $table, $tag) = @ARGV;
my $dbh = DBI->connect(
    "dbi:Pg:host=127.0.0.1;port=$port;dbname=postgres;options='-c fencegate.fence=$fence -c fencegate.token=$token'",
    "worker", "", {AutoCommit => 1, RaiseError => 1, PrintError => 0});
if (!$dbh) {
    my $msg = (split /\n/, $DBI::errstr // "")[0] // "";
    $msg =~ s/^(ERROR|FATAL): +//;
    print "ERR ", ($DBI::state // ""), " $msg\n";
    exit 0;
}
eval {
    $dbh->do("SET fencegate.token = " . $dbh->quote($set_token)) if $set_token ne "-";
    $dbh->{AutoCommit} = 0;
    my $ins = $dbh->prepare("INSERT INTO $table (v) VALUES (?)");
    $ins->execute("$tag-prep1");
    $ins->execute("$tag-prep2");
    $dbh->pg_savepoint("sp");
    $ins->execute("$tag-undone");
    $dbh->pg_rollback_to("sp");
    $dbh->commit;

    $dbh->do("COPY $table (v) FROM STDIN");
    $dbh->pg_putcopydata("$tag-copy1\n");
    $dbh->pg_putcopydata("$tag-copy2\n");
    $dbh->pg_putcopyend();
    $dbh->commit;

    $ins->execute("$tag-rolledback");
    $dbh->rollback;

    $dbh->{AutoCommit} = 1;
    $dbh->do("INSERT INTO $table (v) VALUES (" . $dbh->quote("$tag-inline") . ")");
    my ($n) = $dbh->selectrow_array("SELECT count(*) FROM $table WHERE v LIKE ?", undef, "$tag-%");
    print "OK $n\n";
    1;
} or do {
    my $msg = (split /\n/, $dbh->errstr // "$@")[0];
    $msg =~ s/^(ERROR|FATAL): +//;
    print "ERR ", $dbh->state, " $msg\n";
    eval { $dbh->rollback } unless $dbh->{AutoCommit};
};
$dbh->disconnect;
