#!/usr/bin/env bash
# CurveZMQ across network namespaces: plain sockets off loopback are refused unless --insecure;
# a tile with the cluster keys joins a host in another namespace; a tile with keys of its own
# (a stranger) cannot register, and the host names the tile that never joined. The same for
# tessera-gpu: without keys it refuses to bind off loopback (and the host to dial it) unless
# --insecure; with keys a host in another namespace is served through it, and a host with a key
# pair of its own is refused by its ZAP handler.
source "$(dirname "$0")/common.sh"
require_root_and_netns
timeout 600 "$src/scripts/cluster/setup-deps" || fail "setup-deps failed"
need_bins tessera-host tessera-tile tessera-gpu
# Logs stay in $out for a look afterwards; the key directories (secrets) do not.
trap 'cluster_down; [ -z "${out:-}" ] || rm -rf "$out/keys" "$out/stranger" "$out/stranger-host" "$out/gpu-machine"' EXIT
cluster_down
timeout 60 "$src/scripts/cluster/netns" up 3
out=$TS_DIR/out; rm -rf "$out"; mkdir -p "$out"; ns="$src/scripts/cluster/netns exec"

say "1. no keys off loopback: host and tile refuse to start"
set +e
$ns 1 timeout 10 "$bin/tessera-host" --external --tiles 1 --control "tcp://0.0.0.0:17000" --model bert-tiny > "$out/h.txt" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--keys" "$out/h.txt" || { cat "$out/h.txt"; fail "the host accepted a plain control socket off loopback (rc $rc)"; }
set +e
$ns 2 timeout 10 "$bin/tessera-tile" --host "tcp://$TS_NET.1:17000" --tile-id 0 > "$out/t.txt" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--keys" "$out/t.txt" || { cat "$out/t.txt"; fail "the tile dialled a remote host in plain text (rc $rc)"; }

say "2. keyed tile 0 joins from namespace 2; a stranger claiming tile 1 from namespace 3 cannot"
"$bin/tessera-tile" --make-keys "$out/keys" >/dev/null
"$bin/tessera-tile" --make-keys "$out/stranger" >/dev/null
cp "$out/keys/host.pub" "$out/stranger/host.pub"   # the stranger even knows the host's public key
set +e
$ns 1 timeout 60 "$bin/tessera-host" --external --tiles 2 --control "tcp://0.0.0.0:17001" --advertise "$TS_NET.1" \
  --keys "$out/keys" --register-timeout-ms 5000 --demo allreduce > "$out/host.txt" 2>&1 &
host=$!
sleep 0.5
$ns 2 timeout 30 "$bin/tessera-tile" --host "tcp://$TS_NET.1:17001" --tile-id 0 --exchange-bind tcp://0.0.0.0:0 \
  --advertise "$TS_NET.2" --keys "$out/keys" --host-silence-ms 3000 > "$out/tile0.txt" 2>&1 &
$ns 3 timeout 30 "$bin/tessera-tile" --host "tcp://$TS_NET.1:17001" --tile-id 1 --exchange-bind tcp://0.0.0.0:0 \
  --advertise "$TS_NET.3" --keys "$out/stranger" --host-silence-ms 3000 > "$out/tile1.txt" 2>&1 &
wait $host; rc=$?
set -e
cat "$out/host.txt"
[ $rc != 0 ] || fail "the host ran with a stranger as tile 1"
grep -q "tiles 1 did not register" "$out/host.txt" || fail "the host does not name tile 1 as missing"
grep -qi "refused a CURVE peer" "$out/host.txt" || fail "the host's ZAP handler did not report the stranger"
grep -q "tiles 0" "$out/host.txt" && fail "the keyed tile 0 was reported missing"

say "3. with the right keys both tiles join and the all-reduce matches"
set +e
$ns 1 timeout 60 "$bin/tessera-host" --external --tiles 2 --control "tcp://0.0.0.0:17002" --advertise "$TS_NET.1" \
  --keys "$out/keys" --register-timeout-ms 10000 --demo allreduce > "$out/host3.txt" 2>&1 &
host=$!
sleep 0.5
for t in 0 1; do
  $ns $((t + 2)) timeout 30 "$bin/tessera-tile" --host "tcp://$TS_NET.1:17002" --tile-id $t --exchange-bind tcp://0.0.0.0:0 \
    --advertise "$TS_NET.$((t + 2))" --keys "$out/keys" --host-silence-ms 3000 > "$out/t3-$t.txt" 2>&1 &
done
wait $host; rc=$?
set -e
cat "$out/host3.txt"
[ $rc = 0 ] || fail "the keyed group failed (rc $rc)"

# The hosts below give their tile 15 s of heartbeat silence: on a loaded 2-core machine streaming
# weights while tessera-gpu loads has taken longer than the default 3 s (what is tested is the GPU
# socket, not tile liveness).
# Waits (at most 60 s) for "listening on" in file $1; the line's port when $2 is "port".
wait_listening() {
  for _ in $(seq 600); do
    grep -q "^listening on" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  cat "$1"; return 1
}
# Five short requests through the host in namespace 1 on port $1 (hybrid routing sends them to the
# GPU process); then the number of batches the host's router sent to gpu0.
gpu_batches_via_host() {
  for i in 1 2 3 4 5; do
    code=$($ns 1 curl -s -o "$out/predict.json" -w '%{http_code}' -m 20 "http://127.0.0.1:$1/predict" \
      -H 'content-type: application/json' -d '{"inputs": "a short one for the gpu process"}')
    [ "$code" = 200 ] || { cat "$out/predict.json"; fail "request $i through the host got $code"; }
  done
  $ns 1 curl -s -m 10 "http://127.0.0.1:$1/metrics" | sed -n 's/^tessera_backend_batches{backend="gpu0"} //p'
}

