#!/usr/bin/env bash
# CurveZMQ across network namespaces: plain sockets off loopback are refused unless --insecure;
# a tile with the cluster keys joins a host in another namespace; a tile with keys of its own
# (a stranger) cannot register, and the host names the tile that never joined.
source "$(dirname "$0")/common.sh"
require_root_and_netns
timeout 600 "$src/scripts/cluster/setup-deps" || fail "setup-deps failed"
need_bins tessera-host tessera-tile
trap cluster_down EXIT
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
echo "security_netns: 3 passed, 0 failed"
