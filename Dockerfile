# raftlock in a FROM scratch image: one statically linked binary and an empty /data.
#
# Build it with `scripts/compose.sh build` (or `scripts/compose.sh up`, which also starts
# the three-node cluster of docker-compose.yml). By hand:
#
#   CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o bin/image/raftlock ./cmd/raftlock
#   mkdir -p bin/image/data && docker build -t raftlock:local .
#
# The binary is built on the host, not in a golang build stage: this must work on a Docker
# engine with no images and no registry, and FROM scratch is the only base that needs no
# pull. CGO_ENABLED=0 makes the binary static, so it needs no libc, /etc or /tmp.
# Only bin/image/ is sent as build context (see .dockerignore).
#
# Alone it runs a one-node cluster with its state in /data:
#   docker run -d -p 127.0.0.1:8001:8001 -v raftlock-data:/data raftlock:local
FROM scratch
COPY bin/image/raftlock /raftlock
# The image's /data belongs to the unprivileged user, and a new named volume mounted
# there inherits that owner, so the node never needs root.
COPY --chown=65532:65532 bin/image/data/ /data/
USER 65532:65532
ENV RAFTLOCK_DATA_DIR=/data \
    RAFTLOCK_HTTP_ADDR=0.0.0.0:8001 \
    RAFTLOCK_RAFT_ADDR=0.0.0.0:9001
EXPOSE 8001 9001
VOLUME /data
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
    CMD ["/raftlock", "health", "--addr", "http://127.0.0.1:8001"]
# SIGTERM makes a leader hand over leadership before it exits (docker stop sends it).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/raftlock"]
CMD ["serve", "--id", "n1", "--peers", "n1=127.0.0.1:9001", \
     "--advertise-raft", "127.0.0.1:9001", "--advertise-http", "127.0.0.1:8001"]
