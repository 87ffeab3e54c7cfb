#!/bin/sh
# etcd on the pod's loopback, then kube-apiserver on :6443 with the serving certificate, the token file and
# the service-account key mounted in /pki (a Secret): tls.crt, tls.key, tokens.csv, sa.key.
# POD_IP (downward API) is the advertised address: pods on the test node have no default route to guess it from.
set -eu
data=/var/lib/vcluster
mkdir -p "$data/etcd" /tmp/certs
/usr/local/bin/etcd --name vcluster --data-dir "$data/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster vcluster=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn &
exec /usr/local/bin/kube-apiserver --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$POD_IP" \
  --etcd-servers=http://127.0.0.1:2379 --cert-dir=/tmp/certs \
  --tls-cert-file=/pki/tls.crt --tls-private-key-file=/pki/tls.key \
  --authorization-mode=RBAC --token-auth-file=/pki/tokens.csv \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file=/pki/sa.key \
  --service-account-signing-key-file=/pki/sa.key --service-cluster-ip-range=198.18.32.0/24 \
  --endpoint-reconciler-type=none --profiling=false --shutdown-watch-termination-grace-period=2s
