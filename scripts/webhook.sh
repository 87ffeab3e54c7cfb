#!/usr/bin/env bash
# One signed call to the adapter's webhook API, made the way kubebyon-api makes it:
#   scripts/webhook.sh METHOD PATH [JSON-BODY]
# e.g. scripts/webhook.sh PUT '/v1/clusters/demo?wait=true' '{"control_plane_host":"api.demo.example.com",
#      "public_access_mode":"loadbalancer","node_port":31443}'
# Reads KUBEBYON_WEBHOOK_SECRET (or KUBEBYON_WEBHOOK_SECRET_FILE) and KUBEBYON_ADAPTER_URL (default
# http://127.0.0.1:8080); prints the answer's body and exits non-zero unless it is 2xx.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 METHOD PATH [JSON-BODY]" >&2
  exit 64
fi
method=$1 path=$2 body=${3:-}
secret=${KUBEBYON_WEBHOOK_SECRET:-}
if [ -z "$secret" ] && [ -n "${KUBEBYON_WEBHOOK_SECRET_FILE:-}" ]; then secret=$(cat "$KUBEBYON_WEBHOOK_SECRET_FILE"); fi
[ -n "$secret" ] || { echo "$0: set KUBEBYON_WEBHOOK_SECRET or KUBEBYON_WEBHOOK_SECRET_FILE" >&2; exit 1; }
url=${KUBEBYON_ADAPTER_URL:-http://127.0.0.1:8080}
ts=$(date +%s)
# HMAC-SHA256 of "<timestamp>\n<METHOD>\n<path?query>\n<body>" (README.md, "Webhook API").
sig=$(printf '%s\n%s\n%s\n%s' "$ts" "$method" "$path" "$body" | openssl dgst -sha256 -hmac "$secret" -r | cut -d' ' -f1)
args=(-sS -X "$method" -H "X-Kubebyon-Timestamp: $ts" -H "X-Kubebyon-Signature: sha256=$sig"
  -w '\n%{http_code}' --max-time 60)
[ -z "$body" ] || args+=(-H 'Content-Type: application/json' --data-binary "$body")
answer=$(curl "${args[@]}" "${url%/}$path")
code=${answer##*$'\n'}
printf '%s\n' "${answer%$'\n'*}"
case "$code" in 2??) exit 0 ;; *) echo "$0: $method $path answered $code" >&2; exit 1 ;; esac
