package operator_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// These specs prove invariant I6 on a real kube-apiserver: every write a client
// must not make is refused, with the webhook's (or RBAC's) own reason, and
// leaves the FencedLease exactly as it was; every write a client may make is
// accepted.
var _ = Describe("FencedLease admission (I6)", func() {
	// What the refusals say (controllers/webhooks/fencedlease/fencedlease_webhook.go).
	const (
		notTheHolder    = "only the holder can renew it"
		notTheRequester = "only the requester can withdraw or release it"
		onlyForItself   = "a client can request the lease only for itself"
		queueOrder      = "order of spec.requests"
		appendOnly      = "new requests are appended at the end of the queue"
		statusIsOurs    = "status is written only by the kubefence controller"
		finalizerIsOurs = "finalizer " + coordv1alpha1.EpochFinalizer + " is removed only by the kubefence controller"
		annotationOurs  = "annotation " + coordv1alpha1.ExpiredAnnotation + " is written only by the kubefence controller"
		podTokenNeeded  = "identityBinding Pod needs a requester authenticated with a pod-bound service-account token"
	)
	const longLease = 600 // seconds: nobody expires while a spec runs

	var ns string

	BeforeEach(func() {
		ns = newNamespace()
		c := startController(false)
		DeferCleanup(c.stop)
	})

	// createLease creates a lease as the admin, shaped by mutate.
	createLease := func(name string, mutate ...func(*coordv1alpha1.FencedLease)) leaseUnderTest {
		l := &coordv1alpha1.FencedLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: longLease},
		}
		for _, m := range mutate {
			m(l)
		}
		Expect(k8sClient.Create(suiteCtx, l)).To(Succeed())
		return leaseUnderTest{ns: ns, name: name}
	}

	// queue creates a lease that the first of ids holds while the others wait,
	// in this order; each id is also the user that asked.
	queue := func(name string, ids ...string) leaseUnderTest {
		l := createLease(name)
		for _, id := range ids {
			joinRaw(id, ns, name, id)
		}
		Eventually(func(g Gomega) {
			st := l.get().Status
			g.Expect(st.HolderIdentity).To(Equal(ids[0]))
			var waiting []string
			for _, w := range st.Waiting {
				waiting = append(waiting, w.HolderIdentity)
			}
			g.Expect(waiting).To(Equal(ids[1:]))
		}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
		return l
	}

	// allowInNamespace gives users extra rights in the spec's namespace (an
	// over-broad RBAC set-up) and waits until the authorizer applies them.
	allowInNamespace := func(rule rbacv1.PolicyRule, usernames ...string) {
		bindInNamespace(ns, "extra-"+strings.ReplaceAll(rule.Resources[0], "/", "-"), rule, usernames...)
		_, subresource, _ := strings.Cut(rule.Resources[0], "/")
		for _, u := range usernames {
			Eventually(func() bool {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: u,
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: ns, Verb: rule.Verbs[0], Group: coordv1alpha1.GroupVersion.Group,
						Resource: "fencedleases", Subresource: subresource,
					},
				}}
				Expect(k8sClient.Create(suiteCtx, sar)).To(Succeed())
				return sar.Status.Allowed
			}, 10*time.Second, 50*time.Millisecond).Should(BeTrue(), "RBAC grants %s %v", u, rule)
		}
	}

	// impersonate returns a client acting as username in the clients' group,
	// carrying extra user info (such as a projected token's pod name).
	impersonate := func(username string, extra map[string][]string) client.Client {
		c := rest.CopyConfig(cluster.Config)
		c.Impersonate = rest.ImpersonationConfig{
			UserName: username,
			Groups:   []string{"kubefence:clients", "system:authenticated"},
			Extra:    extra,
		}
		cl, err := client.New(c, client.Options{Scheme: cluster.Scheme})
		Expect(err).NotTo(HaveOccurred())
		return cl
	}

	Context("a forged renewal", func() {
		var lease leaseUnderTest

		BeforeEach(func() {
			lease = queue("forged", "alice", "carol", "bob")
		})

		DescribeTable("is refused when bob raises the renewSequence of someone else's request",
			func(write func(w leaseWriter) error, says ...string) {
				lease.forbids(func() error { return write(lease.as(users["bob"])) }, append(says, notTheHolder)...)
			},
			Entry("the holder's, with a JSON patch", func(w leaseWriter) error {
				return w.jsonPatch(`[{"op":"test","path":"/spec/requests/0/holderIdentity","value":"alice"},
					{"op":"add","path":"/spec/requests/0/renewSequence","value":7}]`)
			}, `holderIdentity "alice": it belongs to user "alice", not "bob"`),
			Entry("the holder's, with a typed Update", func(w leaseWriter) error {
				return w.update(func(l *coordv1alpha1.FencedLease) { l.Spec.Requests[0].RenewSequence++ })
			}, `holderIdentity "alice"`),
			Entry("the holder's, with a merge patch of the whole queue", func(w leaseWriter) error {
				return w.mergePatch(`{"spec":{"requests":[{"holderIdentity":"alice","user":"alice","renewSequence":7},
					{"holderIdentity":"carol","user":"carol"},{"holderIdentity":"bob","user":"bob"}]}}`)
			}, `holderIdentity "alice"`),
			Entry("the holder's, with server-side apply", func(w leaseWriter) error {
				return w.apply(coordv1alpha1.LeaseRequest{HolderIdentity: "alice", User: "alice", RenewSequence: 7})
			}, `holderIdentity "alice"`),
			Entry("a waiting client's, with a JSON patch", func(w leaseWriter) error {
				return w.jsonPatch(`[{"op":"test","path":"/spec/requests/1/holderIdentity","value":"carol"},
					{"op":"add","path":"/spec/requests/1/renewSequence","value":1}]`)
			}, `holderIdentity "carol": it belongs to user "carol", not "bob"`),
			Entry("the holder's, together with his own renewal", func(w leaseWriter) error {
				return w.update(func(l *coordv1alpha1.FencedLease) {
					l.Spec.Requests[0].RenewSequence++
					l.Spec.Requests[2].RenewSequence++
				})
			}, `holderIdentity "alice"`),
		)

		It("is accepted from the holder itself, and the controller acknowledges it without a new token", func() {
			before := lease.settled()
			alice := lease.as(users["alice"])
			Expect(alice.jsonPatch(`[{"op":"test","path":"/spec/requests/0/holderIdentity","value":"alice"},
				{"op":"add","path":"/spec/requests/0/renewSequence","value":1}]`)).To(Succeed())
			Expect(alice.update(func(l *coordv1alpha1.FencedLease) { l.Spec.Requests[0].RenewSequence++ })).To(Succeed())
			Eventually(func(g Gomega) {
				st := lease.get().Status
				g.Expect(st.RenewSequence).To(BeEquivalentTo(2))
				g.Expect(st.HolderIdentity).To(Equal("alice"))
				g.Expect(st.FencingToken).To(Equal(before.Status.FencingToken))
			}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
		})
	})

	Context("a stolen grant or a foreign withdrawal", func() {
		var lease leaseUnderTest

		BeforeEach(func() {
			lease = queue("stolen", "alice", "carol", "bob")
		})

		DescribeTable("is refused when bob writes",
			func(write func(w leaseWriter) error, says ...string) {
				lease.forbids(func() error { return write(lease.as(users["bob"])) }, says...)
			},
			Entry("a removal of the holder's request (a forced release)", func(w leaseWriter) error {
				return w.jsonPatch(`[{"op":"test","path":"/spec/requests/0/holderIdentity","value":"alice"},
					{"op":"remove","path":"/spec/requests/0"}]`)
			}, `cannot remove the request of holderIdentity "alice": it belongs to user "alice", not "bob"`, notTheRequester),
			Entry("a removal of a waiting request", func(w leaseWriter) error {
				return w.update(func(l *coordv1alpha1.FencedLease) {
					l.Spec.Requests = slices.DeleteFunc(l.Spec.Requests, func(r coordv1alpha1.LeaseRequest) bool { return r.HolderIdentity == "carol" })
				})
			}, `cannot remove the request of holderIdentity "carol"`, notTheRequester),
			Entry("a queue of only his own request (merge patch)", func(w leaseWriter) error {
				return w.mergePatch(`{"spec":{"requests":[{"holderIdentity":"bob","user":"bob"}]}}`)
			}, `cannot remove the request of holderIdentity "alice"`, notTheRequester),
			Entry("a new request in alice's name", func(w leaseWriter) error {
				return w.update(func(l *coordv1alpha1.FencedLease) {
					l.Spec.Requests = append(l.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: "mallory", User: "alice"})
				})
			}, `spec.requests[3] (holderIdentity "mallory") names user "alice", but the request comes from "bob"`, onlyForItself),
			Entry("a new request in the controller's name (JSON patch)", func(w leaseWriter) error {
				return w.jsonPatch(`[{"op":"add","path":"/spec/requests/-","value":{"holderIdentity":"mallory","user":"admin"}}]`)
			}, `names user "admin", but the request comes from "bob"`, onlyForItself),
			Entry("his request moved in front of carol's (queue jump)", func(w leaseWriter) error {
				return w.jsonPatch(`[{"op":"test","path":"/spec/requests/2/holderIdentity","value":"bob"},
					{"op":"move","from":"/spec/requests/2","path":"/spec/requests/1"}]`)
			}, queueOrder, "from [alice, carol, bob] to [alice, bob, carol]"),
			Entry("his request moved in front of the holder's", func(w leaseWriter) error {
				return w.jsonPatch(`[{"op":"test","path":"/spec/requests/2/holderIdentity","value":"bob"},
					{"op":"move","from":"/spec/requests/2","path":"/spec/requests/0"}]`)
			}, queueOrder, "from [alice, carol, bob] to [bob, alice, carol]"),
			Entry("others' requests swapped, his own untouched", func(w leaseWriter) error {
				return w.update(func(l *coordv1alpha1.FencedLease) {
					l.Spec.Requests[0], l.Spec.Requests[1] = l.Spec.Requests[1], l.Spec.Requests[0]
				})
			}, queueOrder, "to [carol, alice, bob]"),
			Entry("a new request inserted at the head of the queue", func(w leaseWriter) error {
				return w.jsonPatch(`[{"op":"add","path":"/spec/requests/0","value":{"holderIdentity":"bob-2","user":"bob"}}]`)
			}, `spec.requests[1] (holderIdentity "alice") was moved behind a new request`, appendOnly),
			Entry("a new request inserted in front of a waiting one", func(w leaseWriter) error {
				return w.jsonPatch(`[{"op":"add","path":"/spec/requests/1","value":{"holderIdentity":"bob-2","user":"bob"}}]`)
			}, `(holderIdentity "carol") was moved behind a new request`, appendOnly),
			Entry("his own request withdrawn and made anew at the head", func(w leaseWriter) error {
				return w.update(func(l *coordv1alpha1.FencedLease) {
					l.Spec.Requests = append([]coordv1alpha1.LeaseRequest{{HolderIdentity: "bob-2", User: "bob"}}, l.Spec.Requests[:2]...)
				})
			}, "was moved behind a new request", appendOnly),
		)

		It("is refused by the API's own validation when bob relabels the holder's request as his", func() {
			// The CRD's CEL rule runs before admission webhooks, so this never reaches ours.
			lease.refuses(func() error {
				return lease.as(users["bob"]).jsonPatch(`[{"op":"test","path":"/spec/requests/0/holderIdentity","value":"alice"},
					{"op":"replace","path":"/spec/requests/0/user","value":"bob"}]`)
			}, apierrors.IsInvalid, "user is immutable")
		})
	})

	Context("status and the fencing token", func() {
		var lease leaseUnderTest

		BeforeEach(func() {
			lease = queue("token", "alice", "bob")
		})

		It("are out of a client's reach by RBAC alone", func() {
			for _, who := range []string{"alice", "bob"} {
				w := lease.as(users[who])
				lease.forbids(func() error {
					return w.updateStatus(func(l *coordv1alpha1.FencedLease) { l.Status.HolderIdentity = who; l.Status.FencingToken++ })
				}, fmt.Sprintf(`User %q cannot update resource "fencedleases/status"`, who))
				lease.forbids(func() error {
					return w.patchStatus(types.MergePatchType, `{"status":{"fencingToken":1000}}`)
				}, fmt.Sprintf(`User %q cannot patch resource "fencedleases/status"`, who))
			}
		})

		It("cannot be changed through the main resource: the API server drops the status part", func() {
			before := lease.settled()
			Expect(lease.as(users["bob"]).update(func(l *coordv1alpha1.FencedLease) {
				l.Status.HolderIdentity = "bob"
				l.Status.FencingToken += 100
			})).To(Succeed())
			Expect(lease.as(users["alice"]).update(func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests[0].RenewSequence++ // a legitimate renewal ...
				l.Status.FencingToken--            // ... carrying a forged token
			})).To(Succeed())
			Eventually(func(g Gomega) {
				st := lease.get().Status
				g.Expect(st.RenewSequence).To(BeEquivalentTo(1), "the renewal counts")
				g.Expect(st.HolderIdentity).To(Equal("alice"))
				g.Expect(st.FencingToken).To(Equal(before.Status.FencingToken), "the token never moved")
			}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
		})

		Context("when RBAC wrongly lets clients write status", func() {
			BeforeEach(func() {
				allowInNamespace(rbacv1.PolicyRule{
					APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases/status"},
					Verbs: []string{"update", "patch"},
				}, "alice", "bob")
			})

			DescribeTable("are still refused by the webhook",
				func(who string, write func(w leaseWriter) error) {
					lease.forbids(func() error { return write(lease.as(users[who])) }, statusIsOurs)
				},
				Entry("bob granting himself the lease", "bob", func(w leaseWriter) error {
					return w.updateStatus(func(l *coordv1alpha1.FencedLease) {
						l.Status.HolderIdentity = "bob"
						l.Status.FencingToken++
					})
				}),
				Entry("bob expiring the holder", "bob", func(w leaseWriter) error {
					return w.updateStatus(func(l *coordv1alpha1.FencedLease) {
						l.Status.HolderIdentity = ""
						l.Status.ExpireTime = nil
					})
				}),
				Entry("the holder raising its token", "alice", func(w leaseWriter) error {
					return w.updateStatus(func(l *coordv1alpha1.FencedLease) { l.Status.FencingToken += 10 })
				}),
				Entry("the holder lowering its token", "alice", func(w leaseWriter) error {
					return w.updateStatus(func(l *coordv1alpha1.FencedLease) { l.Status.FencingToken-- })
				}),
				Entry("the holder extending its expiry", "alice", func(w leaseWriter) error {
					return w.updateStatus(func(l *coordv1alpha1.FencedLease) {
						l.Status.ExpireTime = &metav1.MicroTime{Time: l.Status.ExpireTime.Add(time.Hour)}
					})
				}),
				Entry("bob, with a merge patch on /status", "bob", func(w leaseWriter) error {
					return w.patchStatus(types.MergePatchType, `{"status":{"holderIdentity":"bob","fencingToken":1000}}`)
				}),
				Entry("the holder, with a merge patch on /status", "alice", func(w leaseWriter) error {
					return w.patchStatus(types.MergePatchType, `{"status":{"fencingToken":1000}}`)
				}),
				Entry("bob, with a JSON patch on /status", "bob", func(w leaseWriter) error {
					return w.patchStatus(types.JSONPatchType, `[{"op":"replace","path":"/status/holderIdentity","value":"bob"}]`)
				}),
			)
		})
	})

	Context("RBAC", func() {
		It("lets a user with no role neither read nor write a lease", func() {
			lease := createLease("private")
			Eventually(func() []string { return lease.get().Finalizers }).Should(ContainElement(coordv1alpha1.EpochFinalizer))
			u, err := cluster.Env.AddUser(envtest.User{Name: "nobody-" + ns}, nil)
			Expect(err).NotTo(HaveOccurred())
			nobody, err := client.New(u.Config(), client.Options{Scheme: cluster.Scheme})
			Expect(err).NotTo(HaveOccurred())
			cannot := func(verb, resource string) string {
				return fmt.Sprintf(`User "nobody-%s" cannot %s resource %q`, ns, verb, resource)
			}

			err = nobody.Get(suiteCtx, lease.key(), &coordv1alpha1.FencedLease{})
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(cannot("get", "fencedleases")))
			err = nobody.List(suiteCtx, &coordv1alpha1.FencedLeaseList{}, client.InNamespace(ns))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(cannot("list", "fencedleases")))

			// The writes start from the admin's copy: nobody cannot read one.
			w := leaseWriter{c: nobody, l: lease, read: k8sClient}
			lease.forbids(func() error {
				return w.update(func(l *coordv1alpha1.FencedLease) {
					l.Spec.Requests = append(l.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: "nobody", User: "nobody-" + ns})
				})
			}, cannot("update", "fencedleases"))
			lease.forbids(func() error {
				return w.jsonPatch(`[{"op":"add","path":"/spec/requests/-","value":{"holderIdentity":"nobody","user":"nobody"}}]`)
			}, cannot("patch", "fencedleases"))
			lease.forbids(func() error {
				return w.updateStatus(func(l *coordv1alpha1.FencedLease) { l.Status.HolderIdentity = "nobody" })
			}, cannot("update", "fencedleases/status"))
			lease.forbids(func() error {
				return nobody.Delete(suiteCtx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease.name}})
			}, cannot("delete", "fencedleases"))
			err = nobody.Create(suiteCtx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}})
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(cannot("create", "fencedleases")))
		})

		It("lets a lease client neither create nor delete a lease", func() {
			lease := createLease("shared")
			err := users["alice"].Create(suiteCtx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}})
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(`User "alice" cannot create resource "fencedleases"`))
			lease.forbids(func() error {
				return users["alice"].Delete(suiteCtx, lease.get())
			}, `User "alice" cannot delete resource "fencedleases"`)
		})
	})

	Context("creation by a client that RBAC lets create leases", func() {
		BeforeEach(func() {
			allowInNamespace(rbacv1.PolicyRule{
				APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases"}, Verbs: []string{"create"},
			}, "alice")
		})

		DescribeTable("is refused when the new lease carries what is not alice's to write",
			func(mutate func(*coordv1alpha1.FencedLease), says ...string) {
				l := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "created"}}
				mutate(l)
				err := users["alice"].Create(suiteCtx, l)
				Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
				for _, s := range says {
					Expect(err.Error()).To(ContainSubstring(s))
				}
				err = k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(l), &coordv1alpha1.FencedLease{})
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing was created: %v", err)
			},
			Entry("a request in bob's name", func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests = []coordv1alpha1.LeaseRequest{{HolderIdentity: "bob", User: "bob"}}
			}, `names user "bob", but the request comes from "alice"`, onlyForItself),
			Entry("her own request behind bob's", func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests = []coordv1alpha1.LeaseRequest{{HolderIdentity: "bob", User: "bob"}, {HolderIdentity: "alice", User: "alice"}}
			}, `spec.requests[0] (holderIdentity "bob") names user "bob"`, onlyForItself),
			Entry("the expired annotation", func(l *coordv1alpha1.FencedLease) {
				l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: "bob/1"}
			}, annotationOurs),
			Entry("a foreign holder identity under identityBinding ServiceAccount", func(l *coordv1alpha1.FencedLease) {
				l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingServiceAccount
				l.Spec.Requests = []coordv1alpha1.LeaseRequest{{HolderIdentity: "worker-a", User: "alice"}}
			}, `must equal the requester's username "alice"`),
		)

		It("is accepted with alice's own request, and a status sent along is dropped", func() {
			l := &coordv1alpha1.FencedLease{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "created"},
				Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: longLease,
					Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: "alice", User: "alice"}}},
				Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "alice", FencingToken: 1 << 40},
			}
			Expect(users["alice"].Create(suiteCtx, l)).To(Succeed())
			Eventually(func(g Gomega) {
				st := getLease(ns, "created").Status
				g.Expect(st.HolderIdentity).To(Equal("alice"))
				g.Expect(st.FencingToken).To(BeNumerically("<", 1<<40), "the controller minted the token")
			}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
		})
	})

	Context("the controller's own metadata", func() {
		var (
			lease   leaseUnderTest
			expired string // a value the controller would write
		)

		BeforeEach(func() {
			lease = queue("meta", "alice", "bob")
			Expect(lease.get().Finalizers).To(ContainElement(coordv1alpha1.EpochFinalizer))
			expired = fmt.Sprintf("alice/%d", lease.get().Status.FencingToken)
		})

		DescribeTable("is refused to a client",
			func(who string, write func(w leaseWriter, expired string) error, says string) {
				lease.forbids(func() error { return write(lease.as(users[who]), expired) }, says)
			},
			Entry("removing the epoch finalizer (typed Update)", "alice", func(w leaseWriter, _ string) error {
				return w.update(func(l *coordv1alpha1.FencedLease) { l.Finalizers = nil })
			}, finalizerIsOurs),
			Entry("removing the epoch finalizer (JSON patch)", "bob", func(w leaseWriter, _ string) error {
				return w.jsonPatch(fmt.Sprintf(`[{"op":"test","path":"/metadata/finalizers/0","value":%q},
					{"op":"remove","path":"/metadata/finalizers/0"}]`, coordv1alpha1.EpochFinalizer))
			}, finalizerIsOurs),
			Entry("removing the epoch finalizer (merge patch)", "bob", func(w leaseWriter, _ string) error {
				return w.mergePatch(`{"metadata":{"finalizers":null}}`)
			}, finalizerIsOurs),
			Entry("replacing the epoch finalizer with another", "bob", func(w leaseWriter, _ string) error {
				return w.mergePatch(`{"metadata":{"finalizers":["example.com/mine"]}}`)
			}, finalizerIsOurs),
			Entry("setting the expired annotation (merge patch)", "bob", func(w leaseWriter, v string) error {
				return w.mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, coordv1alpha1.ExpiredAnnotation, v))
			}, annotationOurs),
			Entry("setting the expired annotation (typed Update)", "alice", func(w leaseWriter, v string) error {
				return w.update(func(l *coordv1alpha1.FencedLease) {
					l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: v}
				})
			}, annotationOurs),
			Entry("forging an expiry: the annotation plus the holder's request removed", "bob", func(w leaseWriter, v string) error {
				return w.update(func(l *coordv1alpha1.FencedLease) {
					l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: v}
					l.Spec.Requests = l.Spec.Requests[1:]
				})
			}, annotationOurs),
			Entry("setting the expired annotation to an empty value", "bob", func(w leaseWriter, _ string) error {
				return w.mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:""}}}`, coordv1alpha1.ExpiredAnnotation))
			}, annotationOurs),
		)

		It("is the controller's to write: it removes and restores the finalizer, and sets and clears the annotation", func() {
			admin := lease.as(k8sClient)
			Expect(admin.mergePatch(`{"metadata":{"finalizers":null}}`)).To(Succeed())
			Eventually(func() []string { return lease.get().Finalizers }, 10*time.Second, 20*time.Millisecond).
				Should(ContainElement(coordv1alpha1.EpochFinalizer), "the running controller puts it back")

			Expect(admin.mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:"carol/1"}}}`, coordv1alpha1.ExpiredAnnotation))).To(Succeed())
			bob := lease.as(users["bob"])
			lease.forbids(func() error {
				return bob.mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, coordv1alpha1.ExpiredAnnotation))
			}, annotationOurs)
			lease.forbids(func() error {
				return bob.mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, coordv1alpha1.ExpiredAnnotation, expired))
			}, annotationOurs)
			Expect(admin.mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, coordv1alpha1.ExpiredAnnotation))).To(Succeed())
			Expect(lease.get().Annotations).NotTo(HaveKey(coordv1alpha1.ExpiredAnnotation))
		})
	})

	Context("identity binding", func() {
		It("ServiceAccount: a request's holder identity must be the requester's username", func() {
			lease := createLease("by-sa", func(l *coordv1alpha1.FencedLease) {
				l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingServiceAccount
			})
			sa := "system:serviceaccount:" + ns + ":worker"
			worker := lease.as(impersonate(sa, nil))

			lease.forbids(func() error {
				return lease.as(users["alice"]).appendRequest("worker-a", "alice")
			}, `spec.requests[0].holderIdentity "worker-a" must equal the requester's username "alice" (identityBinding ServiceAccount)`)
			lease.forbids(func() error { return worker.appendRequest("worker", sa) },
				fmt.Sprintf(`holderIdentity "worker" must equal the requester's username %q`, sa))

			Expect(lease.as(users["alice"]).appendRequest("alice", "alice")).To(Succeed())
			Expect(worker.appendRequest(sa, sa)).To(Succeed())
			Eventually(func() string { return lease.get().Status.HolderIdentity }, 10*time.Second).Should(Equal("alice"))
			Expect(lease.as(users["alice"]).withdraw("alice")).To(Succeed())
			Eventually(func() string { return lease.get().Status.HolderIdentity }, 10*time.Second).Should(Equal(sa))
		})

		Context("Pod", func() {
			const pod = "worker-7d9f"
			var (
				lease leaseUnderTest
				sa    string
			)

			BeforeEach(func() {
				lease = createLease("by-pod", func(l *coordv1alpha1.FencedLease) {
					l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingPod
				})
				sa = "system:serviceaccount:" + ns + ":worker"
			})

			It("requires the holder identity to be the requester's pod name", func() {
				worker := lease.as(impersonate(sa, map[string][]string{coordv1alpha1.PodNameExtraKey: {pod}}))
				lease.forbids(func() error { return worker.appendRequest("worker-other", sa) },
					`spec.requests[0].holderIdentity "worker-other" must equal the requester's pod name "worker-7d9f" (identityBinding Pod)`)
				lease.forbids(func() error { return lease.as(users["alice"]).appendRequest("alice", "alice") },
					podTokenNeeded, `but user "alice" carries none`)
				lease.forbids(func() error { return lease.as(impersonate(sa, nil)).appendRequest(pod, sa) },
					podTokenNeeded, fmt.Sprintf(`but user %q carries none`, sa))

				Expect(worker.appendRequest(pod, sa)).To(Succeed())
				Eventually(func() string { return lease.get().Status.HolderIdentity }, 10*time.Second).Should(Equal(pod))
				Expect(worker.renew(pod)).To(Succeed())
				Eventually(func() int64 { return lease.get().Status.RenewSequence }, 10*time.Second).Should(BeEquivalentTo(1))
			})

			DescribeTable("refuses a sibling pod of the same service account",
				func(write func(sibling leaseWriter) error) {
					holder := lease.as(impersonate(sa, map[string][]string{coordv1alpha1.PodNameExtraKey: {pod}}))
					Expect(holder.appendRequest(pod, sa)).To(Succeed())
					Eventually(func() string { return lease.get().Status.HolderIdentity }, 10*time.Second).Should(Equal(pod))
					sibling := lease.as(impersonate(sa, map[string][]string{coordv1alpha1.PodNameExtraKey: {"worker-other"}}))
					lease.forbids(func() error { return write(sibling) }, `"worker-7d9f"`)
				},
				Entry("renewing the holder's request", func(sibling leaseWriter) error { return sibling.renew(pod) }),
				Entry("withdrawing the holder's request (a stolen release)", func(sibling leaseWriter) error { return sibling.withdraw(pod) }),
			)
		})
	})

	It("accepts a client's own changes: append, renew, withdraw; a release hands over", func() {
		lease := createLease("own")
		alice, bob, carol := lease.as(users["alice"]), lease.as(users["bob"]), lease.as(users["carol"])

		By("appending, with a typed Update, a JSON patch and server-side apply")
		Expect(alice.appendRequest("alice", "alice")).To(Succeed())
		Eventually(func() string { return lease.get().Status.HolderIdentity }, 10*time.Second).Should(Equal("alice"))
		granted := lease.get().Status
		Expect(bob.jsonPatch(`[{"op":"add","path":"/spec/requests/-","value":{"holderIdentity":"bob","user":"bob"}}]`)).To(Succeed())
		Expect(carol.apply(coordv1alpha1.LeaseRequest{HolderIdentity: "carol", User: "carol"})).To(Succeed())
		Expect(lease.get().Spec.Requests).To(HaveLen(3))
		Expect(lease.get().Spec.Requests[2].HolderIdentity).To(Equal("carol"), "apply appends at the end")

		By("renewing its own request")
		Expect(alice.renew("alice")).To(Succeed())
		Expect(alice.renew("alice")).To(Succeed())
		Eventually(func(g Gomega) {
			st := lease.get().Status
			g.Expect(st.RenewSequence).To(BeEquivalentTo(2))
			g.Expect(st.FencingToken).To(Equal(granted.FencingToken))
		}, 10*time.Second, 20*time.Millisecond).Should(Succeed())

		By("withdrawing its own waiting request")
		Expect(carol.withdraw("carol")).To(Succeed())
		Eventually(func() []coordv1alpha1.WaitingRequest { return lease.get().Status.Waiting }, 10*time.Second).
			Should(ConsistOf(HaveField("HolderIdentity", "bob")))

		By("releasing: the controller hands over to the next in line")
		Expect(alice.withdraw("alice")).To(Succeed())
		Eventually(func() string { return lease.get().Status.HolderIdentity }, 10*time.Second).Should(Equal("bob"))
		l := lease.get()
		Expect(l.Status.FencingToken).To(BeNumerically(">", granted.FencingToken))
		Expect(heldCondition(l).Reason).To(Equal(coordv1alpha1.ReasonHandedOver))
		Expect(l.Status.PreviousHolder.HolderIdentity).To(Equal("alice"))
		Expect(l.Status.PreviousHolder.Reason).To(Equal(coordv1alpha1.EndReasonReleased))

		By("releasing with a merge patch of the whole (now empty) queue")
		Expect(bob.mergePatch(`{"spec":{"requests":null}}`)).To(Succeed())
		Eventually(func() string { return heldCondition(lease.get()).Reason }, 10*time.Second).Should(Equal(coordv1alpha1.ReasonReleased))
		Expect(lease.get().Status.HolderIdentity).To(BeEmpty())
	})
})

