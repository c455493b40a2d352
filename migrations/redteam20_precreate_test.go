package migrations_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/migrations"
)

// TestRedTeam20PrecreatedSchemaVersionTrigger: a role that may create
// schemas in the database (its owner, as an application's role often is,
// or any role given CREATE on it) prepares the database before the first
// `fencegate migrate`: it creates schema fencegate itself, and in it the
// version table tern would create (fencegate.schema_version, version 0)
// with a trigger whose function is its own. Apply runs CREATE SCHEMA IF
// NOT EXISTS and tern finds the version table there, so neither is
// created, and nothing checks who owns them. tern then updates the
// version after each migration, as the migrating role (a superuser, as
// docs/SECURITY.md runs it): the trigger runs the hostile role's code
// with the superuser's rights. Migration 003 hands the schema to
// fencegate_owner but not the version table, which the hostile role
// still owns afterwards (it can set any version, so later migrations,
// security fixes among them, are skipped as "migrated by a newer
// fencegate").
//
// What happened: Apply succeeds; the trigger made the hostile role a
// member of fencegate_owner (any superuser statement would do as well:
// ALTER ROLE ... SUPERUSER), with which it lowers any fence's mark; the
// hostile role still owns fencegate.schema_version.
//
// What should happen: Apply refuses a schema fencegate (or objects in
// it: the version table, functions, types) owned by a role other than the
// migrating role or fencegate_owner, and the hostile role gains nothing.
func TestRedTeam20PrecreatedSchemaVersionTrigger(t *testing.T) {
	ctx := t.Context()
	dsn := freshDB(t)
	admin := connect(t, dsn)
	hostile := fmt.Sprintf("rt20_dbowner_%d", dbSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE ROLE "+hostile+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "GRANT CREATE ON DATABASE "+pgx.Identifier{admin.Config().Database}.Sanitize()+" TO "+hostile); err != nil {
		t.Fatal(err)
	}
	cfg := admin.Config().Copy()
	cfg.User = hostile
	h, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.WithoutCancel(ctx))
	for _, sql := range []string{
		"CREATE SCHEMA fencegate",
		"CREATE TABLE fencegate.schema_version (version int4 NOT NULL)",
		"INSERT INTO fencegate.schema_version VALUES (0)",
		`CREATE FUNCTION fencegate.rt20_hook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)
       AND EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'fencegate_owner') THEN
        EXECUTE pg_catalog.format('GRANT fencegate_owner TO %I', '` + hostile + `');
    END IF;
    RETURN NEW;
END $$`,
		"CREATE TRIGGER rt20 BEFORE UPDATE ON fencegate.schema_version FOR EACH ROW EXECUTE FUNCTION fencegate.rt20_hook()",
	} {
		if _, err := h.Exec(ctx, sql); err != nil {
			t.Fatalf("hostile: %s: %v", sql, err)
		}
	}
	// The operator migrates, as a superuser.
	applyErr := migrations.Apply(ctx, admin)
	t.Logf("Apply on the prepared database: %v", applyErr)
	if _, err := admin.Exec(ctx, "SELECT fencegate.advance('rt20-victim', 100)"); err != nil && applyErr == nil {
		t.Fatal(err)
	}

	var member bool
	// fencegate_owner (cluster-wide) may not exist yet when Apply refused.
	if err := admin.QueryRow(ctx, `SELECT CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = 'fencegate_owner')
	                                      THEN pg_has_role($1, 'fencegate_owner', 'MEMBER') ELSE false END`, hostile).Scan(&member); err != nil {
		t.Fatal(err)
	}
	if member {
		// What it can do with that: lower any fence's mark.
		_, err := h.Exec(ctx, "SET ROLE fencegate_owner; UPDATE fencegate.fences SET token = 1 WHERE name = 'rt20-victim'; RESET ROLE")
		t.Errorf("HOLE: Apply (err %v) ran the trigger of a role that prepared the database as the migrating superuser: %s is now a member of fencegate_owner; "+
			"its update of the victim's mark: err %v, mark now %d", applyErr, hostile, err, redteam2Mark(t, admin, "rt20-victim"))
	}
	var owner string
	if err := admin.QueryRow(ctx, "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass('fencegate.schema_version')").Scan(&owner); err == nil && owner == hostile && applyErr == nil {
		t.Errorf("HOLE: Apply succeeded, and fencegate.schema_version is still owned by %s, who may set any version (later migrations then never run)", hostile)
	}
}
