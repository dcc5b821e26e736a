package sqlstore

import (
	"io/fs"
	"path"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/outbox-go/outbox"
)

// TestSQLFilesUsed checks that every embedded .sql file belongs to a
// dialect and names one of its statements or partials, that every partial
// is included by some statement, and that every statement a dialect's claim
// design needs is there.
func TestSQLFilesUsed(t *testing.T) {
	err := fs.WalkDir(sqlFS, "sql", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		parts := strings.Split(p, "/")
		if _, ok := dialects[parts[1]]; !ok {
			t.Errorf("%s: no dialect %q", p, parts[1])
		}
		if len(parts) > 3 && parts[2] != "_partials" && parts[2] != "keyorder" {
			t.Errorf("%s: a folder no dialect reads", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range dialects {
		var st statements
		var ko keyOrderSQL
		src, err := loadSQL(d, &st, &ko)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for p := range src.partials {
			if !src.included[p] {
				t.Errorf("%s: partial %s is included by no statement", name, p)
			}
		}
		for _, v := range []reflect.Value{reflect.ValueOf(st), reflect.ValueOf(ko)} {
			for i := 0; i < v.NumField(); i++ {
				f := v.Type().Field(i)
				if needs(f.Tag.Get("need"), d.claims.need) && v.Field(i).String() == "" {
					t.Errorf("%s: %s is empty", name, f.Name)
				}
			}
		}
	}
}

// TestNoPlaceholderLeft compiles every dialect for default, custom and
// qualified table names and looks for a {{...}} left in any statement or
// partial ({{ids}} is expanded per call) or in a migration, and for the
// default table's name where the tables are named otherwise.
func TestNoPlaceholderLeft(t *testing.T) {
	for name := range dialects {
		for _, tables := range []outbox.Tables{{}, {Outbox: "ev_out", Inbox: "ev_in"}, {Outbox: "ev.out", Inbox: "ev2.inbox"}} {
			if name == "sqlite" && strings.Contains(tables.Outbox, ".") {
				continue
			}
			_, c, _, err := compileFor(name, tables)
			if err != nil {
				t.Fatalf("%s %+v: %v", name, tables, err)
			}
			def := c.quote("outbox")
			def = def[:len(def)-1]
			check := func(what, s string) {
				if strings.Contains(strings.ReplaceAll(s, "{{ids}}", ""), "{{") {
					t.Errorf("%s %+v: %s keeps a placeholder:\n%s", name, tables, what, s)
				}
				if tables.Outbox != "" && strings.Contains(s, def) {
					t.Errorf("%s %+v: %s names the default table:\n%s", name, tables, what, s)
				}
			}
			for _, v := range []reflect.Value{reflect.ValueOf(c.statements), reflect.ValueOf(c.ko)} {
				for i := 0; i < v.NumField(); i++ {
					check(v.Type().Field(i).Name, v.Field(i).String())
				}
			}
			for p, s := range c.parts {
				// A partial with an argument keeps its {{arg}}.
				check("partial "+p, strings.ReplaceAll(s, "{{arg}}", ""))
			}
			for _, m := range c.migrations {
				for _, s := range m.statements {
					check("migration "+m.name, s)
				}
			}
		}
	}
}

// TestLoadFailsLoudly checks the loader's errors on a folder that does not
// match the statements.
func TestLoadFailsLoudly(t *testing.T) {
	full := fstest.MapFS{}
	v := reflect.ValueOf(statements{})
	for i := 0; i < v.NumField(); i++ {
		full[path.Join("sql/x", snakeCase(v.Type().Field(i).Name)+".sql")] = &fstest.MapFile{Data: []byte("-- doc\nSELECT 1\n")}
	}
	with := func(name, body string) fstest.MapFS {
		m := fstest.MapFS{}
		for k, f := range full {
			m[k] = f
		}
		if body == "" {
			delete(m, name)
		} else {
			m[name] = &fstest.MapFile{Data: []byte(body)}
		}
		return m
	}
	cycle := with("sql/x/_partials/a.sql", "{{> a}}")
	cycle["sql/x/claim.sql"] = &fstest.MapFile{Data: []byte("{{> a}}")}
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"unknown file", with("sql/x/claim_afterr.sql", "SELECT 1"), "names no statement"},
		{"missing statement", with("sql/x/claim.sql", ""), "has no claim.sql"},
		{"missing partial", with("sql/x/claim.sql", "SELECT {{> nothing}}"), "no partial nothing"},
		{"partial cycle", cycle, "too deeply"},
	} {
		src, err := newSQLSource(tc.fsys, "x")
		if err == nil {
			var st statements
			err = src.load(".", &st, claimChunks.need)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	src, err := newSQLSource(with("sql/x/_partials/p.sql", "-- p\nb = {{arg}}"), "x")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := src.expand("a, {{> p $1}}, c", 0); err != nil || got != "a, b = $1, c" {
		t.Errorf("expand: %q, %v", got, err)
	}
	r := strings.NewReplacer("{{outbox}}", `"o"`)
	st := statements{Claim: "SELECT 1 FROM {{outbox}} WHERE id IN ({{ids}})", Get: "SELECT {{nope}}"}
	if err := substitute(r, &st, "x"); err == nil || !strings.Contains(err.Error(), "get: unknown placeholder") {
		t.Errorf("substitute: %v", err)
	}
}

// TestNeedTagsNameDesigns checks that every name in a need tag is "all" or
// the need of a dialect's claim design, and that every dialect's claimer
// runs its dialect's compiled statements.
func TestNeedTagsNameDesigns(t *testing.T) {
	designs := map[string]bool{"all": true}
	for _, d := range dialects {
		designs[d.claims.need] = true
	}
	for _, typ := range []reflect.Type{reflect.TypeOf(statements{}), reflect.TypeOf(keyOrderSQL{})} {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			tag, ok := f.Tag.Lookup("need")
			if !ok {
				continue
			}
			for _, n := range strings.Split(tag, ",") {
				if !designs[n] {
					t.Errorf("%s.%s: need %q names no claim design", typ.Name(), f.Name, n)
				}
			}
		}
	}
	for name := range dialects {
		_, c, _, err := compileFor(name, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		if e := c.claimer.explain(); len(e) == 0 || e[0].stmt != c.Claim {
			t.Errorf("%s: the claimer's rescan is not the dialect's Claim", name)
		}
	}
}
