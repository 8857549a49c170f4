package install

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/pkg/fence"
)

// docTable returns the rows of the first table under the heading, keyed by
// the backquoted name in the first column.
func docTable(t *testing.T, doc, heading string) map[string]string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("heading %q not found in docs/user-guide.md", heading)
	}
	rows := map[string]string{}
	inTable := false
	for _, line := range strings.Split(doc[i+len(heading)+2:], "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		m := regexp.MustCompile("^ *`([^`]+)`").FindStringSubmatch(cells[1])
		if m == nil {
			continue // the header and its separator
		}
		rows[m[1]] = line
	}
	if len(rows) == 0 {
		t.Fatalf("no table rows under %q", heading)
	}
	return rows
}

// crdFields lists a schema's properties as the docs name them: "a", "a[]"
// for arrays, and "a[].b" for the properties of array items (one level).
func crdFields(props map[string]apiextensionsv1.JSONSchemaProps, nested bool) map[string]apiextensionsv1.JSONSchemaProps {
	out := map[string]apiextensionsv1.JSONSchemaProps{}
	for name, p := range props {
		if p.Type == "array" {
			out[name+"[]"] = p
			if nested && p.Items != nil && p.Items.Schema != nil {
				for sub, sp := range p.Items.Schema.Properties {
					out[name+"[]."+sub] = sp
				}
			}
			continue
		}
		out[name] = p
	}
	return out
}

// TestUserGuideReferenceMatchesCRD keeps the FencedLease reference tables of
// docs/user-guide.md in step with the generated CRD: the same fields, and
// every bound of a spec field (maximum, maxLength, maxItems) written in its row.
func TestUserGuideReferenceMatchesCRD(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "coordination.kubefence.io_fencedleases.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := sigsyaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%d CRD versions: extend this test to the new version's reference", len(crd.Spec.Versions))
	}
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	guide, err := os.ReadFile(filepath.Join(root, "docs", "user-guide.md"))
	if err != nil {
		t.Fatal(err)
	}

	for _, part := range []struct {
		heading string
		schema  apiextensionsv1.JSONSchemaProps
		nested  bool // also the properties of array items
		bounds  bool // rows state the bounds (the spec table has a type column)
	}{
		{"### spec (what users and clients ask for)", schema["spec"], true, true},
		{"### status (written only by the controller)", schema["status"], false, false},
	} {
		rows := docTable(t, string(guide), part.heading)
		fields := crdFields(part.schema.Properties, part.nested)
		var names []string
		for n := range fields {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			row, ok := rows[n]
			if !ok {
				t.Errorf("%s: CRD field %q has no row in docs/user-guide.md", part.heading, n)
				continue
			}
			p := fields[n]
			var bounds []string
			if !part.bounds {
				continue
			}
			if p.Maximum != nil {
				bounds = append(bounds, strconv.FormatInt(int64(*p.Maximum), 10))
			}
			if p.MaxLength != nil {
				bounds = append(bounds, strconv.FormatInt(*p.MaxLength, 10))
			}
			if p.MaxItems != nil {
				bounds = append(bounds, strconv.FormatInt(*p.MaxItems, 10))
			}
			for _, bound := range bounds {
				if !strings.Contains(row, bound) {
					t.Errorf("%s: the row of %q does not state the CRD's bound %s:\n%s", part.heading, n, bound, row)
				}
			}
		}
		for n := range rows {
			if _, ok := fields[n]; !ok {
				t.Errorf("%s: docs/user-guide.md documents %q, which the CRD does not have", part.heading, n)
			}
		}
	}
}

// TestUserGuideDocumentsEveryConfigField keeps docs/user-guide.md's
// fence.Config table in step with the type: every exported field has a row
// (its first cell names it in backquotes, alone or as `Field.Sub...`, and a
// row may name several), and every row names a field the type has.
func TestUserGuideDocumentsEveryConfigField(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "user-guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	const heading = "### fence.Config"
	named := map[string]bool{} // every backquoted leading identifier of a first cell
	for _, row := range docTable(t, string(b), heading) {
		for _, m := range regexp.MustCompile("`([A-Z][A-Za-z]*)").FindAllStringSubmatch(strings.Split(row, "|")[1], -1) {
			named[m[1]] = true
		}
	}
	typ := reflect.TypeOf(fence.Config{})
	for i := range typ.NumField() {
		if f := typ.Field(i); f.IsExported() && !named[f.Name] {
			t.Errorf("fence.Config.%s has no row in docs/user-guide.md %q", f.Name, heading)
		}
	}
	for n := range named {
		if _, ok := typ.FieldByName(n); !ok {
			t.Errorf("docs/user-guide.md %q documents %q, which fence.Config does not have", heading, n)
		}
	}
}
