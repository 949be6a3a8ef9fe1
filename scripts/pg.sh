#!/usr/bin/env bash
# pg.sh: a throwaway PostgreSQL server on loopback for tests and demos.
#
#   scripts/pg.sh start   install PostgreSQL from Debian if missing, initdb if needed,
#                         start it; prints RAFTLOCK_TEST_PG_DSN=postgres://... on stdout
#   scripts/pg.sh env     prints the same line (does not check that the server runs)
#   scripts/pg.sh stop    stops the server and deletes its directory
#
# Typical use:  export "$(scripts/pg.sh start)" && go test ./client/fence/...
#
# Environment: RAFTLOCK_PG_DIR (default /tmp/raftlock-pg; must be reachable by the
# postgres user when run as root), RAFTLOCK_PG_PORT (default 54329).
# Everything but the DSN line goes to stderr, so the output can be exported as is.
# The server trusts every local connection and runs with fsync=off: for tests only.
set -euo pipefail

DIR=${RAFTLOCK_PG_DIR:-/tmp/raftlock-pg}
PORT=${RAFTLOCK_PG_PORT:-54329}
DATA=$DIR/data
MARKER=$DIR/.raftlock-pg
DSN="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"

log() { echo "pg.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# bindir prints the directory of the newest installed PostgreSQL server binaries.
bindir() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [[ -n $d && -x $d/initdb ]]; then
		echo "$d"
	elif command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
		dirname "$(command -v initdb)"
	fi
}

install_pg() {
	log "PostgreSQL not found; installing it from Debian's packages"
	# Debian's package would otherwise create and start a cluster of its own on 5432.
	if [[ ! -e /etc/postgresql-common/createcluster.conf ]]; then
		mkdir -p /etc/postgresql-common
		echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update >&2
	apt-get install -y --no-install-recommends postgresql >&2
}

# as_pg runs a command as the postgres user when we are root (postgres refuses root).
as_pg() {
	if [[ $(id -u) -ne 0 ]]; then
		"$@"
	elif command -v runuser >/dev/null; then
		runuser -u postgres -- "$@"
	else
		su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
	fi
}

start() {
	local bin
	bin=$(bindir)
	if [[ -z $bin ]]; then
		install_pg
		bin=$(bindir)
		[[ -n $bin ]] || die "PostgreSQL installed but initdb not found"
	fi
	if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
		log "creating system user postgres"
		useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/sh postgres
	fi
	mkdir -p "$DIR"
	touch "$MARKER"
	if [[ $(id -u) -eq 0 ]]; then
		chown -R postgres: "$DIR"
	fi

	if [[ ! -s $DATA/PG_VERSION ]]; then
		log "initdb into $DATA"
		as_pg "$bin/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C >"$DIR/initdb.log" 2>&1 ||
			{ cat "$DIR/initdb.log" >&2; die "initdb failed"; }
		cat >>"$DATA/postgresql.conf" <<-EOF
			listen_addresses = '127.0.0.1'
			port = $PORT
			unix_socket_directories = '$DIR'
			fsync = off
			max_connections = 200
		EOF
	fi
	if as_pg "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
		log "already running in $DATA"
	else
		log "starting on 127.0.0.1:$PORT"
		as_pg "$bin/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 start >&2 ||
			{ tail -n 20 "$DIR/server.log" >&2; die "server did not start (port $PORT taken?)"; }
	fi
	echo "RAFTLOCK_TEST_PG_DSN=$DSN"
}

stop() {
	local bin
	bin=$(bindir)
	if [[ -n $bin && -s $DATA/PG_VERSION ]] && as_pg "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
		as_pg "$bin/pg_ctl" -D "$DATA" -m fast -w stop >&2
	fi
	# Delete only a directory this script made.
	if [[ -e $MARKER ]]; then
		rm -rf "$DIR"
	fi
}

case ${1:-} in
start) start ;;
stop) stop ;;
env) echo "RAFTLOCK_TEST_PG_DSN=$DSN" ;;
*) die "usage: $0 start|stop|env" ;;
esac
