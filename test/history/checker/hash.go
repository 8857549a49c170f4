package checker

import (
	"crypto/sha256"
	"encoding/hex"
)

// Hash0 is the hash of the empty list.
const Hash0 = "0"

// Chain extends the hash of a list by one appended value. A list is logged as
// its length and the chain of its values from Hash0, so that every answer the
// API server gave can be compared with the model without logging whole lists.
func Chain(prev, value string) string {
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write([]byte{0})
	h.Write([]byte(value))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// HashList is the chain hash of a whole list.
func HashList(values []string) string {
	h := Hash0
	for _, v := range values {
		h = Chain(h, v)
	}
	return h
}
