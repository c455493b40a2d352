-- The table every example writes, and the right to write it for the role
-- `fencegate dev` serves PostgreSQL writes as.
CREATE TABLE IF NOT EXISTS example_writes (
	id      bigserial PRIMARY KEY,
	example text   NOT NULL,
	worker  text   NOT NULL,
	token   bigint NOT NULL
);
GRANT SELECT, INSERT ON example_writes TO fencegate_dev;
GRANT USAGE ON SEQUENCE example_writes_id_seq TO fencegate_dev;
