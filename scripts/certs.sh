#!/usr/bin/env bash
# certs.sh: a throw-away CA and node certificates for a TLS raftlock cluster (tests, demos).
#
#   scripts/certs.sh DIR [NAME ...]     default names: n1 n2 n3 n4 n5
#
# Writes DIR/ca.pem and DIR/ca-key.pem (made once, reused by later runs), and for each NAME
# DIR/NAME.pem and DIR/NAME-key.pem: an ECDSA P-256 certificate valid for 30 days, usable as
# server and client (Raft's mutual TLS uses the same certificate both ways), with subject
# alternative names NAME, localhost, 127.0.0.1 and ::1. So the compose services n1..n5 and a
# local cluster on 127.0.0.1 (where any node's certificate will do for every node) both verify.
# An existing NAME.pem is kept. Keys are mode 600. Needs openssl.
#
# Then, for example:
#   raftlock serve --tls-cert DIR/n1.pem --tls-key DIR/n1-key.pem --tls-ca DIR/ca.pem ...
#   RAFTLOCK_CA=DIR/ca.pem raftlock cluster status
#   RAFTLOCK_TLS_CERT=DIR/n1.pem RAFTLOCK_TLS_KEY=DIR/n1-key.pem RAFTLOCK_TLS_CA=DIR/ca.pem scripts/cluster.sh up
set -euo pipefail

die() { echo "certs.sh: $*" >&2; exit 1; }
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
command -v openssl >/dev/null || die "openssl is required"
DIR=$1
shift
NAMES=("$@")
((${#NAMES[@]} > 0)) || NAMES=(n1 n2 n3 n4 n5)
DAYS=30
mkdir -p "$DIR"
umask 077

if [[ ! -e $DIR/ca.pem ]]; then
	openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$DIR/ca-key.pem" -out "$DIR/ca.pem" -days "$DAYS" -subj "/CN=raftlock throw-away CA" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	echo "certs.sh: made $DIR/ca.pem" >&2
fi

for name in "${NAMES[@]}"; do
	[[ $name =~ ^[A-Za-z0-9.-]+$ ]] || die "$name: names are host names"
	if [[ -e $DIR/$name.pem ]]; then
		echo "certs.sh: kept $DIR/$name.pem" >&2
		continue
	fi
	ext=$(mktemp)
	printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
		"extendedKeyUsage=serverAuth,clientAuth" \
		"subjectAltName=DNS:$name,DNS:localhost,IP:127.0.0.1,IP:::1" >"$ext"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$DIR/$name-key.pem" -out "$DIR/$name.csr" -subj "/CN=$name" 2>/dev/null
	openssl x509 -req -in "$DIR/$name.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca-key.pem" -CAcreateserial \
		-out "$DIR/$name.pem" -days "$DAYS" -extfile "$ext" 2>/dev/null
	rm -f "$ext" "$DIR/$name.csr"
	echo "certs.sh: made $DIR/$name.pem (SAN $name, localhost, 127.0.0.1, ::1)" >&2
done
chmod 644 "$DIR/ca.pem" "$DIR"/*.pem 2>/dev/null || true
chmod 600 "$DIR"/*-key.pem