// leaseUnderTest names the FencedLease one admission spec works on.
type leaseUnderTest struct{ ns, name string }

func (l leaseUnderTest) key() types.NamespacedName {
	return types.NamespacedName{Namespace: l.ns, Name: l.name}
}

func (l leaseUnderTest) get() *coordv1alpha1.FencedLease { return getLease(l.ns, l.name) }

// settled waits until the controller has acted on the lease's latest spec and
// stopped writing it, so that a refused write can be shown to change nothing.
func (l leaseUnderTest) settled() *coordv1alpha1.FencedLease {
	GinkgoHelper()
	var last *coordv1alpha1.FencedLease
	Eventually(func() bool {
		cur := l.get()
		same := last != nil && cur.ResourceVersion == last.ResourceVersion
		last = cur
		return same && cur.Status.ObservedGeneration == cur.Generation &&
			slices.Contains(cur.Finalizers, coordv1alpha1.EpochFinalizer)
	}, 10*time.Second, 300*time.Millisecond).Should(BeTrue(), "the controller keeps writing the lease")
	return last
}

// refuses runs write against the settled lease and asserts that it is refused
// with is and every one of says, and that the lease is exactly as before.
func (l leaseUnderTest) refuses(write func() error, is func(error) bool, says ...string) {
	GinkgoHelper()
	before := l.settled()
	err := write()
	Expect(err).To(HaveOccurred(), "the write was accepted")
	Expect(is(err)).To(BeTrue(), "refused for the wrong reason: %v", err)
	for _, s := range says {
		Expect(err.Error()).To(ContainSubstring(s))
	}
	after := l.get()
	Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the lease was written")
	Expect(after.Spec).To(Equal(before.Spec))
	Expect(after.Status).To(Equal(before.Status))
	Expect(after.Finalizers).To(Equal(before.Finalizers))
	Expect(after.Annotations).To(Equal(before.Annotations))
}

