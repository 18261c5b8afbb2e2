#!/usr/bin/env bash
# README.md's commands from the user's side, as written there. Every `build/bin/...` line of its code
# blocks that runs to an end by itself (a --check, a --plan-only, an export, the timing model's
# tables) must exit 0; every server line on a tiny model is started on a free port in place of the
# README's, and the curl lines right after it in the README must get a JSON answer without an
# error; the server then stops cleanly on SIGTERM. Each executable the README's table names answers
# --help. The commands run from a scratch folder where build/, tests/ and scripts/ point at this
# tree, so the README's relative paths hold. Lines that need other machines, long runs or root
# (launchers, soak, faults, TLS, the 7B script) are not run here; their own tests cover them.
set -uo pipefail
src="${TESSERA_SOURCE_DIR:?}"; bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d /tmp/tessera-readme-XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$tmp/work"
ln -s "$(dirname "$bin")" "$tmp/work/build"
ln -s "$src/tests" "$tmp/work/tests"
ln -s "$src/scripts" "$tmp/work/scripts"
cd "$tmp/work"

# The README's commands, continuation lines joined, tagged by what this test does with them.
python3 - "$src/README.md" >"$tmp/commands" <<'PY' || fail "could not read README.md's commands"
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
for b in blocks:
    lines, cur = [], ""
    for raw in b.splitlines():
        line = raw.rstrip()
        if cur:
            cur += " " + line.strip()
        else:
            cur = line.strip()
        if cur.endswith("\\"):
            cur = cur[:-1].rstrip()
            continue
        if cur and not cur.startswith("#"):
            lines.append(cur)
        cur = ""
    prev_server = False
    for c in lines:
        c = re.sub(r"\s+#.*$", "", c)  # a trailing comment
        if c.startswith("curl ") and prev_server:
            print("CURL\t" + c)
            continue
        prev_server = False
        if not c.startswith("build/bin/"):
            continue
        if "--serve" in c or c.startswith("build/bin/tessera-serve "):
            if "tiny" in c and not re.search(r"--(address|journal|faults|spawn-gpu|api-key-file)", c):
                print("SERVE\t" + c)
                prev_server = True
        elif re.search(r"--check|--plan-only|export-gguf|^build/bin/tessera-timing ", c):
            print("RUN\t" + c)
PY
nrun=$(grep -c $'^RUN\t' "$tmp/commands"); nserve=$(grep -c $'^SERVE\t' "$tmp/commands")
ncurl=$(grep -c $'^CURL\t' "$tmp/commands")
# A README whose blocks this reader no longer finds would pass vacuously: hold the counts up.
[ "$nrun" -ge 8 ] || fail "only $nrun runnable README commands found"
[ "$nserve" -ge 2 ] || fail "only $nserve tiny-model server commands found"
[ "$ncurl" -ge 1 ] || fail "no curl after a tiny-model server"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
i=0 port="" server_pid="" readme_port=""
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid"
  local deadline=$((SECONDS + 60))
  while kill -0 "$server_pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
  kill -0 "$server_pid" 2>/dev/null && fail "server '$server_cmd' did not stop within 60 s of SIGTERM"
  wait "$server_pid"; local rc=$?
  [ $rc -eq 0 ] || { tail -20 "$tmp/server.$i.log" >&2; fail "server '$server_cmd' exited $rc after SIGTERM"; }
  server_pid=""
}
while IFS=$'\t' read -r kind cmd; do
  i=$((i + 1))
  case "$kind" in
    RUN)
      echo "readme: $cmd" >&2
      timeout 300 bash -c "$cmd" >"$tmp/out.$i" 2>&1 || { tail -20 "$tmp/out.$i" >&2; fail "'$cmd' exited $?"; } ;;
    SERVE)
      stop_server
      readme_port=$(grep -o -- '--port [0-9]*' <<<"$cmd" | awk '{print $2}')
      [ -n "$readme_port" ] || readme_port=8080
      port=$(free_port)
      server_cmd="${cmd/--port $readme_port/--port $port}"
      [[ $server_cmd == *"--port $port"* ]] || server_cmd="$server_cmd --port $port"
      echo "readme: $server_cmd" >&2
      bash -c "exec $server_cmd" >"$tmp/server.$i.log" 2>&1 &
      server_pid=$!; pids+=("$server_pid")
      deadline=$((SECONDS + 120))
      until grep -q "listening on" "$tmp/server.$i.log"; do
        kill -0 "$server_pid" 2>/dev/null || { tail -20 "$tmp/server.$i.log" >&2; fail "'$server_cmd' exited before listening"; }
        [ $SECONDS -lt $deadline ] || fail "'$server_cmd' not listening within 120 s"
        sleep 0.2
      done ;;
    CURL)
      c="${cmd//localhost:$readme_port/localhost:$port}"
      echo "readme: $c" >&2
      out=$(timeout 120 bash -c "$c") || fail "'$c' exited $?"
      python3 -c '
import json, sys
a = json.loads(sys.argv[1])
assert "error" not in a, a
if "choices" in a:
    n = json.loads(sys.argv[2].split("-d ", 1)[1].strip("\x27")).get("n", 1) if "-d " in sys.argv[2] else 1
    assert len(a["choices"]) == n and all(ch.get("text") or ch.get("message") for ch in a["choices"]), a
' "$out" "$cmd" || fail "'$c' answered $out" ;;
  esac
done <"$tmp/commands"
stop_server

# The executables the README's table names answer --help.
for exe in $(grep -o '^| `tessera-[a-z-]*`' "$src/README.md" | tr -d '|` '); do
  "$bin/$exe" --help >/dev/null 2>&1 || fail "$exe --help failed"
done
echo "readme: $nrun commands run, $nserve servers started, $ncurl curl requests answered"
