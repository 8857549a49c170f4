package testenv

import (
	"sync"
	"time"
)

// Grant is one tenure as its holder saw it: from OnStartedLeading to the
// cancellation of the holder's context.
type Grant struct {
	Identity string
	Token    int64
	Start    time.Time
	Stop     time.Time // zero while the tenure lasts
}

// Journal collects the tenures of several electors, in the order they began.
// It is safe for concurrent use.
type Journal struct {
	mu     sync.Mutex
	grants []Grant
}

// Started records the start of a tenure and returns its index for Stopped.
func (j *Journal) Started(identity string, token int64) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.grants = append(j.grants, Grant{Identity: identity, Token: token, Start: time.Now()})
	return len(j.grants) - 1
}

// Stopped records the end of tenure i.
func (j *Journal) Stopped(i int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.grants[i].Stop = time.Now()
}

// Snapshot is a copy of the tenures so far.
func (j *Journal) Snapshot() []Grant {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Grant(nil), j.grants...)
}

// Len is the number of tenures so far.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.grants)
}

// Identities are the holders of the tenures so far, in order.
func (j *Journal) Identities() []string {
	var ids []string
	for _, g := range j.Snapshot() {
		ids = append(ids, g.Identity)
	}
	return ids
}
