package api_test

import (
	"io"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// kubectlGet runs `kubectl get <args>` in the spec's namespace as the admin user
// and returns the output as rows of whitespace-separated cells, header first.
func kubectlGet(args ...string) [][]string {
	GinkgoHelper()
	kubectl, err := admin.Kubectl()
	Expect(err).NotTo(HaveOccurred())

	all := append([]string{"get", "--namespace", namespace, "--cache-dir", cacheDir}, args...)
	stdout, stderr, err := kubectl.Run(all...)
	errText, _ := io.ReadAll(stderr)
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(all, " "), errText)
	out, err := io.ReadAll(stdout)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("kubectl %s\n%s", strings.Join(args, " "), out)

	return splitColumns(string(out))
}

// splitColumns cuts kubectl's table output into cells at the header's column
// offsets, so that an empty cell stays an empty string instead of shifting the
// cells after it.
func splitColumns(out string) [][]string {
	GinkgoHelper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := strings.Fields(lines[0])
	starts := make([]int, len(header))
	from := 0
	for i, h := range header {
		at := strings.Index(lines[0][from:], h)
		Expect(at).To(BeNumerically(">=", 0))
		starts[i] = from + at
		from = starts[i] + len(h)
	}

	rows := [][]string{header}
	for _, line := range lines[1:] {
		cells := make([]string, len(header))
		for i, start := range starts {
			end := len(line)
			if i+1 < len(starts) && starts[i+1] < end {
				end = starts[i+1]
			}
			if start < end {
				cells[i] = strings.TrimSpace(line[start:end])
			}
		}
		rows = append(rows, cells)
	}
	return rows
}

// cacheDir keeps kubectl's discovery cache per suite run, out of $HOME.
var cacheDir string

var _ = Describe("kubectl get fencedleases", func() {
	// ACQUIRED is a date column: the age of status.acquireTime (an hour ago).
	const acquired = "60m"

	BeforeEach(func() {
		cacheDir = GinkgoT().TempDir()

		// A lease the controller would have granted: status through the subresource.
		l := newLease("job-a")
		l.Spec.LeaseDurationSeconds = 30
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
		l.Status = grantedStatus()
		hourAgo := metav1.NewMicroTime(time.Now().Add(-time.Hour))
		l.Status.AcquireTime = &hourAgo
		Expect(k8sClient.Status().Update(ctx, l)).To(Succeed())
	})

	It("prints holder, token, acquired, transitions and age", func() {
		rows := kubectlGet("fencedleases")
		Expect(rows).To(HaveLen(2))
		Expect(rows[0]).To(Equal([]string{"NAME", "HOLDER", "TOKEN", "ACQUIRED", "TRANSITIONS", "AGE"}))
		Expect(rows[1]).To(HaveLen(6))
		Expect(rows[1][:5]).To(Equal([]string{"job-a", "worker-a", "42", acquired, "3"}))
		Expect(rows[1][5]).To(MatchRegexp(`^\d+s$`), "AGE of a lease created seconds ago")
	})

	It("adds the Held reason and the lease duration with -o wide", func() {
		rows := kubectlGet("fencedleases", "-o", "wide")
		Expect(rows).To(HaveLen(2))
		Expect(rows[0]).To(Equal([]string{"NAME", "HOLDER", "TOKEN", "ACQUIRED", "TRANSITIONS", "STATUS", "DURATION", "AGE"}))
		Expect(rows[1]).To(HaveLen(8))
		Expect(rows[1][:7]).To(Equal([]string{"job-a", "worker-a", "42", acquired, "3", "Granted", "30"}))
	})

	It("answers to the short name flease and the kubefence category", func() {
		for _, resource := range []string{"flease", "flease/job-a", "kubefence", "fencedlease.coordination.kubefence.io"} {
			rows := kubectlGet(resource)
			Expect(rows).To(HaveLen(2), "kubectl get %s", resource)
			Expect(rows[0]).To(Equal([]string{"NAME", "HOLDER", "TOKEN", "ACQUIRED", "TRANSITIONS", "AGE"}), "kubectl get %s", resource)
			Expect(rows[1][:5]).To(Equal([]string{"job-a", "worker-a", "42", acquired, "3"}), "kubectl get %s", resource)
		}
	})

	It("shows a lease nobody holds with empty holder, token, acquired and transitions", func() {
		Expect(k8sClient.Create(ctx, newLease("job-b"))).To(Succeed())

		rows := kubectlGet("fencedleases")
		Expect(rows).To(HaveLen(3))
		Expect(rows[1][:5]).To(Equal([]string{"job-a", "worker-a", "42", acquired, "3"}))
		Expect(rows[2][:5]).To(Equal([]string{"job-b", "", "", "", ""}))
		Expect(rows[2][5]).To(MatchRegexp(`^\d+s$`))
	})
})
