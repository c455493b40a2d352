-- The role fencegate serves as: not a superuser, not the owner of
-- fencegate's schema (the migrate service grants it fencegate_runtime).
-- The role clients of the PostgreSQL listener log in as: no fencegate
-- role at all (the listener refuses app_gw, which could move any fence's
-- mark). The tables workers write through fencegate are the application's;
-- for trying it out, one that both may write.
CREATE ROLE app_gw LOGIN PASSWORD 'app_gw';
CREATE ROLE app LOGIN PASSWORD 'app';
CREATE TABLE jobs (id bigint PRIMARY KEY, state text NOT NULL);
GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO app_gw, app;