say "4. tessera-gpu without keys: refuses tcp://0.0.0.0 unless --insecure; a plain host refuses to dial it unless --insecure"
set +e
$ns 2 timeout 20 "$bin/tessera-gpu" --model bert-tiny --bind tcp://0.0.0.0:17010 > "$out/g4.txt" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "pass --keys DIR" "$out/g4.txt" && grep -q -- "--insecure" "$out/g4.txt" ||
  { cat "$out/g4.txt"; fail "tessera-gpu bound a plain socket off loopback (rc $rc)"; }
$ns 2 timeout 120 "$bin/tessera-gpu" --model bert-tiny --bind tcp://0.0.0.0:17010 --insecure > "$out/g4i.txt" 2>&1 &
gpu=$!
wait_listening "$out/g4i.txt" || fail "tessera-gpu --insecure did not start off loopback"
set +e
$ns 1 timeout 20 "$bin/tessera-host" --model bert-tiny --tiles 1 --heartbeat-timeout-ms 15000 --serve --port 18080 --routing hybrid \
  --gpu-endpoint "tcp://$TS_NET.2:17010" > "$out/h4.txt" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--gpu-endpoint tcp://$TS_NET.2:17010 leaves this machine: pass --keys DIR" "$out/h4.txt" ||
  { cat "$out/h4.txt"; fail "the host dialled a plain GPU process in another namespace (rc $rc)"; }
$ns 1 timeout 120 "$bin/tessera-host" --model bert-tiny --tiles 1 --heartbeat-timeout-ms 15000 --serve --port 18080 --routing hybrid \
  --gpu-endpoint "tcp://$TS_NET.2:17010" --insecure > "$out/h4i.txt" 2>&1 &
host=$!
wait_listening "$out/h4i.txt" || fail "tessera-host --insecure with a plain GPU process did not start"
n=$(gpu_batches_via_host 18080)
[ "${n:-0}" -gt 0 ] || fail "no batch went to the --insecure GPU process (gpu0 batches: '${n}')"
say "   --insecure: $n batches through tessera-gpu in namespace 2"
kill $host; wait $host || fail "tessera-host --insecure did not stop cleanly"
kill $gpu; wait $gpu || fail "tessera-gpu --insecure did not stop cleanly"

say "5. keyed tessera-gpu in namespace 2 (gpu.*, host.pub only) serves the keyed host in namespace 1; a stranger host in 3 is refused"
mkdir -m 700 "$out/gpu-machine"
cp "$out/keys/gpu.pub" "$out/keys/gpu.key" "$out/keys/host.pub" "$out/gpu-machine/"
"$bin/tessera-tile" --make-keys "$out/stranger-host" >/dev/null
cp "$out/keys/gpu.pub" "$out/stranger-host/gpu.pub"   # the stranger knows the GPU process's public key
$ns 2 timeout 120 "$bin/tessera-gpu" --model bert-tiny --bind tcp://0.0.0.0:17011 --keys "$out/gpu-machine" > "$out/g5.txt" 2>&1 &
gpu=$!
wait_listening "$out/g5.txt" || fail "keyed tessera-gpu did not start"
$ns 1 timeout 120 "$bin/tessera-host" --model bert-tiny --tiles 1 --heartbeat-timeout-ms 15000 --serve --port 18081 --routing hybrid \
  --gpu-endpoint "tcp://$TS_NET.2:17011" --keys "$out/keys" > "$out/h5.txt" 2>&1 &
host=$!
wait_listening "$out/h5.txt" || fail "the keyed host did not start with the keyed GPU process"
n=$(gpu_batches_via_host 18081)
[ "${n:-0}" -gt 0 ] || fail "no batch went to the keyed GPU process (gpu0 batches: '${n}')"
say "   keyed: $n batches through tessera-gpu in namespace 2"
set +e
$ns 3 timeout -k 5 8 "$bin/tessera-host" --model bert-tiny --tiles 1 --heartbeat-timeout-ms 15000 --serve --port 18082 --routing hybrid \
  --gpu-endpoint "tcp://$TS_NET.2:17011" --keys "$out/stranger-host" > "$out/h5s.txt" 2>&1
set -e
grep -q "^listening on" "$out/h5s.txt" && fail "a host with a key pair of its own was served by the GPU process"
stranger_key=$(cat "$out/stranger-host/host.pub")
kill $host; wait $host || fail "the keyed host did not stop cleanly"
kill $gpu; wait $gpu || fail "keyed tessera-gpu did not stop cleanly"
cat "$out/g5.txt"
grep -qF "refused a CURVE peer with key $stranger_key" "$out/g5.txt" || fail "tessera-gpu's ZAP handler did not report the stranger host"
grep -qF "refused a CURVE peer with key $(cat "$out/keys/host.pub")" "$out/g5.txt" && fail "tessera-gpu refused the real host"
refused=$(sed -n 's/.*refused \([0-9]*\) CURVE peers.*/\1/p' "$out/g5.txt")
[ "${refused:-0}" -gt 0 ] || fail "tessera-gpu counted no refused peer"
say "   tessera-gpu refused $refused handshakes of the stranger host"
echo "security_netns: 5 passed, 0 failed"
