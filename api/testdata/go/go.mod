// Go clients the listeners' tests drive as separate programs, kept out of
// fencegate's own go.mod: lib/pq and GORM (api/pgwire's TestDrivers),
// redigo and rueidis (api/resp's TestClientLibraries).
module github.com/fencegate/fencegate/api/testdata/go

go 1.26.8

require (
	github.com/gomodule/redigo v1.9.3
	github.com/jackc/pgx/v5 v5.13.0
	github.com/lib/pq v1.12.3
	github.com/redis/rueidis v1.0.79
	gorm.io/driver/postgres v1.6.3
	gorm.io/gorm v1.31.2
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
