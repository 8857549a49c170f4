// Package event is the line protocol between the demo and its worker
// processes: a worker prints one JSON Event per line on stdout, and the demo
// reads them to tell the story.
package event

import "time"

// Kind names what happened to a worker.
type Kind string

// The events a worker reports.
const (
	// Started: the process is up (PID is set).
	Started Kind = "started"
	// Holder: the worker saw the lease change hands (Holder, Token; Holder is
	// empty when nobody holds it). Not reported for the worker itself.
	Holder Kind = "holder"
	// Granted: the worker leads with Token.
	Granted Kind = "granted"
	// Wrote: a write with Token was accepted (Write is its ordinal, Entries the
	// object's entries afterwards, Created whether it created the object).
	Wrote Kind = "wrote"
	// Pausing: the worker checked its lease (Token is current), prepared write
	// number Write, and is about to stop itself with SIGSTOP before sending it.
	Pausing Kind = "pausing"
	// Resumed: the worker runs again after PausedMillis, and sends the write it
	// prepared with Token.
	Resumed Kind = "resumed"
	// Refused: the API server refused a write with Token as stale (Code and
	// Message are the server's answer).
	Refused Kind = "refused"
	// Failed: a write failed for another reason (Message).
	Failed Kind = "failed"
	// StoppedLeading: the tenure with Token ended (Reason: "lost" or "released").
	StoppedLeading Kind = "stopped-leading"
	// Exited: the worker stops (Message is the error, if any).
	Exited Kind = "exited"
)

// Event is one line of a worker's stdout.
type Event struct {
	Time         time.Time `json:"time"`
	Identity     string    `json:"identity"`
	Kind         Kind      `json:"event"`
	PID          int       `json:"pid,omitempty"`
	Token        int64     `json:"token,omitempty"`
	Holder       string    `json:"holder,omitempty"`
	Write        int       `json:"write,omitempty"`
	Created      bool      `json:"created,omitempty"`
	Entries      []string  `json:"entries,omitempty"`
	PausedMillis int64     `json:"pausedMillis,omitempty"`
	Code         int32     `json:"code,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Message      string    `json:"message,omitempty"`
}
