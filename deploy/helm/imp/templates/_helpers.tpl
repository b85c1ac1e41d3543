{{/* The image reference: by digest when one is given, else by tag (default: the chart's appVersion). */}}
{{- define "imp.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "imp.labels" -}}
app.kubernetes.io/name: imp
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
deploy/rbac, the one source of Imp's RBAC (the tests install it as it is), with its namespace
imp-system replaced by the release's.
*/}}
{{- define "imp.rbacFile" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{ $root.Files.Get (printf "files/rbac/%s" $file) | replace "imp-system" $root.Release.Namespace }}
{{- end -}}
