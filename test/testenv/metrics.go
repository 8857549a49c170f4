package testenv

import "github.com/prometheus/client_golang/prometheus"

// LeaseErrors is the value of pkg/fence's client metric
// kubefence_client_lease_errors_total for reason in reg (the first series
// with that reason), and whether reg has such a series.
func LeaseErrors(reg prometheus.Gatherer, reason string) (float64, bool, error) {
	fams, err := reg.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, f := range fams {
		if f.GetName() != "kubefence_client_lease_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue(), true, nil
				}
			}
		}
	}
	return 0, false, nil
}
