package ruletable

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
	"github.com/kubefence/kubefence/pkg/fence"
)

// Modes are the two enforcement modes every row runs in (the values of
// operator.EnforcementWebhook and operator.EnforcementPolicy).
const (
	Webhook = "webhook"
	Policy  = "policy"
)

// Policy-only refusal classes: what the fencing policy refuses for its
// tenure table, which the webhook never reads.
const (
	// ReasonTable: the namespace's tenure table was written for another
	// installation of the fencing policy.
	ReasonTable fencing.Reason = "tenure-table"
	// ReasonNoTable: the namespace has no tenure table (no lease there
	// was ever granted or recorded).
	ReasonNoTable fencing.Reason = "no-table"
	// ReasonTerminating: the namespace is marked as being deleted; only
	// the clean-up users' clean-up writes are accepted (the terminating
	// policy).
	ReasonTerminating fencing.Reason = "terminating"
	// ReasonCRD: the CRD's own validation refused the write (422), before
	// any admission.
	ReasonCRD fencing.Reason = "crd"
	// ReasonOther: a refusal none of the classes above describes (a
	// defect of the table or of a back end).
	ReasonOther fencing.Reason = "other"
)

// Verdict is an answer to a write, as a client sees it.
type Verdict struct {
	Allowed bool
	// Judge is who refused: "webhook <name>", "policy <name>", "crd" or
	// "" (allowed, or not an admission refusal).
	Judge string
	// Reason is the refusal's class: a webhook's from its HTTP code and
	// typed causes, a policy's from its message (PolicyReason).
	Reason  fencing.Reason
	Code    int32
	Message string
	// Causes are the typed causes of a stale refusal, field by field.
	Causes map[string]string
	// Stale is fence.IsStale of the refusal: what a client helper makes of it.
	Stale bool
}

