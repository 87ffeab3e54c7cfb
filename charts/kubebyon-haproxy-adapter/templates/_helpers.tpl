{{/* The chart's name, and the full name every object is called (the release name when it contains it). */}}
{{- define "kha.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kha.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kha.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "kha.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Pods of one component (adapter or edge): call with (dict "root" $ "component" "edge"). */}}
{{- define "kha.selector" -}}
app.kubernetes.io/name: {{ include "kha.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The pods that run an adapter container: the adapter Deployment (central) or the edge pods (sidecar). */}}
{{- define "kha.adapterComponent" -}}
{{- if eq .Values.mode "sidecar" -}}edge{{- else -}}adapter{{- end -}}
{{- end -}}

{{- define "kha.secretName" -}}
{{- default (include "kha.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{/* Fails the render on a value the chart cannot honour, with the value's name. */}}
{{- define "kha.validate" -}}
{{- if not (has .Values.mode (list "central" "sidecar")) -}}
{{- fail (printf "mode must be central or sidecar, not %q" .Values.mode) -}}
{{- end -}}
{{- if not (has .Values.edge.kind (list "DaemonSet" "Deployment")) -}}
{{- fail (printf "edge.kind must be DaemonSet or Deployment, not %q" .Values.edge.kind) -}}
{{- end -}}
{{- if not (has .Values.adapter.nodeAddressType (list "internal" "external")) -}}
{{- fail (printf "adapter.nodeAddressType must be internal or external, not %q" .Values.adapter.nodeAddressType) -}}
{{- end -}}
{{- end -}}

{{- define "kha.edgeImage" -}}
{{- $image := get .Values.edge.images .Values.mode -}}
{{- printf "%s:%s" $image.repository (toString $image.tag) -}}
{{- end -}}

{{- define "kha.adapterImage" -}}
{{- printf "%s:%s" .Values.adapter.image.repository (default .Chart.AppVersion .Values.adapter.image.tag | toString) -}}
{{- end -}}

{{/*
The ServiceAccount token as a projected volume (automounting is off): a short-lived token the kubelet
rotates (the adapter's client re-reads the file), the cluster's CA and the namespace, at the usual path.
*/}}
{{- define "kha.tokenVolume" -}}
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: {{ .Values.adapter.tokenExpirationSeconds }}
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- end -}}
