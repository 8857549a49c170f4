package protocol_test

import (
	"fmt"
	"log"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// A renewal is one JSON patch: a test of the request as read, then its
// replacement with renewSequence raised and renewTime stamped.
func ExampleRenewPatch() {
	lease := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "scheduler"},
		Spec: coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{
			{HolderIdentity: "scheduler-0", User: "system:serviceaccount:jobs:scheduler", RenewSequence: 4},
		}},
	}
	patch, err := protocol.RenewPatch(lease, "scheduler-0", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		log.Fatal(err)
	}
	data, err := patch.Data(lease)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(patch.Type())
	fmt.Println(string(data))
	// Output:
	// application/json-patch+json
	// [{"op":"test","path":"/spec/requests/0","value":{"holderIdentity":"scheduler-0","user":"system:serviceaccount:jobs:scheduler","renewSequence":4}},{"op":"replace","path":"/spec/requests/0","value":{"holderIdentity":"scheduler-0","user":"system:serviceaccount:jobs:scheduler","renewSequence":5,"renewTime":"2026-12-01T00:00:00.000000Z"}}]
}