var (
	webhookJudge = regexp.MustCompile(`admission webhook "([^"]+)" denied the request: `)
	policyJudge  = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)'(?: with binding '[^']+')? denied request: `)
)

// VerdictOf reads a write's answer: nil is allowed, any other error a
// refusal (an error that is not an API status is a refusal of class
// ReasonOther).
func VerdictOf(err error) Verdict {
	if err == nil {
		return Verdict{Allowed: true}
	}
	v := Verdict{Reason: ReasonOther, Message: err.Error(), Stale: fence.IsStale(err)}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return v
	}
	s := st.Status()
	v.Code, v.Message = s.Code, s.Message
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			if c.Type == coordv1alpha1.CauseTypeStaleFencingToken {
				if v.Causes == nil {
					v.Causes = map[string]string{}
				}
				v.Causes[c.Field] = c.Message
			}
		}
	}
	switch {
	case webhookJudge.MatchString(v.Message):
		v.Judge = "webhook " + webhookJudge.FindStringSubmatch(v.Message)[1]
		v.Reason = webhookReason(v.Code, v.Causes, v.Message)
	case policyJudge.MatchString(v.Message):
		v.Judge = "policy " + policyJudge.FindStringSubmatch(v.Message)[1]
		v.Reason = PolicyReason(v.Message[policyJudge.FindStringIndex(v.Message)[1]:])
	case apierrors.IsInvalid(err):
		v.Judge, v.Reason = "crd", ReasonCRD
	}
	return v
}

// webhookReason is the class of a fencing webhook's refusal: the typed
// causes name it for the stale classes, the HTTP code for the others.
func webhookReason(code int32, causes map[string]string, msg string) fencing.Reason {
	if r, ok := causes[coordv1alpha1.CauseFieldReason]; ok {
		return fencing.Reason(r)
	}
	if code == http.StatusForbidden && strings.Contains(msg, uncheckableMarker) {
		return coordv1alpha1.RefusalUncheckable
	}
	for _, c := range webhookCodes {
		if c.code == code {
			return c.reason
		}
	}
	return ReasonOther
}

// webhookCodes pair the fencing webhook's HTTP codes with the class of its
// refusals that come with that code and no typed cause (webhookReason), and
// are the code of each class listed (WebhookCode).
var webhookCodes = []struct {
	reason fencing.Reason
	code   int32
}{
	{coordv1alpha1.RefusalMalformed, http.StatusBadRequest},
	{coordv1alpha1.RefusalNoLease, http.StatusNotFound},
	{coordv1alpha1.RefusalUnguarded, http.StatusForbidden},
	{coordv1alpha1.RefusalNotIssued, http.StatusConflict},
	{coordv1alpha1.RefusalLeaseError, http.StatusInternalServerError},
	{coordv1alpha1.RefusalSlow, http.StatusServiceUnavailable},
}

// WebhookCode is the HTTP code of the fencing webhook's refusals of class r.
func WebhookCode(r fencing.Reason) int32 {
	if r == coordv1alpha1.RefusalNotHolder || r == coordv1alpha1.RefusalUncheckable {
		return http.StatusForbidden
	}
	for _, c := range webhookCodes {
		if c.reason == r {
			return c.code
		}
	}
	return http.StatusConflict // stale, expired, no holder: with typed causes
}

// policyCode is the HTTP code of the fencing policy's refusals of class
// r: 403 (its validation's reason, Forbidden), or 422 when the binding
// finds no tenure table (a configuration error of the binding, Invalid).
func policyCode(r fencing.Reason) int32 {
	if r == ReasonNoTable {
		return http.StatusUnprocessableEntity
	}
	return http.StatusForbidden
}

// StaleClass tells whether refusals of class r are stale writes: the ones
// that carry typed causes from the webhook, and that fence.IsStale
// recognises in both modes.
func StaleClass(r fencing.Reason) bool {
	switch r {
	case coordv1alpha1.RefusalStale, coordv1alpha1.RefusalExpired, coordv1alpha1.RefusalNoHolder, coordv1alpha1.RefusalNotHolder:
		return true
	}
	return false
}

// PolicyReason is the class of a fencing policy refusal's message (the part
// after "denied request: "): the policy's messages (controllers/policy,
// variables and holderCheck/tokenCheck) each say which branch of the
// webhook's rule they are.
func PolicyReason(msg string) fencing.Reason {
	switch {
	case strings.HasPrefix(msg, "namespace ") && (strings.Contains(msg, " is being deleted: ") || strings.Contains(msg, " but is not being deleted")):
		return ReasonTerminating
	case strings.HasPrefix(msg, uncheckableMarker):
		return coordv1alpha1.RefusalUncheckable
	case strings.Contains(msg, "was not written for the installed fencing policy"):
		return ReasonTable
	case strings.Contains(msg, "no params found"):
		return ReasonNoTable
	case strings.HasPrefix(msg, "fencing is required for this kind"):
		return coordv1alpha1.RefusalUnguarded
	case strings.Contains(msg, "has no entry in the tenure table"):
		return coordv1alpha1.RefusalNoLease
	case strings.Contains(msg, "has no holder"):
		return coordv1alpha1.RefusalNoHolder
	case strings.HasPrefix(msg, "missing fencing token"), strings.HasPrefix(msg, "invalid fencing token"):
		return coordv1alpha1.RefusalMalformed
	case strings.Contains(msg, "was never issued"):
		return coordv1alpha1.RefusalNotIssued
	case strings.HasPrefix(msg, coordv1alpha1.StaleMarker):
		return coordv1alpha1.RefusalStale
	case strings.Contains(msg, coordv1alpha1.NotHolderMarker):
		return coordv1alpha1.RefusalNotHolder
	}
	return ReasonOther
}

// uncheckableMarker begins both back ends' refusal of a guard on a
// cluster-scoped object.
const uncheckableMarker = "this object is cluster-scoped"

// Want is what a row expects of one mode.
type Want struct {
	Allowed bool
	// Reason is the class of the refusal.
	Reason fencing.Reason
	// Msg is a fragment of the refusal's message ("" for none).
	Msg string
}

// Allowed is the verdict of an accepted write.
var Allowed = Want{Allowed: true}

// Refused is a refusal of class r whose message contains msg.
func Refused(r fencing.Reason, msg string) Want { return Want{Reason: r, Msg: msg} }

func (w Want) String() string {
	if w.Allowed {
		return "allowed"
	}
	return fmt.Sprintf("refused (%s) %q", w.Reason, w.Msg)
}

func (v Verdict) String() string {
	if v.Allowed {
		return "allowed"
	}
	return fmt.Sprintf("refused by %s (%s, %d): %s", v.Judge, v.Reason, v.Code, v.Message)
}
