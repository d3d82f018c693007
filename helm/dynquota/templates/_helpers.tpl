{{/* Chart name. */}}
{{- define "dynquota.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release name, unless it lacks the chart name. */}}
{{- define "dynquota.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dynquota.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels (stable across upgrades). */}}
{{- define "dynquota.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dynquota.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every chart object. Note: managed-by is Helm here; the quotas the operator
     manages carry app.kubernetes.io/managed-by=dynquota instead. */}}
{{- define "dynquota.labels" -}}
helm.sh/chart: {{ include "dynquota.chart" . }}
{{ include "dynquota.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dynquota
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "dynquota.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dynquota.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator's user name as the apiserver sees it. */}}
{{- define "dynquota.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "dynquota.serviceAccountName" . }}
{{- end }}

{{/* Name of the uninstall cleanup hook's ServiceAccount (and its RBAC and Job). */}}
{{- define "dynquota.cleanupName" -}}
{{- printf "%s-cleanup" (include "dynquota.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The cleanup hook's user name as the apiserver sees it. */}}
{{- define "dynquota.cleanupUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "dynquota.cleanupName" . }}
{{- end }}

{{/* Image reference: digest wins over tag; tag defaults to appVersion. */}}
{{- define "dynquota.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Leader election: leaderElection.enabled (default true), for any replica count. Turning it off
with more than one replica is refused: two operators would write without a Lease. So is
setting DYNQUOTA_LEADER_ELECTION through operator.extraEnv (the chart would render the Lease
RBAC, strategy and alert for the other value).
*/}}
{{- define "dynquota.leaderElection" -}}
{{- range $e := (.Values.operator.extraEnv | default list) }}
{{- if eq (toString $e.name) "DYNQUOTA_LEADER_ELECTION" }}
{{- fail "operator.extraEnv sets DYNQUOTA_LEADER_ELECTION: set leaderElection.enabled instead (the Lease RBAC, the Deployment strategy and the DynquotaNoLeader alert follow it)" }}
{{- end }}
{{- end }}
{{- if .Values.leaderElection.enabled }}true
{{- else if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "leaderElection.enabled=false needs replicaCount 1 (got %d): more replicas without leader election would all write" (int .Values.replicaCount)) }}
{{- else }}false
{{- end }}
{{- end }}

{{/*
The Deployment rolls (RollingUpdate) when leader election is on and the live Deployment's
operator already runs with it (or there is none, or lookup sees no cluster: helm template).
An upgrade that turns leader election on keeps Recreate once: rolling would start the new
operator, which takes the free Lease, beside the old one, which writes without it. See
docs/chart.md.
*/}}
{{- define "dynquota.rollingUpdate" -}}
{{- $roll := eq (include "dynquota.leaderElection" .) "true" -}}
{{- $live := lookup "apps/v1" "Deployment" .Release.Namespace (include "dynquota.fullname" .) -}}
{{- if and $roll $live -}}
{{- $roll = false -}}
{{- range $c := $live.spec.template.spec.containers -}}
{{- range $e := ($c.env | default list) -}}
{{- if eq $e.name "DYNQUOTA_LEADER_ELECTION" -}}
{{- $roll = eq (toString $e.value) "true" -}}{{/* the last one wins, as in Kubernetes */}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $roll -}}
{{- end }}

{{/*
The uninstall hook's delete rate: cleanupOnUninstall.deleteQPS, or (0) operator.killSwitchDeleteQPS.
*/}}
{{- define "dynquota.cleanupQPS" -}}
{{- $c := .Values.cleanupOnUninstall -}}
{{- if $c.deleteQPS }}{{ $c.deleteQPS }}{{ else }}{{ .Values.operator.killSwitchDeleteQPS }}{{ end -}}
{{- end }}

{{/*
The uninstall hook Job's activeDeadlineSeconds: the value if set, else 120 s (stopping the
operator: `dynquota cleanup --timeout`) + 30 s (the command's margin over count / qps) + 60 s
(starting the pod, listing) + ceil(maxNamespaces / qps). See docs/chart.md.
*/}}
{{- define "dynquota.cleanupDeadline" -}}
{{- $c := .Values.cleanupOnUninstall -}}
{{- if $c.activeDeadlineSeconds }}{{ $c.activeDeadlineSeconds }}{{ else -}}
{{- $qps := float64 (include "dynquota.cleanupQPS" .) -}}
{{- add 210 (ceil (divf $c.maxNamespaces $qps) | int) -}}
{{- end -}}
{{- end }}

{{/*
The default policy's dryRun: the value when set (true/false); unset (null): the live policy's
spec.dryRun on an upgrade (an upgrade never switches enforcement by itself), true on a first
install or where lookup sees no cluster (helm template). See docs/upgrade.md.
*/}}
{{- define "dynquota.defaultPolicyDryRun" -}}
{{- $v := .Values.defaultPolicy.dryRun -}}
{{- if kindIs "bool" $v -}}
{{- $v -}}
{{- else -}}
{{- $live := lookup "dynquota.io/v1alpha1" "DynamicQuotaPolicy" "" .Values.defaultPolicy.name -}}
{{- if $live -}}
{{- $live.spec.dryRun | default false -}}
{{- else -}}
true
{{- end -}}
{{- end -}}
{{- end }}

{{/*
Match conditions of the operator-confinement family (templates/operator-policy.yaml): the
operator's ServiceAccount only, so a policy of the family never evaluates anyone else's request.
*/}}
{{- define "dynquota.operatorMatchConditions" -}}
- name: operator-only
  expression: {{ printf "request.userInfo.username == %s" (include "dynquota.operatorUser" . | toJson) | quote }}
{{- end }}

{{/*
CEL: whether the label key `k` is guarded (governanceLabels: guardedKeyPrefixes, guardedKeys).
*/}}
{{- define "dynquota.guardedKeyCEL" -}}
{{- $g := .Values.governanceLabels -}}
{{- $terms := list -}}
{{- range $g.guardedKeyPrefixes }}{{ $terms = append $terms (printf "k.startsWith(%s)" (toJson .)) }}{{ end -}}
{{- if $g.guardedKeys }}{{ $terms = append $terms (printf "k in %s" (toJson $g.guardedKeys)) }}{{ end -}}
{{- if $terms }}({{ join " || " $terms }}){{ else }}false{{ end -}}
{{- end }}
