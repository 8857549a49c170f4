package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Output formats the table printer handles; the rest (json, yaml, kyaml,
// name, jsonpath, go-template, templatefile...) come from cli-runtime's
// PrintFlags.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// printFlags are kubectl get's output flags: -o, --no-headers,
// --show-labels, --template and friends.
type printFlags struct {
	flags      *genericclioptions.PrintFlags
	noHeaders  bool
	showLabels bool
}

func newPrintFlags() *printFlags {
	scheme, err := newScheme()
	if err != nil {
		panic(err) // the scheme is built from compiled-in types
	}
	return &printFlags{flags: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme)}
}

// formats lists every -o value, table ones first.
func (p *printFlags) formats() []string {
	return append([]string{outputWide}, p.flags.AllowedFormats()...)
}

func (p *printFlags) addFlags(cmd *cobra.Command) {
	p.flags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format. One of: (" + strings.Join(p.formats(), ", ") + "). Without it, a table."
	cmd.Flags().BoolVar(&p.noHeaders, "no-headers", false, "When using the default or wide output format, don't print headers.")
	cmd.Flags().BoolVar(&p.showLabels, "show-labels", false, "When printing a table, show all labels as the last column.")
	_ = cmd.RegisterFlagCompletionFunc("output", func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return withPrefix(p.formats(), toComplete), cobra.ShellCompDirectiveNoFileComp
	})
}

func (p *printFlags) output() string { return *p.flags.OutputFormat }

// isTable tells whether the output is the human-readable table.
func (p *printFlags) isTable() bool {
	return p.output() == outputTable || p.output() == outputWide
}

// toPrinter returns the printer -o asks for; withNamespace adds kubectl's
// NAMESPACE column to tables (for -A).
func (p *printFlags) toPrinter(withNamespace bool) (printers.ResourcePrinter, error) {
	if p.isTable() {
		return printers.NewTablePrinter(printers.PrintOptions{
			NoHeaders:     p.noHeaders,
			Wide:          p.output() == outputWide,
			WithNamespace: withNamespace,
			ShowLabels:    p.showLabels,
		}), nil
	}
	pr, err := p.flags.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return nil, fmt.Errorf("unknown output format %q: use one of %s", p.output(), strings.Join(p.formats(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("output format %q: %w", p.output(), err)
	}
	return pr, nil
}

// leaseColumns are the table's columns; Priority 1 ones show with -o wide.
var leaseColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the FencedLease."},
	{Name: "Holder", Type: "string", Description: "The holderIdentity granted the lease, <none> when nobody holds it."},
	{Name: "Token", Type: "string", Description: "The current holder's fencing token."},
	{Name: "Expires-In", Type: "string", Description: "Time until the controller expires the holder."},
	{Name: "Transitions", Type: "integer", Description: "Number of holder changes."},
	{Name: "Waiting", Type: "integer", Description: "Number of waiting requests."},
	{Name: "Lock-Delay", Type: "string", Description: "The lock-delay, and how much of it is left while it holds the lease back."},
	{Name: "Status", Type: "string", Description: "Reason of the Held condition."},
	{Name: "Waiters", Type: "string", Priority: 1, Description: "The waiting holderIdentities in grant order."},
	{Name: "Previous", Type: "string", Priority: 1, Description: "The previous holder, its token and how its tenure ended."},
}

// leaseTable is the table kubectl fence get prints, built on the client as
// kueuectl does (the server's table has no time left or waiters).
func leaseTable(leases []coordv1alpha1.FencedLease, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: leaseColumns}
	for i := range leases {
		l := &leases[i]
		queue := waiters(l)
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: []any{
				l.Name,
				holder(l),
				token(l.Status.FencingToken),
				expiresIn(l, now),
				int64(l.Status.LeaseTransitions),
				int64(len(queue)),
				lockDelay(l, now),
				heldReason(l),
				waiterNames(queue),
				previousShort(l),
			},
			Object: runtime.RawExtension{Object: l},
		})
	}
	return t
}

// waiterNames lists the waiting identities in grant order: "b,c".
func waiterNames(queue []waiter) string {
	if len(queue) == 0 {
		return none
	}
	names := make([]string, len(queue))
	for i, w := range queue {
		names[i] = w.HolderIdentity
	}
	return strings.Join(names, ",")
}

// previousShort is the previous holder for a table cell: "a/7:Released".
func previousShort(l *coordv1alpha1.FencedLease) string {
	p := l.Status.PreviousHolder
	if p == nil {
		return none
	}
	return fmt.Sprintf("%s/%d:%s", p.HolderIdentity, p.FencingToken, p.Reason)
}

// printStructured writes v as indented JSON (as kubectl does) or YAML; for
// describe's view, which is not an API object.
func printStructured(w io.Writer, output string, v any) error {
	data, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("encoding output: %w", err)
	}
	if output == outputYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encoding output: %w", err)
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}

// objectOutputFlag is -o json|yaml of the commands that print one object of
// their own (describe, version): without it, they print text.
type objectOutputFlag struct{ value string }

func (f *objectOutputFlag) addFlag(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.value, "output", "o", "", "Output format: json or yaml.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputJSON, outputYAML}, cobra.ShellCompDirectiveNoFileComp))
}

// validate refuses an -o value the command does not print.
func (f *objectOutputFlag) validate() error {
	allowed := []string{outputJSON, outputYAML}
	if f.value == outputTable || slices.Contains(allowed, f.value) {
		return nil
	}
	return fmt.Errorf("unknown output format %q: use one of %s", f.value, strings.Join(allowed, ", "))
}

// structured tells whether -o asks for the object rather than the text.
func (f *objectOutputFlag) structured() bool { return f.value != outputTable }

// print writes v as -o asks.
func (f *objectOutputFlag) print(w io.Writer, v any) error { return printStructured(w, f.value, v) }
