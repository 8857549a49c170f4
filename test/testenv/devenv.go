package testenv

import "github.com/kubefence/kubefence/hack/devenv"

// What the suites share with the demo lives in hack/devenv (no program
// imports test/); testenv passes it on under the names the suites use.

// Proc is a child process of a test that gets SIGKILL if the test process
// dies (devenv.Proc); StartProc starts one.
type Proc = devenv.Proc

// StartProc starts cmd as a Proc (devenv.StartProc).
var StartProc = devenv.StartProc

// Buffer is a bytes.Buffer that goroutines may write to while a test reads it
// (devenv.Buffer).
type Buffer = devenv.Buffer

// ModuleRoot is the repository's root (devenv.ModuleRoot).
var ModuleRoot = devenv.ModuleRoot

// The RBAC of a fenced client (devenv): AllVerbs, LeaseClientRule,
// WidgetRule, ClientRules, GrantClusterRole.
var (
	AllVerbs         = devenv.AllVerbs
	LeaseClientRule  = devenv.LeaseClientRule
	WidgetRule       = devenv.WidgetRule
	ClientRules      = devenv.ClientRules
	GrantClusterRole = devenv.GrantClusterRole
)
