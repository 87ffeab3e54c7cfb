{{/*
The adapter container, in both shapes: the central Deployment's only container, or the sidecar beside each
edge pod's HAProxy. Non-root, read-only root filesystem, every capability dropped, RuntimeDefault seccomp
(from the pod). Settings: README, "Configuration".
*/}}
{{- define "kha.adapterContainer" -}}
{{- $v := .Values -}}
{{- $sidecar := eq $v.mode "sidecar" -}}
- name: adapter
  image: {{ include "kha.adapterImage" . }}
  imagePullPolicy: {{ $v.imagePullPolicy }}
  args: ["serve"]
  ports:
    - name: http
      containerPort: {{ $v.adapter.port }}
      protocol: TCP
  env:
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- if $sidecar }}
    # The pod is on the node's network: listen on the pod's (the node's) address only, not on every one.
    - name: KUBEBYON_LISTEN_ADDR
      value: "$(POD_IP):{{ $v.adapter.port }}"
    {{- else }}
    - name: KUBEBYON_LISTEN_ADDR
      value: "0.0.0.0:{{ $v.adapter.port }}"
    {{- end }}
    - name: KUBEBYON_LOG_LEVEL
      value: {{ $v.adapter.logLevel | quote }}
    # The desired state is in ClusterRoute objects (crds/), shared by every adapter; the file below is only
    # this pod's scratch copy (with the replay file and the provider's files beside it).
    - name: KUBEBYON_STATE_STORE
      value: kubernetes
    - name: KUBEBYON_STATE_FILE
      value: /var/lib/kubebyon-haproxy-adapter/clusters.json
    - name: KUBEBYON_KUBERNETES_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: KUBEBYON_LEADER_ELECTION
      value: "true"
    - name: KUBEBYON_LEADER_ELECTION_ID
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: KUBEBYON_LEASE_NAME
      value: {{ include "kha.fullname" . }}
    - name: KUBEBYON_LEASE_DURATION_MS
      value: {{ $v.adapter.lease.durationMs | quote }}
    - name: KUBEBYON_LEASE_RENEW_DEADLINE_MS
      value: {{ $v.adapter.lease.renewDeadlineMs | quote }}
    - name: KUBEBYON_LEASE_RETRY_PERIOD_MS
      value: {{ $v.adapter.lease.retryPeriodMs | quote }}
    {{- if $sidecar }}
    # Each adapter applies to the HAProxy beside it; the Lease only picks who publishes ClusterRoute status
    # and sweeps tombstones (docs/DEPLOYMENT.md, "The Lease in the sidecar shape").
    - name: KUBEBYON_APPLY
      value: always
    - name: KUBEBYON_PROVIDER
      value: haproxy
    - name: KUBEBYON_HAPROXY_OWNED_FILE
      value: /run/kubebyon/kubebyon.cfg
    - name: KUBEBYON_HAPROXY_CHECK_FILES
      value: /etc/haproxy/haproxy.cfg
    - name: KUBEBYON_HAPROXY_MASTER_SOCKET
      value: /run/kubebyon/master.sock
    {{- else }}
    # The leader drives every Running, Ready edge pod of this release through its Data Plane API.
    - name: KUBEBYON_PROVIDER
      value: dataplaneapi
    - name: KUBEBYON_HAPROXY_POD_SELECTOR
      value: {{ include "kha.selector" (dict "root" . "component" "edge") | replace ": " "=" | replace "\n" "," | quote }}
    - name: KUBEBYON_HAPROXY_POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: KUBEBYON_DATAPLANE_POD_PORT
      value: {{ $v.edge.dataplane.port | quote }}
    - name: KUBEBYON_DATAPLANE_USERNAME
      value: {{ $v.edge.dataplane.username | quote }}
    - name: KUBEBYON_DATAPLANE_PASSWORD_FILE
      value: /var/run/secrets/kubebyon/dataplane-password
    {{- end }}
    - name: KUBEBYON_TOPOLOGY
      value: kubernetes
    - name: KUBEBYON_HAPROXY_NODE_ADDRESS_TYPE
      value: {{ $v.adapter.nodeAddressType | quote }}
    - name: KUBEBYON_HAPROXY_BIND_ADDR
      value: {{ $v.edge.bindAddress | quote }}
    - name: KUBEBYON_PUBLIC_PORT
      value: {{ $v.edge.publicPort | quote }}
    - name: KUBEBYON_WEBHOOK_SECRET_FILE
      value: /var/run/secrets/kubebyon/webhook-secret
    {{- range $name, $value := $v.adapter.extraEnv }}
    - name: {{ $name }}
      value: {{ $value | toString | quote }}
    {{- end }}
  # Ready: the state store and the seen signatures can be written and, on a replica that applies, its HAProxy
  # answers and its last pass succeeded (a standby is ready: it takes webhooks). Alive: the process answers.
  readinessProbe:
    httpGet:
      path: /readyz
      port: http
    periodSeconds: 5
    failureThreshold: 3
  livenessProbe:
    httpGet:
      path: /healthz
      port: http
    initialDelaySeconds: 10
    periodSeconds: 20
    failureThreshold: 3
  resources:
    {{- toYaml $v.adapter.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: state
      mountPath: /var/lib/kubebyon-haproxy-adapter
    - name: tmp
      mountPath: /tmp
    - name: secrets
      mountPath: /var/run/secrets/kubebyon
      readOnly: true
    - name: kube-api-access
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    {{- if $sidecar }}
    - name: run
      mountPath: /run/kubebyon
    - name: haproxy-config
      mountPath: /etc/haproxy
      readOnly: true
    {{- end }}
{{- end -}}

{{/* The adapter's own volumes (the sidecar shape adds the ones it shares with HAProxy). */}}
{{- define "kha.adapterVolumes" -}}
# No PersistentVolumeClaim: what must survive the pod is in the API, so an adapter starts anywhere.
- name: state
  emptyDir: {}
- name: tmp
  emptyDir: {}
- name: secrets
  secret:
    secretName: {{ include "kha.secretName" . }}
    defaultMode: 0440
{{ include "kha.tokenVolume" . }}
{{- end -}}
