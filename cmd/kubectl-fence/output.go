package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"sigs.k8s.io/yaml"
)

// Output formats.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// checkOutput refuses an -o value the command does not print.
func checkOutput(output string, allowed ...string) error {
	if output == outputTable || slices.Contains(allowed, output) {
		return nil
	}
	return fmt.Errorf("unknown output format %q: use one of %v", output, allowed)
}

// printStructured writes v as indented JSON (as kubectl does) or YAML.
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