// forbids is refuses with a 403 Forbidden.
func (l leaseUnderTest) forbids(write func() error, says ...string) {
	GinkgoHelper()
	l.refuses(write, apierrors.IsForbidden, says...)
}

// as returns a writer acting on the lease with c's identity.
func (l leaseUnderTest) as(c client.Client) leaseWriter { return leaseWriter{c: c, l: l, read: c} }

// leaseWriter writes one lease as one user, in each of the ways a client can.
type leaseWriter struct {
	c client.Client
	l leaseUnderTest
	// read is where read-modify-write starts from (c, unless c cannot read).
	read client.Client
}

func (w leaseWriter) ref() *coordv1alpha1.FencedLease {
	return &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: w.l.ns, Name: w.l.name}}
}

func (w leaseWriter) jsonPatch(p string) error {
	return w.c.Patch(suiteCtx, w.ref(), client.RawPatch(types.JSONPatchType, []byte(p)))
}

func (w leaseWriter) mergePatch(p string) error {
	return w.c.Patch(suiteCtx, w.ref(), client.RawPatch(types.MergePatchType, []byte(p)))
}

// apply sends requests with server-side apply, forcing ownership of the fields.
func (w leaseWriter) apply(requests ...coordv1alpha1.LeaseRequest) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": coordv1alpha1.GroupVersion.String(),
		"kind":       "FencedLease",
		"metadata":   map[string]string{"namespace": w.l.ns, "name": w.l.name},
		"spec":       map[string]any{"requests": requests},
	})
	Expect(err).NotTo(HaveOccurred())
	return w.c.Patch(suiteCtx, w.ref(), client.RawPatch(types.ApplyYAMLPatchType, body),
		client.FieldOwner("admission-test"), client.ForceOwnership)
}

