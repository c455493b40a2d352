-- Ending a PostgreSQL listener session whose statement still runs.
--
-- When fencegate ends a listener session with a statement still running
-- (its term ended, or its client went away mid-statement), it closes the
-- server connection and cancels the statement. Neither stops a statement
-- that traps the cancel (a DO block with EXCEPTION WHEN query_canceled in
-- a loop): the backend notices a closed connection only when it next
-- talks to its client, so it runs on, holding its transaction's locks,
-- the fence's row among them, and the next leader's first write waits
-- for it (found by a review on 2026-11-28).
--
-- end_session terminates such a backend, which no handler can trap (the
-- backend exits with FATAL and its transaction rolls back), and ends its
-- binding. It terminates only a session bind_session bound, still logged
-- in as the login it was bound with, and never a superuser's: fencegate's
-- own login may stop the sessions of its listener and no others. (A
-- session's start time, which would tell a later session given the same
-- process id apart, is hidden from fencegate_owner, who is not a member
-- of pg_read_all_stats; fencegate ends a session as soon as it closed
-- it.)
--
-- Terminating another role's backend needs pg_signal_backend, which
-- fencegate_owner, who owns the function, is given here. Memberships are
-- cluster-wide, as roles are (003): a migration of another database of
-- the cluster may grant it between the test and the GRANT, and the
-- loser's duplicate is then ignored.
DO $$
BEGIN
    IF NOT pg_catalog.pg_has_role('fencegate_owner', 'pg_signal_backend', 'MEMBER') THEN
        BEGIN
            GRANT pg_signal_backend TO fencegate_owner;
        EXCEPTION WHEN unique_violation THEN
            NULL;
        END;
    END IF;
END
$$;

CREATE FUNCTION fencegate.end_session(session_pid integer)
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
                      AND r.rolname OPERATOR(pg_catalog.=) b.login AND NOT r.rolsuper) THEN
        RETURN false;
    END IF;
    RETURN pg_catalog.pg_terminate_backend(session_pid);
END
$$;
ALTER FUNCTION fencegate.end_session(integer) OWNER TO fencegate_owner;
REVOKE ALL ON FUNCTION fencegate.end_session(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fencegate.end_session(integer) TO fencegate_runtime;
COMMENT ON FUNCTION fencegate.end_session(integer) IS
    'fencegate: terminate a PostgreSQL listener session''s backend and end its binding; fencegate_runtime only';
