#!/usr/bin/env bash
# certs.sh: a throw-away CA and node certificates for a TLS raftlock cluster (tests, demos).
#
#   scripts/certs.sh DIR [NAME ...]     node certificates; default names: n1 n2 n3 n4 n5
#   scripts/certs.sh --client NAME DIR  an API client certificate (for --tls-verify-clients)
#
# Writes DIR/ca.pem and DIR/ca-key.pem (made once, reused by later runs), and for each NAME
# DIR/NAME.pem and DIR/NAME-key.pem: an ECDSA P-256 certificate valid for 30 days, usable as
# server and client (Raft's mutual TLS uses the same certificate both ways), with subject
# alternative names NAME, localhost, 127.0.0.1, ::1 and URI raftlock-peer://NAME. So the
# compose services n1..n5 and a local cluster on 127.0.0.1 (where any node's certificate will
# do for every node) both verify. The raftlock-peer URI is what makes a Raft peer: nodes refuse
# any certificate without it on the Raft port, however it chains.
# A client certificate (--client) is for client authentication only and has no raftlock-peer
# URI: good for the API, refused by every Raft port.
# An existing NAME.pem is kept, unless it is a node certificate without the raftlock-peer URI
# (made by an older certs.sh): that one is reissued. Keys are mode 600. Needs openssl.
#
# Then, for example:
#   raftlock serve --tls-cert DIR/n1.pem --tls-key DIR/n1-key.pem --tls-ca DIR/ca.pem ...
#   RAFTLOCK_CA=DIR/ca.pem raftlock cluster status
#   RAFTLOCK_TLS_CERT=DIR/n1.pem RAFTLOCK_TLS_KEY=DIR/n1-key.pem RAFTLOCK_TLS_CA=DIR/ca.pem scripts/cluster.sh up
set -euo pipefail

die() { echo "certs.sh: $*" >&2; exit 1; }
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
command -v openssl >/dev/null || die "openssl is required"
CLIENT=
if [[ $1 == --client ]]; then
	[[ $# -eq 3 ]] || die "usage: certs.sh --client NAME DIR"
	CLIENT=$2
	DIR=$3
	NAMES=("$CLIENT")
else
	DIR=$1
	shift
	NAMES=("$@")
	((${#NAMES[@]} > 0)) || NAMES=(n1 n2 n3 n4 n5)
fi
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
		if [[ -n $CLIENT ]] || openssl x509 -in "$DIR/$name.pem" -noout -text | grep -q "URI:raftlock-peer://$name\b"; then
			echo "certs.sh: kept $DIR/$name.pem" >&2
			continue
		fi
		echo "certs.sh: $DIR/$name.pem has no raftlock-peer URI (an older certs.sh made it): reissuing it" >&2
	fi
	ext=$(mktemp)
	if [[ -n $CLIENT ]]; then
		printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
			"extendedKeyUsage=clientAuth" >"$ext"
	else
		printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
			"extendedKeyUsage=serverAuth,clientAuth" \
			"subjectAltName=DNS:$name,DNS:localhost,IP:127.0.0.1,IP:::1,URI:raftlock-peer://$name" >"$ext"
	fi
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$DIR/$name-key.pem" -out "$DIR/$name.csr" -subj "/CN=$name" 2>/dev/null
	openssl x509 -req -in "$DIR/$name.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca-key.pem" -CAcreateserial \
		-out "$DIR/$name.pem" -days "$DAYS" -extfile "$ext" 2>/dev/null
	rm -f "$ext" "$DIR/$name.csr"
	if [[ -n $CLIENT ]]; then
		echo "certs.sh: made API client certificate $DIR/$name.pem (clientAuth only; refused by Raft ports)" >&2
	else
		echo "certs.sh: made $DIR/$name.pem (SAN $name, localhost, 127.0.0.1, ::1, raftlock-peer://$name)" >&2
	fi
done
chmod 644 "$DIR/ca.pem" "$DIR"/*.pem 2>/dev/null || true
chmod 600 "$DIR"/*-key.pem
