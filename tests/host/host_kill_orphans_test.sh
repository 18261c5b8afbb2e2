#!/usr/bin/env bash
# A host killed outright (SIGKILL, no chance to clean up) leaves no process behind: the tiles it
# started (--die-with-parent) and its tessera-gpu exit by themselves within 20 s. At moments this
# test does not choose: a random delay after the host is up, serving idle, serving under load, and
# not serving (a --check run mid-way); each case twice. Before the fix a serving host's tiles
# inherited its blocked SIGTERM and lived on as orphans holding their memory.
set -uo pipefail
bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d /tmp/tessera-orphans-XXXXXX)"
all=()
cleanup() { for p in "${all[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
alive() {  # running, not a zombie waiting for its new parent to reap it
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
children() { pgrep -P "$1" | tr '\n' ' '; }

# run_case NAME WANT_CHILDREN READY_PATTERN LOAD(0|1) HOST_ARGS...
run_case() {
  local name=$1 want=$2 ready=$3 load=$4; shift 4
  local log="$tmp/$name.log" port; port=$(free_port)
  local args=("$@"); args=("${args[@]//@PORT@/$port}")
  "$bin/tessera-host" "${args[@]}" >"$log" 2>&1 &
  local host=$!; all+=("$host")
  local deadline=$((SECONDS + 120)) kids=""
  until grep -q "$ready" "$log" && kids=$(children "$host") && [ "$(wc -w <<<"$kids")" -ge "$want" ]; do
    kill -0 "$host" 2>/dev/null || { tail -20 "$log" >&2; fail "$name: the host exited before it was ready"; }
    [ $SECONDS -lt $deadline ] || { tail -20 "$log" >&2; fail "$name: not ready within 120 s"; }
    sleep 0.1
  done
  for k in $kids; do all+=("$k"); done
  local loader=""
  if [ "$load" = 1 ]; then
    ( for i in $(seq 1 200); do
        curl -s -m 5 "localhost:$port/predict" -H 'content-type: application/json' \
          -d '{"inputs": ["a request in flight when the host dies", "and its pair"]}' >/dev/null 2>&1
      done ) &
    loader=$!
  fi
  sleep "$(python3 -c 'import random; print(round(random.uniform(0.05, 1.5), 3))')"
  kill -9 "$host"; wait "$host" 2>/dev/null
  deadline=$((SECONDS + 20))
  local left
  while :; do
    left=""; for k in $kids; do alive "$k" && left="$left $k"; done
    [ -z "$left" ] && break
    [ $SECONDS -lt $deadline ] || { ps -o pid,ppid,stat,args -p "$(tr -s " " "," <<<"${left# }")" >&2; fail "$name: children$left outlived the SIGKILLed host by 20 s"; }
    sleep 0.2
  done
  [ -n "$loader" ] && { kill "$loader" 2>/dev/null; wait "$loader" 2>/dev/null; }
  echo "orphans: $name: host SIGKILLed, its $(wc -w <<<"$kids") children gone" >&2
}

for round in 1 2; do
  run_case "serve-idle-$round" 2 "listening on" 0 --model llama-tiny --tiles 2 --serve --port @PORT@
  run_case "serve-load-gpu-$round" 3 "listening on" 1 --model bert-tiny --tiles 2 --serve --port @PORT@ \
    --spawn-gpu 1 --routing hybrid --long-threshold 64
  run_case "check-$round" 2 "tile" 0 --model llama-tiny --tiles 2 --check 200
done
echo "orphans: ok"
