-- bind_session binds only a live backend of this database, logged in as
-- the login it names.
--
-- Version 8 bound any process id under any login it was given, and
-- unbind and end took a process id alone: a member of fencegate_runtime
-- (the login of any fencegate sharing the cluster) could bind a session
-- that was never the listener's to a fence, so that its statements passed
-- advance_session's check as its own. fencegate's login may already run
-- advance, so this widened nothing it could not do; but a binding is the
-- database's only proof that a session is a listener session (end_session
-- terminates what it proves), and it should prove what it says.
--
-- From here bind_session refuses, with SQLSTATE 22023, a process that is
-- not a backend connected to this database (pg_stat_get_activity's datid
-- and usesysid, which fencegate_owner may read of any backend) as login.
-- The listener binds its server connection once the login is accepted,
-- so a listener session always passes. Which logins the listener serves
-- stays the listener's to decide (it refuses one that may run fencegate's
-- functions unless --insecure; end_session, version 13, never terminates
-- one). It costs one read of the backend's status per listener
-- connection.
CREATE OR REPLACE FUNCTION fencegate.bind_session(session_pid integer, login name, fence_name text, term_table text, lock_key text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF session_pid IS NULL OR login IS NULL OR fence_name IS NULL OR fence_name OPERATOR(pg_catalog.=) ''
       OR (term_table IS NULL) OPERATOR(pg_catalog.<>) (lock_key IS NULL) THEN
        RAISE EXCEPTION 'invalid session binding: process %, login %, fence %, term table %, lock key %',
                        session_pid, login, fence_name, term_table, lock_key
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Rows another bind or unbind is deleting are skipped, not waited
    -- for: binds at once neither queue nor deadlock on them.
    DELETE FROM fencegate.sessions AS s
     WHERE s.pid IN (SELECT d.pid FROM fencegate.sessions AS d
                      WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_stat_get_activity(NULL) AS a
                                         WHERE a.pid OPERATOR(pg_catalog.=) d.pid)
                      FOR UPDATE SKIP LOCKED);
    -- After the DELETE: the backends' status is read once per transaction
    -- (a snapshot, taken by the first read), and the DELETE's must be no
    -- older than its statement's, or it would drop the binding of a
    -- session that began, and was bound, in between.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_stat_get_activity(session_pid) AS a
                     JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.usesysid
                    WHERE a.pid OPERATOR(pg_catalog.=) session_pid
                      AND a.datid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                                                           WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                      AND r.rolname OPERATOR(pg_catalog.=) login) THEN
        RAISE EXCEPTION 'invalid session binding: process % is not a session of this database logged in as %',
                        session_pid, login
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO fencegate.sessions AS s (pid, login, fence, term_table, lock_key, bound_at)
    VALUES (session_pid, login, fence_name, term_table, lock_key, pg_catalog.now())
    ON CONFLICT (pid) DO UPDATE
        SET login = excluded.login, fence = excluded.fence, term_table = excluded.term_table,
            lock_key = excluded.lock_key, bound_at = excluded.bound_at;
END
$$;
ALTER FUNCTION fencegate.bind_session(integer, name, text, text, text) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.bind_session(integer, name, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.bind_session(integer, name, text, text, text) TO fencegate_runtime;
