-- The role fencegate serves as: not a superuser, not the owner of
-- fencegate's schema (the migrate service grants it fencegate_runtime).
-- The tables workers write through fencegate are the application's; for
-- trying it out, one that app_gw may write.
CREATE ROLE app_gw LOGIN PASSWORD 'app_gw';
CREATE TABLE jobs (id bigint PRIMARY KEY, state text NOT NULL);
GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO app_gw;
