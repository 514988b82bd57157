package relay

import (
	"regexp"
	"strings"
	"testing"
)

// Every query of sql/ renders: no slot, argument or comment is left,
// and the table check names the table it is given.
func TestStatementsRender(t *testing.T) {
	t.Parallel()
	leftover := regexp.MustCompile(`TEMPLATE|@[A-Za-z_]|--|/\*`)
	check, err := checkTableSQL(`app.Out"box`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(check, `"app"."Out""box"`) {
		t.Errorf("CheckTable does not name the table: %q", check)
	}
	for name, sql := range map[string]string{"PoolSettings": poolSettings.SQL, "ListenerSettings": listenerSettings.SQL, "CheckTable": check} {
		if sql == "" || leftover.MatchString(regexp.MustCompile(`'[^']*'|"[^"]*"`).ReplaceAllString(sql, "")) {
			t.Errorf("%s rendered as %q", name, sql)
		}
	}
}
