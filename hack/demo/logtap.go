package main

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/go-logr/logr"
)

// refusedMessage is what the fencing webhook logs for every refused write
// (controllers/webhooks/fencing/handler.go).
const refusedMessage = "Refused write to guarded object"

// refusalTap receives the key/value pairs of the webhook's refusal logs.
var refusalTap atomic.Pointer[func(map[string]string)]

// tapSink is the operator's log sink in the demo: it hands the fencing
// webhook's refusal logs to refusalTap, so the timeline can show the
// operator's side of a refusal, and passes everything to next (nil: discard).
type tapSink struct {
	next logr.LogSink
	kv   []any
}

func (s *tapSink) Init(info logr.RuntimeInfo) {
	if s.next != nil {
		s.next.Init(info)
	}
}

func (s *tapSink) Enabled(level int) bool {
	return level == 0 || (s.next != nil && s.next.Enabled(level))
}

func (s *tapSink) Info(level int, msg string, kv ...any) {
	if f := refusalTap.Load(); f != nil && msg == refusedMessage {
		fields := map[string]string{}
		all := append(slices.Clip(s.kv), kv...)
		for i := 0; i+1 < len(all); i += 2 {
			fields[fmt.Sprint(all[i])] = fmt.Sprint(all[i+1])
		}
		(*f)(fields)
	}
	if s.next != nil && s.next.Enabled(level) {
		s.next.Info(level, msg, kv...)
	}
}

func (s *tapSink) Error(err error, msg string, kv ...any) {
	if s.next != nil {
		s.next.Error(err, msg, kv...)
	}
}

func (s *tapSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.kv = append(slices.Clip(s.kv), kv...)
	if s.next != nil {
		c.next = s.next.WithValues(kv...)
	}
	return &c
}

func (s *tapSink) WithName(name string) logr.LogSink {
	c := *s
	if s.next != nil {
		c.next = s.next.WithName(name)
	}
	return &c
}
