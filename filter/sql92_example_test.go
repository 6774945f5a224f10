package filter_test

import (
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/filter"
)

func ExampleCompileSQL92() {
	f, err := filter.CompileSQL92("TAGS IN ('TagA', 'TagB') AND price BETWEEN 10 AND 20 AND region <> 'cn'")
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Evaluate(map[string]string{"TAGS": "TagA", "price": "15", "region": "eu"}))
	fmt.Println(f.Evaluate(map[string]string{"TAGS": "TagA", "price": "15"}))                    // region missing: UNKNOWN
	fmt.Println(f.Evaluate(map[string]string{"TAGS": "TagA", "price": "cheap", "region": "eu"})) // not a number: error

	_, err = filter.CompileSQL92("price BETWEEN 20 AND 10")
	var se *filter.SQLSyntaxError
	fmt.Println(errors.As(err, &se), se.Pos, err)
	// Output:
	// true
	// false
	// false
	// true 14 sql92 syntax error at byte 14: BETWEEN lower bound 20 is greater than upper bound 10
}
