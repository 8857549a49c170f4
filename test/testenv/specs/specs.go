// Package specs is the entry point of the Ginkgo suites that run on
// testenv's control plane. It lives apart from testenv so that the programs
// that import testenv (the benchmark, the demo) do not link Ginkgo, whose
// flags would become theirs.
package specs

import (
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/kubefence/kubefence/test/testenv"
)

// Run is the entry point of a Ginkgo suite whose control plane TestMain
// started (testenv.Run): it skips under -short (testenv.SkipIfShort),
// registers Gomega's fail handler, sets Eventually's default timeout to
// eventually (polling every 20 ms) unless it is zero, and runs the specs.
func Run(t *testing.T, description string, eventually time.Duration) {
	t.Helper()
	testenv.SkipIfShort(t)
	gomega.RegisterFailHandler(ginkgo.Fail)
	if eventually > 0 {
		gomega.SetDefaultEventuallyTimeout(eventually)
		gomega.SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	}
	ginkgo.RunSpecs(t, description)
}
