package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// Values of --dry-run, as kubectl's.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

// dryRunFlag is kubectl's --dry-run=none|server|client for the operator
// actions.
type dryRunFlag struct{ value string }

func (d *dryRunFlag) addFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&d.value, "dry-run", dryRunNone, `Must be "none", "server", or "client". With client, only check the action against the lease as read and print what would be done; with server, also send the write as a server-side dry run (admission, including the FencedLease webhook, judges it; nothing is stored and no Event is recorded).`)
	cmd.Flags().Lookup("dry-run").NoOptDefVal = dryRunClient
	_ = cmd.RegisterFlagCompletionFunc("dry-run", cobra.FixedCompletions([]string{dryRunNone, dryRunServer, dryRunClient}, cobra.ShellCompDirectiveNoFileComp))
}

func (d *dryRunFlag) validate() error {
	switch d.value {
	case dryRunNone, dryRunClient, dryRunServer:
		return nil
	}
	return fmt.Errorf(`invalid --dry-run value %q: must be "none", "server", or "client"`, d.value)
}

// suffix is what kubectl appends to an action's message in a dry run.
func (d *dryRunFlag) suffix() string {
	switch d.value {
	case dryRunClient:
		return " (dry run)"
	case dryRunServer:
		return " (server dry run)"
	}
	return ""
}

func (d *dryRunFlag) enabled() bool { return d.value != dryRunNone }
