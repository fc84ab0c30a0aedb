#!/bin/sh
# The worked scale-out deployment, on loopback: Redis, three Triad replicas and HAProxy in front of them.
#   deploy/run-cluster.sh            # clients connect to http://127.0.0.1:8770/mcp (token: demo-token-change-me)
# Needs Debian's redis-server and haproxy (`make system-tools`) and Triad's venv (`make setup`). Ctrl-C stops all.
# Ports: TRIAD_FRONT_PORT (8770), replicas TRIAD_FRONT_PORT+1..+3, TRIAD_REDIS_PORT (6390), HAProxy's peers
# TRIAD_PEER_PORT (TRIAD_FRONT_PORT+10). A replica that fails to start stops everything (exit 1).
# SIGHUP reloads HAProxy (`haproxy -sf`) once its stick table can be handed over (deploy/haproxy_synced.py).
# Redis keeps its append-only file in TRIAD_DATA_DIR/redis (default deploy/.data/redis), which outlives this
# script: the cluster's state (approvals' cache, rate-limit buckets, session records, per-user tokens) survives a
# restart of Redis or of the whole deployment. Logs and generated files go to a temporary directory, removed on exit.
set -eu
cd "$(dirname "$0")/.."
FRONT=${TRIAD_FRONT_PORT:-8770}
export TRIAD_REDIS_PORT=${TRIAD_REDIS_PORT:-6390}
export TRIAD_CLUSTER_KEY=${TRIAD_CLUSTER_KEY:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
TRIAD=${TRIAD:-.venv/bin/triad}
RUN=$(mktemp -d "${TMPDIR:-/tmp}/triad-cluster.XXXXXX")
DATA=${TRIAD_DATA_DIR:-deploy/.data}
mkdir -p "$DATA/redis"
DATA=$(cd "$DATA" && pwd)
PIDS=""
stop() {
    # SIGTERM: each replica leaves the cluster, drains its calls in flight and exits
    for pid in $PIDS; do kill -TERM "$pid" 2>/dev/null || true; done
    wait
    rm -rf "$RUN"
}
trap stop EXIT INT TERM

redis-server --port "$TRIAD_REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly yes --appendfsync everysec --dir "$DATA/redis" \
    --logfile "$RUN/redis.log" &
PIDS="$!"
SERVERS=""
for i in 1 2 3; do
    port=$((FRONT + i))
    TRIAD_REPLICA_ID="r$i" "$TRIAD" serve -c deploy/cluster.yaml --port "$port" 2>"$RUN/r$i.log" &
    pid=$!
    PIDS="$PIDS $pid"
    REPLICAS="${REPLICAS:-} r$i:$pid"
    SERVERS="$SERVERS    server r$i 127.0.0.1:$port check inter 500 fall 2 rise 1\n"
done
# every replica listening, or none of it: a replica that cannot bind (or exits at start) stops the whole cluster
for replica in $REPLICAS; do
    name=${replica%%:*} pid=${replica#*:}
    until grep -q "listening on" "$RUN/$name.log" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "run-cluster: replica $name exited at start; its log ($RUN/$name.log) ends with:" >&2
            tail -n 5 "$RUN/$name.log" >&2
            exit 1
        fi
        sleep 0.1
    done
done
awk -v front="$FRONT" -v sock="$RUN/haproxy.sock" -v peer="${TRIAD_PEER_PORT:-$((FRONT + 10))}" -v servers="$SERVERS" \
    '{ gsub("@FRONT_PORT@", front); gsub("@STATS_SOCKET@", sock); gsub("@PEER_PORT@", peer); if ($0 == "@SERVERS@") printf "%s", servers; else print }' \
    deploy/haproxy.cfg.in > "$RUN/haproxy.cfg"
haproxy -f "$RUN/haproxy.cfg" -db &
HAPROXY=$!
PIDS="$PIDS $HAPROXY"
reload_haproxy() {
    # a process hands its stick table to the next only once its own first sync has ended (~5 s after a fresh
    # start): reloaded sooner, the new one would start empty and the replicas forward every call until it learns
    python3 deploy/haproxy_synced.py "$RUN/haproxy.sock" --wait 30 || echo "run-cluster: reloading anyway" >&2
    haproxy -f "$RUN/haproxy.cfg" -db -sf "$HAPROXY" &
    HAPROXY=$!
    PIDS="$PIDS $HAPROXY"
    echo "run-cluster: HAProxy reloaded (pid $HAPROXY)"
}
trap reload_haproxy HUP
echo "triad cluster: http://127.0.0.1:$FRONT/mcp (replicas on ports $((FRONT + 1))-$((FRONT + 3)); logs in $RUN;" \
    "kill -HUP $$ reloads HAProxy)"
until wait; do :; done  # a trapped SIGHUP ends `wait` early: wait again
