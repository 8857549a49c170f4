package checker

import (
	"fmt"
	"hash/fnv"

	"github.com/anishathalye/porcupine"
)

// Input is an operation on one object's list.
type Input struct {
	// Kind is Append or Read.
	Kind string
	// Value is what an append adds.
	Value string
}

// Output is what the API server answered: the list (as length and chain
// hash) a read returned or an append left. Unknown: the append's answer was
// lost; it happened, at a time the history cannot tell.
type Output struct {
	Unknown bool
	Len     int
	Hash    string
}

// State is the model's list, as length and chain hash.
type State struct {
	Len  int
	Hash string
}

// Model is the sequential specification of a guarded object's entries: a
// list that appends extend by one value and reads return whole. An append
// with the read's resourceVersion as precondition is exactly "append to the
// list I read": the answer must be the previous state plus the value.
var Model = porcupine.Model{
	Init: func() interface{} { return State{Hash: Hash0} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s, in, out := state.(State), input.(Input), output.(Output)
		switch in.Kind {
		case Read:
			return out.Len == s.Len && out.Hash == s.Hash, s
		case Append:
			next := State{Len: s.Len + 1, Hash: Chain(s.Hash, in.Value)}
			if out.Unknown {
				return true, next
			}
			return out.Len == next.Len && out.Hash == next.Hash, next
		}
		return false, s
	},
	Equal: func(a, b interface{}) bool { return a.(State) == b.(State) },
	Hash: func(state interface{}) uint64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(state.(State).Hash))
		return h.Sum64()
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(Input), output.(Output)
		res := fmt.Sprintf("len %d #%.8s", out.Len, out.Hash)
		if out.Unknown {
			res = "unknown"
		}
		if in.Kind == Read {
			return "read() -> " + res
		}
		return fmt.Sprintf("append(%s) -> %s", in.Value, res)
	},
	DescribeState: func(state interface{}) string {
		s := state.(State)
		return fmt.Sprintf("len %d #%.8s", s.Len, s.Hash)
	},
}
