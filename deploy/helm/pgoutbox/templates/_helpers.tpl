{{/* The release's resource name, at most 63 characters. */}}
{{- define "pgoutbox.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pgoutbox.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pgoutbox.labels" -}}
{{ include "pgoutbox.selectorLabels" . }}
app.kubernetes.io/version: {{ (.Values.image.tag | default .Chart.AppVersion) | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: relay
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pgoutbox.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The chart's own Secret: only for the values not in an existing one. */}}
{{- define "pgoutbox.secretName" -}}
{{ include "pgoutbox.fullname" . }}
{{- end -}}

{{- define "pgoutbox.ownDatabaseSecret" -}}
{{- if not .Values.database.existingSecret }}true{{ end -}}
{{- end -}}

{{- define "pgoutbox.ownSASLSecret" -}}
{{- if and .Values.kafka.sasl.mechanism (not .Values.kafka.sasl.existingSecret) }}true{{ end -}}
{{- end -}}

{{/* Refuses a configuration the relay would refuse at start. */}}
{{- define "pgoutbox.validate" -}}
{{- if not .Values.relay.brokers }}{{ fail "relay.brokers: required, e.g. --set 'relay.brokers={kafka:9092}'" }}{{ end -}}
{{- if not .Values.relay.topic }}{{ fail "relay.topic: required (the topic of events whose row names none)" }}{{ end -}}
{{- if and (not .Values.database.existingSecret) (not .Values.database.url) }}{{ fail "database: set database.existingSecret (a Secret holding DATABASE_URL) or database.url" }}{{ end -}}
{{- with .Values.kafka.sasl }}
{{- if .mechanism }}
{{- if not (has .mechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512")) }}{{ fail (printf "kafka.sasl.mechanism: %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512" .mechanism) }}{{ end -}}
{{- if not .username }}{{ fail "kafka.sasl.username: required with kafka.sasl.mechanism" }}{{ end -}}
{{- if and (not .existingSecret) (not .password) }}{{ fail "kafka.sasl: set kafka.sasl.existingSecret or kafka.sasl.password" }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The environment both containers read: DATABASE_URL, then SASL. */}}
{{- define "pgoutbox.databaseEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.database.existingSecret }}
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.existingSecretKey }}
      {{- else }}
      name: {{ include "pgoutbox.secretName" . }}
      key: DATABASE_URL
      {{- end }}
{{- end -}}
