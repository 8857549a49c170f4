package devenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines may write to while a test reads
// it: a child process's output, a watch's stream.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail is the last n bytes written (all of them when fewer).
func (b *Buffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.buf.Bytes()
	if len(p) > n {
		p = p[len(p)-n:]
	}
	return string(p)
}
