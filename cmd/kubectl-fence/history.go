package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// historyLimit is how many of the most recent Events get shows.
const historyLimit = 20

// historyEntry is one Event about the lease: a grant, hand-over, take-over,
// expiry, release or missed renewal from the controller, or an operator action.
type historyEntry struct {
	// Time of the event (its last occurrence when it repeated).
	Time metav1.MicroTime `json:"time"`
	// Type is Normal or Warning.
	Type string `json:"type"`
	// Reason is Granted, HandedOver, TakenOver, Expired, Released,
	// OperatorRelease or OperatorHandover (RenewalMissed from controllers
	// before one Event per tenure change).
	Reason string `json:"reason"`
	// Note is the event's message.
	Note string `json:"note,omitempty"`
	// Count is how many times the event occurred (1 unless it repeated).
	Count int32 `json:"count"`
	// ReportedBy is the reporting controller.
	ReportedBy string `json:"reportedBy,omitempty"`
}

// history lists the most recent Events regarding the FencedLease name, oldest
// first. It keeps the Events of earlier incarnations of the name (before a
// delete-then-recreate): the tokens carry on across them too.
func history(ctx context.Context, c *clients, name string) ([]historyEntry, error) {
	var list eventsv1.EventList
	sel := fields.Set{"regarding.name": name, "regarding.kind": "FencedLease"}.AsSelector()
	if err := c.kube.List(ctx, &list, client.InNamespace(c.namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing events of fencedlease %s/%s: %w", c.namespace, name, err)
	}
	var out []historyEntry
	for i := range list.Items {
		e := &list.Items[i]
		if !strings.HasPrefix(e.Regarding.APIVersion, coordv1alpha1.GroupVersion.Group+"/") {
			continue
		}
		h := historyEntry{Time: eventTime(e), Type: e.Type, Reason: e.Reason, Note: e.Note, Count: 1, ReportedBy: e.ReportingController}
		if e.Series != nil {
			h.Count = e.Series.Count
		} else if e.DeprecatedCount > 1 {
			h.Count = e.DeprecatedCount
		}
		out = append(out, h)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(&out[j].Time) })
	if len(out) > historyLimit {
		out = out[len(out)-historyLimit:]
	}
	return out, nil
}

// eventTime is when an Event last occurred, whichever API wrote it.
func eventTime(e *eventsv1.Event) metav1.MicroTime {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime
	case !e.EventTime.IsZero():
		return e.EventTime
	case !e.DeprecatedLastTimestamp.IsZero():
		return metav1.NewMicroTime(e.DeprecatedLastTimestamp.Time)
	case !e.DeprecatedFirstTimestamp.IsZero():
		return metav1.NewMicroTime(e.DeprecatedFirstTimestamp.Time)
	default:
		return metav1.NewMicroTime(e.CreationTimestamp.Time)
	}
}
