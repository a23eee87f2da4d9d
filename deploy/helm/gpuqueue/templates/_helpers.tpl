{{/* Names and labels. */}}
{{- define "gpuqueue.labels" -}}
app.kubernetes.io/name: gpuqueue
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "gpuqueue.selector" -}}
app.kubernetes.io/name: gpuqueue
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpuqueue.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The ServiceAccount every process runs as; the admission policy lets it through. */}}
{{- define "gpuqueue.serviceAccount" -}}
{{ .Release.Name }}
{{- end }}

{{/* A list of ServiceAccounts' user names as a CEL list of strings, each checked to be one (the
name goes into a CEL expression: nothing else may). */}}
{{- define "gpuqueue.celUsers" -}}
[{{ range $i, $user := . }}
{{- if not (regexMatch "^system:serviceaccount:[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" $user) }}
{{- fail (printf "admissionPolicy: %q is not a ServiceAccount's user name (system:serviceaccount:<namespace>:<name>)" $user) }}
{{- end }}
{{- if $i }}, {{ end }}'{{ $user }}'
{{- end }}]
{{- end }}

{{/* Pod Security "restricted", and a read-only root filesystem (writes go to /tmp). */}}
{{- define "gpuqueue.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gpuqueue.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end }}

{{- define "gpuqueue.env" -}}
envFrom:
  - configMapRef: {name: {{ .Release.Name }}-config}
  - secretRef: {name: {{ .Values.existingSecret }}}
volumeMounts:
  - {name: tmp, mountPath: /tmp}
{{- end }}

{{/* Until the migration hook has brought the schema up to this release. */}}
{{- define "gpuqueue.waitForSchema" -}}
- name: wait-for-schema
  image: {{ include "gpuqueue.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- include "gpuqueue.containerSecurity" . | nindent 2 }}
  command: ["sh", "-c", "until python manage.py migrate --check; do sleep 5; done"]
  {{- include "gpuqueue.env" . | nindent 2 }}
  resources: {{- toYaml .Values.resources.migrate | nindent 4 }}
{{- end }}

{{/* Replicas of one component on different nodes where the cluster allows it (preferred, not
required: a one-node cluster still runs them all), so that a node's loss takes one of them. */}}
{{- define "gpuqueue.spread" -}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels: {{- include "gpuqueue.selector" . | nindent 14 }}
{{- end }}
