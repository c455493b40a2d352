package sqlcheck_test

import (
	"fmt"
	"time"

	"github.com/fencegate/fencegate/proxy/postgres/sqlcheck"
)

func Example() {
	c, err := sqlcheck.New(sqlcheck.Config{MaxSleep: time.Second})
	if err != nil {
		panic(err)
	}
	st, err := c.Check("  UPDATE jobs SET state = $2 WHERE id = $1 RETURNING state; -- done")
	fmt.Printf("%s returns rows: %v, text: %q, err: %v\n", st.Kind, st.ReturnsRows, st.Text, err)

	_, err = c.Check("-- x\rCOMMIT\nWORK")
	fmt.Println(err)

	_, err = c.Check(`SELECT * FROM U&"fenc\0065gate".fences`)
	fmt.Println(err)
	// Output:
	// UPDATE returns rows: true, text: "UPDATE jobs SET state = $2 WHERE id = $1 RETURNING state", err: <nil>
	// sqlcheck: COMMIT at byte 5: ends or splits the write's transaction, which must hold the fence check and the write together
	// sqlcheck: fencegate.fences at byte 14: the fencegate schema holds the fences; caller SQL must not name it
}
