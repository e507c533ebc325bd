#!/usr/bin/env bash
# Makes a certificate authority and, for each node id given, a key and a certificate
# signed by it, usable both as a TLS server certificate (agent and admin planes) and
# as a client certificate (the peer mesh's mutual TLS, where a peer is known by the
# node id its certificate names); and, for each --client name, a client certificate
# for an operator of the admin plane (when it requires one: admin_client_certs).
#
#   certs/dev-certs.sh <out-dir> <node-id>... [--host <dns-name-or-ip>]... [--client <name>]... [--renew]
#
# Each node certificate names the node id (as a DNS name), localhost and 127.0.0.1,
# plus every --host. A client certificate is <name>-client.pem and <name>-client-key.pem.
# An existing CA in <out-dir> is reused, so nodes can be added later; existing node
# and client certificates are kept (and said to be) unless --renew is given, which
# makes new keys and certificates for the names given (a rotation; the CA stays).
# Keys are EC P-256, written with mode 0600.
# For a real cluster, run it once on a trusted machine with every node's address as
# --host, and give each node ca.pem, <id>.pem and <id>-key.pem (never ca-key.pem).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 <out-dir> <node-id>... [--host <name>]... [--client <name>]... [--renew]" >&2
  exit 2
fi
out=$1
shift
nodes=()
hosts=()
clients=()
renew=false
kept=()
while [ $# -gt 0 ]; do
  case $1 in
    --host) hosts+=("$2"); shift 2 ;;
    --client) clients+=("$2"); shift 2 ;;
    --renew) renew=true; shift ;;
    *) nodes+=("$1"); shift ;;
  esac
done

mkdir -p "$out"
chmod 700 "$out"
umask 077
cd "$out"

if [ ! -f ca.pem ] || [ ! -f ca-key.pem ]; then
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca-key.pem 2>/dev/null
  openssl req -x509 -new -key ca-key.pem -sha256 -days 825 -subj "/CN=agent-plane-ledger development CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem
  echo "made CA $out/ca.pem" >&2
fi

for id in "${nodes[@]}"; do
  if [ "$renew" = false ] && [ -f "$id.pem" ] && [ -f "$id-key.pem" ]; then kept+=("$id.pem"); continue; fi
  san="DNS:$id,DNS:localhost,IP:127.0.0.1"
  for h in "${hosts[@]+"${hosts[@]}"}"; do
    if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then san="$san,IP:$h"; else san="$san,DNS:$h"; fi
  done
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$id-key.pem" 2>/dev/null
  openssl req -new -key "$id-key.pem" -subj "/CN=$id" -out "$id.csr"
  ext=$(mktemp)
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature,keyAgreement\nbasicConstraints=CA:FALSE\n' "$san" >"$ext"
  openssl x509 -req -in "$id.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -sha256 -days 397 -extfile "$ext" -out "$id.pem" 2>/dev/null
  rm -f "$id.csr" "$ext"
  echo "made certificate $out/$id.pem ($san)" >&2
done

for name in "${clients[@]+"${clients[@]}"}"; do
  if [ "$renew" = false ] && [ -f "$name-client.pem" ] && [ -f "$name-client-key.pem" ]; then kept+=("$name-client.pem"); continue; fi
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$name-client-key.pem" 2>/dev/null
  openssl req -new -key "$name-client-key.pem" -subj "/CN=$name" -out "$name-client.csr"
  ext=$(mktemp)
  printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyAgreement\nbasicConstraints=CA:FALSE\n' >"$ext"
  openssl x509 -req -in "$name-client.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -sha256 -days 397 -extfile "$ext" -out "$name-client.pem" 2>/dev/null
  rm -f "$name-client.csr" "$ext"
  echo "made client certificate $out/$name-client.pem (CN=$name)" >&2
done

if [ ${#kept[@]} -gt 0 ]; then
  echo "kept ${kept[*]} in $out: they exist (--renew makes new ones)" >&2
fi
