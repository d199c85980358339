#!/bin/sh
# Start and stop the example gateway of examples/openresty/ on
# 127.0.0.1:8080 (its stand-in upstream on 127.0.0.1:8081; PORT and
# UPSTREAM_PORT say others).
#
#   examples/openresty/gateway.sh start | stop | status
#
# Needs nginx with the Lua module and LuaJIT: on Debian/Ubuntu
#   apt-get update
#   apt-get install nginx libnginx-mod-http-lua luajit2 libluajit2-5.1-dev
# then `make LUA_VERSION=luajit` (the module for LuaJIT).  OpenResty
# works too: NGINX=/usr/local/openresty/bin/openresty (its Lua module is
# built in, so the load_module lines are left out).  Files: PREFIX
# (default build/example-openresty): nginx.conf, logs/.
set -e
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PREFIX=${PREFIX:-$ROOT/build/example-openresty}
NGINX=${NGINX:-nginx}
PORT=${PORT:-8080}
UPSTREAM_PORT=${UPSTREAM_PORT:-8081}
PIDFILE=$PREFIX/logs/nginx.pid

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

case "$1" in
start)
  if running; then echo "already running (pid $(cat "$PIDFILE"))"; exit 0; fi
  [ -f "$ROOT/build/luajit/backoff/core.so" ] || {
    echo "build the module first: make LUA_VERSION=luajit" >&2; exit 1; }
  mkdir -p "$PREFIX/logs"
  if "$NGINX" -V 2>&1 | grep -qi openresty; then
    modules=""
  else
    modules="load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;"
  fi
  awk -v root="$ROOT" -v prefix="$PREFIX" -v modules="$modules" \
      -v port="$PORT" -v up="$UPSTREAM_PORT" '
    { gsub(/@ROOT@/, root); gsub(/@PREFIX@/, prefix)
      gsub(/@UPSTREAM_PORT@/, up); gsub(/@PORT@/, port) }
    /@LOAD_MODULES@/ { print modules; next }
    { print }' "$ROOT/examples/openresty/nginx.conf" >"$PREFIX/nginx.conf"
  "$NGINX" -p "$PREFIX/" -c "$PREFIX/nginx.conf"
  echo "started (pid $(cat "$PIDFILE")): curl -si 127.0.0.1:$PORT/api/hello"
  ;;
stop)
  if ! running; then echo "not running"; exit 0; fi
  pid=$(cat "$PIDFILE")
  kill -QUIT "$pid"
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
    sleep 0.1; i=$((i + 1)); done
  echo "stopped (pid $pid)"
  ;;
status)
  if running; then echo "running (pid $(cat "$PIDFILE"))"
  else echo "not running"; exit 1; fi
  ;;
*)
  echo "usage: $0 start|stop|status" >&2
  exit 2
  ;;
esac
