{{/* Labels Helm adds to every object, besides those of config/. */}}
{{- define "kubefence.helmLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The labels of most objects: those of config/ plus Helm's. */}}
{{- define "kubefence.labels" -}}
app.kubernetes.io/name: kubefence
{{ include "kubefence.helmLabels" . }}
{{- end -}}

{{/* Whether cert-manager issues the webhook certificate. */}}
{{- define "kubefence.certManager" -}}
{{- if eq .Values.certificates.mode "cert-manager" -}}true{{- else if eq .Values.certificates.mode "self-signed" -}}{{- else -}}
{{- fail (printf "certificates.mode %q: expected \"self-signed\" or \"cert-manager\"" .Values.certificates.mode) -}}
{{- end -}}
{{- end -}}

{{/* annotations of the validating webhook configurations. */}}
{{- define "kubefence.webhookAnnotations" -}}
{{- if include "kubefence.certManager" . -}}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/kubefence-serving-cert
{{- end -}}
{{- end -}}

{{/* The namespaces the fencing webhooks never match. */}}
{{- define "kubefence.excludedNamespaces" -}}
{{- $ns := list .Release.Namespace -}}
{{- range .Values.excludedNamespaces -}}{{- if ne . $.Release.Namespace -}}{{- $ns = append $ns . -}}{{- end -}}{{- end -}}
{{- toJson $ns -}}
{{- end -}}

{{/*
kubefence.enforcement is .Values.enforcement, checked: "webhook" or "policy".
*/}}
{{- define "kubefence.enforcement" -}}
{{- if not (has .Values.enforcement (list "webhook" "policy")) -}}
{{- fail (printf "enforcement is %q: expected \"webhook\" (the fencing webhook decides guarded writes) or \"policy\" (a ValidatingAdmissionPolicy does, docs/design.md)" .Values.enforcement) -}}
{{- end -}}
{{- .Values.enforcement -}}
{{- end -}}

{{/*
kubefence.runbookBaseURL is where the alerts' runbooks (docs/ of the installed
version) are served: prometheusRule.runbookBaseURL, else the chart's home at
the tag of its appVersion (<home>/blob/<appVersion>/docs; appVersion is vX.Y.Z), else empty (the
runbook_url stays the path docs/operations.md#<alert>).
*/}}
{{- define "kubefence.runbookBaseURL" -}}
{{- with .Values.prometheusRule.runbookBaseURL -}}
{{- trimSuffix "/" . -}}
{{- else -}}
{{- with .Chart.Home -}}
{{- printf "%s/blob/%s/docs" (trimSuffix "/" .) $.Chart.AppVersion -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* evictionScope: "labelled" or "cluster" (values.yaml). */}}
{{- define "kubefence.evictionScope" -}}
{{- if has .Values.evictionScope (list "labelled" "cluster") -}}{{ .Values.evictionScope }}{{- else -}}
{{- fail (printf "evictionScope %q: expected \"labelled\" or \"cluster\"" .Values.evictionScope) -}}
{{- end -}}
{{- end -}}

{{- /*
kubefence.image is the manager image: image.repository (required: kubefence
has no default image, docs/operations.md#image), tagged image.tag or, when
that is empty, the chart's appVersion (the release, vX.Y.Z).
*/ -}}
{{- define "kubefence.image" -}}
{{- $repo := required "image.repository is not set: kubefence has no default image. Set it to the registry/name of the manager image you pushed or your release's (--set image.repository=registry.example.com/kubefence); image.tag defaults to the chart's appVersion. See docs/operations.md#image" .Values.image.repository -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
