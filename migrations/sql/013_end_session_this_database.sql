-- end_session terminates only a backend of this database whose login may
-- not run fencegate's functions.
--
-- Version 9's proof that a backend is a listener session was its row of
-- fencegate.sessions, which fencegate_runtime writes (bind_session) for
-- any process id and login it names. Roles and pg_signal_backend are
-- cluster-wide: a member of fencegate_runtime bound a backend of another
-- database, another application's, under the login it read from
-- pg_stat_activity, and terminated it (found by a review on 2026-11-29,
-- TestRedTeam20EndSessionAnyBackend).
--
-- From here end_session also requires the backend to be connected to
-- this database (pg_stat_get_activity's datid, which fencegate_owner may
-- read of any backend) and its login not to be a member of
-- fencegate_runtime (a fencegate's own pool, of this deployment or
-- another's, is never a listener session). A listener session always is
-- both: the listener serves --postgres-dsn's database only and refuses a
-- login that may run fencegate's functions (api/pgwire). bind_session is
-- as in version 8.
CREATE OR REPLACE FUNCTION fencegate.end_session(session_pid integer)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b fencegate.sessions;
BEGIN
    DELETE FROM fencegate.sessions AS s WHERE s.pid OPERATOR(pg_catalog.=) session_pid RETURNING * INTO b;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_stat_get_activity(session_pid) AS a
                     JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.usesysid
                    WHERE a.pid OPERATOR(pg_catalog.=) session_pid
                      AND a.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                                                           WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                      AND r.rolname OPERATOR(pg_catalog.=) b.login AND NOT r.rolsuper
                      AND NOT pg_catalog.pg_has_role(r.oid, 'fencegate_runtime', 'MEMBER')) THEN
        RETURN false;
    END IF;
    RETURN pg_catalog.pg_terminate_backend(session_pid);
END
$$;
ALTER FUNCTION fencegate.end_session(integer) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.end_session(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.end_session(integer) TO fencegate_runtime;
