{{/* Names, labels and shared pod settings. Selectors carry only name + instance + component:
     they are immutable, so nothing that changes between upgrades may go into them. */}}

{{- define "orchestrator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "orchestrator.fullname" -}}
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

{{- define "orchestrator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* A component's resource name: "<fullname>-<component>", cut to a DNS label. */}}
{{- define "orchestrator.componentName" -}}
{{- printf "%s-%s" (include "orchestrator.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "orchestrator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "orchestrator.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of every object: selector labels plus version, chart and the user's commonLabels. */}}
{{- define "orchestrator.labels" -}}
{{ include "orchestrator.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: orchestrator
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ include "orchestrator.chart" .root }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The release's own pods, whatever their component (NetworkPolicy peers). */}}
{{- define "orchestrator.instanceLabels" -}}
app.kubernetes.io/name: {{ include "orchestrator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "orchestrator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "orchestrator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "orchestrator.image" -}}
{{- $image := .Values.image }}
{{- $ref := printf "%s/%s" $image.registry $image.repository }}
{{- if $image.digest }}
{{- printf "%s@%s" $ref $image.digest }}
{{- else }}
{{- printf "%s:%s" $ref (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/* The image of a pool's Ray workers: the pool's, else ray.worker.image, else the chart's. */}}
{{- define "orchestrator.workerImage" -}}
{{- $workers := .pool.workers | default dict }}
{{- coalesce $workers.image .root.Values.ray.worker.image (include "orchestrator.image" .root) }}
{{- end }}

{{/* Ray head Service name: KubeRay names it "<cluster>-head-svc". */}}
{{- define "orchestrator.rayHeadService" -}}
{{- if .Values.ray.kuberay.enabled }}
{{- printf "%s-head-svc" (include "orchestrator.componentName" (dict "root" . "component" "ray")) }}
{{- else }}
{{- include "orchestrator.componentName" (dict "root" . "component" "ray-head") }}
{{- end }}
{{- end }}

{{- define "orchestrator.rayAddress" -}}
{{- printf "%s:%d" (include "orchestrator.rayHeadService" .) (int .Values.ray.gcsPort) }}
{{- end }}

{{- define "orchestrator.controlPlaneAddress" -}}
{{- printf "%s:%d" (include "orchestrator.componentName" (dict "root" . "component" "control-plane")) (int .Values.controlPlane.grpcPort) }}
{{- end }}

{{/* Non-root, read-only root filesystem, no capabilities, no privilege escalation. */}}
{{- define "orchestrator.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "orchestrator.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Pools the chart gives a Ray worker group: every pool whose engine the control plane starts. */}}
{{- define "orchestrator.launchedPools" -}}
{{- $pools := list }}
{{- range .Values.pools }}
{{- if ne .engine "external" }}
{{- $pools = append $pools . }}
{{- end }}
{{- end }}
{{- toJson $pools }}
{{- end }}

{{/* The value of siteTopologyKey on a site's nodes. */}}
{{- define "orchestrator.siteTopologyValue" -}}
{{- $site := get .root.Values.sites .site | default dict }}
{{- default .site $site.topologyValue }}
{{- end }}

{{/* Node affinity pinning a Ray worker to its pool's generation (device id) and site. */}}
{{- define "orchestrator.poolNodeAffinity" -}}
{{- $generation := get .root.Values.generations .pool.generation -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - key: amd.com/gpu.device-id
            operator: In
            values: [{{ $generation.deviceId | quote }}]
          - key: {{ .root.Values.siteTopologyKey }}
            operator: In
            values: [{{ include "orchestrator.siteTopologyValue" (dict "root" .root "site" .pool.site) | quote }}]
{{- end }}

{{/* Volumes every Ray pod needs with a read-only root filesystem: /tmp (Ray's session dir)
     and /dev/shm (the object store). */}}
{{- define "orchestrator.rayVolumes" -}}
- name: tmp
  emptyDir: {}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.ray.sharedMemorySize }}
{{- end }}

{{- define "orchestrator.rayVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: shm
  mountPath: /dev/shm
{{- end }}

{{/* `ray start` resources of a pool's workers: its accelerator type, plus the GPU slots the
     control plane's placement counts. */}}
{{- define "orchestrator.workerRayResources" -}}
{{- $generation := get .root.Values.generations .pool.generation }}
{{- $workers := .pool.workers | default dict }}
{{- $resources := dict (printf "accelerator_type:%s" $generation.rayAcceleratorType) 1 "gpu_slot" (int (default 8 $workers.gpus)) }}
{{- toJson $resources }}
{{- end }}

{{/* The pod's Kubernetes node name, from the downward API: `$(NODE_NAME)` in a command. */}}
{{- define "orchestrator.nodeNameEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end }}

{{/* TLS material: each Secret is mounted whole at /etc/orchestrator-tls/<role>, never through
     subPath (the kubelet never updates a subPath file, so a rotated certificate would not reach
     the pod; the orchestrator re-reads the files when they change). Mode 0440 (288) with the
     pods' fsGroup: readable by the pod's user through its group, by no one else. */}}
{{- define "orchestrator.tlsDir" -}}
/etc/orchestrator-tls/{{ . }}
{{- end }}

{{- define "orchestrator.tlsVolume" -}}
- name: tls-{{ .role }}
  secret:
    secretName: {{ .secret }}
    defaultMode: 288
{{- end }}

{{- define "orchestrator.tlsVolumeMount" -}}
- name: tls-{{ .role }}
  mountPath: {{ include "orchestrator.tlsDir" .role }}
  readOnly: true
{{- end }}

{{/* Flags of a caller of the control plane (router, operator command) under mutual TLS. */}}
{{- define "orchestrator.controlPlaneClientTlsArgs" -}}
{{- $dir := include "orchestrator.tlsDir" "control-plane" }}
- --control-plane-tls-ca={{ $dir }}/ca.crt
- --control-plane-tls-cert={{ $dir }}/tls.crt
- --control-plane-tls-key={{ $dir }}/tls.key
{{- end }}

{{/* The name (CN or DNS SAN) of the exporters' client certificate, which the control plane
     lets report node health and nothing else. */}}
{{- define "orchestrator.exporterIdentity" -}}
{{- .Values.controlPlane.tls.exporterIdentity | default (include "orchestrator.componentName" (dict "root" . "component" "exporter")) }}
{{- end }}

{{/* Router worker processes: router.workers, else the router's CPU request in whole CPUs
("500m" and "1" give 1, "2" and "2500m" give 2), at least 1. */}}
{{- define "orchestrator.routerWorkers" -}}
{{- if .Values.router.workers -}}
{{- .Values.router.workers -}}
{{- else -}}
{{- $requests := (.Values.router.resources | default dict).requests | default dict -}}
{{- $cpu := toString ($requests.cpu | default "1") -}}
{{- $milli := 0 -}}
{{- if hasSuffix "m" $cpu -}}
{{- $milli = trimSuffix "m" $cpu | atoi -}}
{{- else -}}
{{- $milli = mulf (float64 $cpu) 1000 | int -}}
{{- end -}}
{{- max 1 (div $milli 1000) -}}
{{- end -}}
{{- end -}}
