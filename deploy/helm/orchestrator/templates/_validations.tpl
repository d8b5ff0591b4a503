{{/* Checks the values schema cannot express: they fail the render with a message that names
     the value. */}}
{{- define "orchestrator.validate" -}}
{{- $names := dict }}
{{- range $i, $pool := .Values.pools }}
{{- if not (hasKey $.Values.sites $pool.site) }}
{{- fail (printf "pools[%d] (%s): site %q is not under `sites` (%s)" $i $pool.name $pool.site (keys $.Values.sites | sortAlpha | join ", ")) }}
{{- end }}
{{- if not (hasKey $.Values.generations $pool.generation) }}
{{- fail (printf "pools[%d] (%s): generation %q is not under `generations` (%s)" $i $pool.name $pool.generation (keys $.Values.generations | sortAlpha | join ", ")) }}
{{- end }}
{{- if hasKey $names $pool.name }}
{{- fail (printf "pools[%d]: pool name %q is used twice" $i $pool.name) }}
{{- end }}
{{- $_ := set $names $pool.name true }}
{{- if ne $pool.engine "external" }}
{{- $workers := $pool.workers | default dict }}
{{- $capacity := mul (int (default 1 $workers.replicas)) (int (default 8 $workers.gpus)) }}
{{- $needed := mul (int $pool.replicas) (int (default 1 $pool.gpusPerReplica)) }}
{{- if gt $needed $capacity }}
{{- fail (printf "pools[%d] (%s): %d replicas x %d GPUs need %d GPUs, but its workers offer %d (workers.replicas x workers.gpus)" $i $pool.name (int $pool.replicas) (int (default 1 $pool.gpusPerReplica)) $needed $capacity) }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq (int .Values.controlPlane.httpSdPort) (int .Values.controlPlane.grpcPort) }}
{{- fail (printf "controlPlane.httpSdPort: %d is controlPlane.grpcPort too; the service discovery endpoint needs a port of its own" (int .Values.controlPlane.httpSdPort)) }}
{{- end }}
{{- $engines := .Values.monitoring.engines }}
{{- if and $engines.enabled .Values.controlPlane.tls.enabled (not (and ($engines.tlsConfig | default dict).cert ($engines.tlsConfig | default dict).keySecret)) }}
{{- fail "controlPlane.tls.enabled: the control plane's service discovery then accepts only clients with a certificate, Prometheus included; give monitoring.engines.tlsConfig a cert and keySecret (or turn monitoring.engines off)" }}
{{- end }}
{{- $monitor := .Values.monitoring.serviceMonitor }}
{{- if and $monitor.enabled .Values.router.tls.clientCaSecret (not ($monitor.tlsConfig | default dict).keySecret) }}
{{- fail "router.tls.clientCaSecret: the router then accepts only clients with a certificate, Prometheus included; give monitoring.serviceMonitor.tlsConfig a cert and keySecret (or turn the ServiceMonitor off)" }}
{{- end }}
{{- end }}