// update is a typed read-modify-write; a conflict with the controller's own
// writes means read again and retry, as a client would.
func (w leaseWriter) update(mutate func(*coordv1alpha1.FencedLease)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var l coordv1alpha1.FencedLease
		if err := w.read.Get(suiteCtx, w.l.key(), &l); err != nil {
			return err
		}
		mutate(&l)
		return w.c.Update(suiteCtx, &l)
	})
}

func (w leaseWriter) updateStatus(mutate func(*coordv1alpha1.FencedLease)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var l coordv1alpha1.FencedLease
		if err := w.read.Get(suiteCtx, w.l.key(), &l); err != nil {
			return err
		}
		mutate(&l)
		return w.c.Status().Update(suiteCtx, &l)
	})
}

func (w leaseWriter) patchStatus(pt types.PatchType, p string) error {
	return w.c.Status().Patch(suiteCtx, w.ref(), client.RawPatch(pt, []byte(p)))
}

// appendRequest appends a request at the end of the queue (typed Update).
func (w leaseWriter) appendRequest(holderIdentity, user string) error {
	return w.update(func(l *coordv1alpha1.FencedLease) {
		l.Spec.Requests = append(l.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: holderIdentity, User: user})
	})
}

// renew raises the renewSequence of holderIdentity's request (typed Update).
func (w leaseWriter) renew(holderIdentity string) error {
	return w.update(func(l *coordv1alpha1.FencedLease) {
		for i := range l.Spec.Requests {
			if l.Spec.Requests[i].HolderIdentity == holderIdentity {
				l.Spec.Requests[i].RenewSequence++
			}
		}
	})
}

// withdraw removes holderIdentity's request (typed Update).
func (w leaseWriter) withdraw(holderIdentity string) error {
	return w.update(func(l *coordv1alpha1.FencedLease) {
		l.Spec.Requests = slices.DeleteFunc(l.Spec.Requests, func(r coordv1alpha1.LeaseRequest) bool {
			return r.HolderIdentity == holderIdentity
		})
	})
}

var _ = Describe("FencedLease settings (I6)", func() {
	It("lets only admins change an existing lease's duration, lock-delay and token floor", func() {
		ns := newNamespace()
		newLease(ns, "settings", 30, 0)
		for _, change := range []func(*coordv1alpha1.FencedLease){
			func(l *coordv1alpha1.FencedLease) { l.Spec.LeaseDurationSeconds = 1 },
			func(l *coordv1alpha1.FencedLease) { l.Spec.LockDelaySeconds = 3600 },
			func(l *coordv1alpha1.FencedLease) { l.Spec.MinFencingToken = 4611686018427387904 },
		} {
			l := getLease(ns, "settings")
			change(l)
			err := users["alice"].Update(suiteCtx, l)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
			Expect(err.Error()).To(ContainSubstring("only the kubefence controller and members of [system:masters] may change leaseDurationSeconds"))
		}
		Expect(getLease(ns, "settings").Spec.LeaseDurationSeconds).To(Equal(int32(30)))
		l := getLease(ns, "settings")
		l.Spec.LeaseDurationSeconds = 20
		Expect(k8sClient.Update(suiteCtx, l)).To(Succeed(), "an admin (system:masters) may")
	})
})
