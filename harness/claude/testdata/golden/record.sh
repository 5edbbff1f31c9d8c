#!/usr/bin/env bash
# record.sh — re-record the Claude Code golden files in this directory by running
# the REAL claude CLI (pinned 2.1.332, installed by scripts/install-clis.sh)
# against the fake Messages API (internal/fakeapi/anthropic/cmd/fakeanthropic)
# on 127.0.0.1. See README.md for what is recorded and how.
#
# Usage (from anywhere):  harness/claude/testdata/golden/record.sh [case ...]
# Env: CLAUDE (binary), OUTPOST_CACHE, GOLDEN_TMP (scratch root, default
#      /tmp/outpost-golden/claude), FAKE_PORT (default 18599).
# Needs: go, python3 (to trim session files and summarise the fake's log).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../../.." && pwd)"
CLAUDE="${CLAUDE:-${OUTPOST_CACHE:-$HOME/.cache/outpost}/npm/@anthropic-ai+claude-code@2.1.332/node_modules/.bin/claude}"
ROOT="${GOLDEN_TMP:-/tmp/outpost-golden/claude}"
PORT="${FAKE_PORT:-18599}"
BASE_URL="http://127.0.0.1:$PORT"
FAKE="$ROOT/bin/fakeanthropic"
# A fixed reset time far in the future (2030-01-01T00:00:00Z) keeps the usage-limit text stable.
RESETS_AT=1893456000
SYS_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

[[ -x "$CLAUDE" ]] || { echo "record.sh: no claude at $CLAUDE (run scripts/install-clis.sh claude)" >&2; exit 1; }
mkdir -p "$ROOT/bin"
(cd "$REPO" && go build -o "$FAKE" ./internal/fakeapi/anthropic/cmd/fakeanthropic)

log() { printf 'record.sh: %s\n' "$*" >&2; }

FAKE_PID=
start_fake() { # start_fake DIR [fakeanthropic flags...]
  local dir="$1"; shift
  rm -f "$dir/fake.url"
  "$FAKE" -addr "127.0.0.1:$PORT" -resets-at "$RESETS_AT" -log "$dir/fake.log.jsonl" -log-bodies \
    -url-file "$dir/fake.url" "$@" >/dev/null 2>>"$dir/fake.stderr" &
  FAKE_PID=$!
  local _
  for _ in $(seq 100); do
    [[ -s "$dir/fake.url" ]] && return 0
    kill -0 "$FAKE_PID" 2>/dev/null || { log "fake server died: $(cat "$dir/fake.stderr")"; exit 1; }
    sleep 0.05
  done
  log "fake server did not start"; exit 1
}
stop_fake() {
  if [[ -n "$FAKE_PID" ]]; then
    kill "$FAKE_PID" 2>/dev/null || true
    wait "$FAKE_PID" 2>/dev/null || true
    FAKE_PID=
  fi
}
trap stop_fake EXIT

# fresh_dirs NAME -> sets H (HOME) and W (cwd) to empty dirs under $ROOT/NAME
fresh_dirs() {
  rm -rf "${ROOT:?}/${1:?}"
  mkdir -p "$ROOT/$1/home" "$ROOT/$1/work"
  H="$ROOT/$1/home" W="$ROOT/$1/work"
}

# claude_env: the whole environment of every run (env -i: nothing else leaks in).
claude_env() { # claude_env MAX_RETRIES [VAR=value ...]
  local retries="$1"; shift
  printf '%s\n' env -i "PATH=$SYS_PATH" "HOME=$H" TZ=UTC "ANTHROPIC_BASE_URL=$BASE_URL" \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 "CLAUDE_CODE_MAX_RETRIES=$retries" "$@"
}

# run CASE DIRNAME MAX_RETRIES "VAR=v ..." claude-args... : one -p run, output saved as CASE.*
run() {
  local case="$1" dir="$ROOT/$2" retries="$3" extra="$4"; shift 4
  local -a envv
  # shellcheck disable=SC2207,SC2086 # values contain no spaces; $extra is a list of VAR=value
  envv=($(claude_env "$retries" $extra))
  log "$case: claude $*"
  local rc=0 t0
  t0=$(date +%s%N)
  (cd "$W" && timeout -k 5 180 "${envv[@]}" "$CLAUDE" "$@" >"$HERE/$case.stdout.jsonl" 2>"$HERE/$case.stderr") || rc=$?
  echo "$rc" >"$HERE/$case.exit"
  log "$case: rc=$rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  summarize "$case" "$dir"
}

# summarize CASE DIR: the fake's request log lines not yet summarised -> CASE.requests.jsonl (no bodies)
summarize() {
  local case="$1" dir="$2"
  if [[ -f "$dir/fake.log.jsonl" ]]; then
    local done_n=0 total
    [[ -f "$dir/fake.log.done" ]] && done_n="$(cat "$dir/fake.log.done")"
    total="$(wc -l <"$dir/fake.log.jsonl")"
    tail -n +"$((done_n + 1))" "$dir/fake.log.jsonl" >"$dir/fake.log.part"
    python3 - "$dir/fake.log.part" "$HERE/$case.requests.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as out:
    for line in src:
        r = json.loads(line)
        h = {k.lower(): v[0] for k, v in (r.get("headers") or {}).items()}
        s = {"seq": r["seq"], "method": r["method"], "path": r["path"], "query": r.get("query", "")}
        if "scenario" in r:
            s.update(scenario=r["scenario"], model=r["model"], stream=r["stream"], max_tokens=r["max_tokens"],
                     nmsg=r["nmsg"], roles=[m["Role"] for m in r["messages"]],
                     user_texts=[m["Text"] for m in r["messages"] if m["Role"] == "user"],
                     last_user=r["last_user"])
        s["headers"] = {k: h[k] for k in ("x-api-key", "authorization", "anthropic-beta", "user-agent",
                                          "x-app", "x-claude-code-session-id", "x-stainless-retry-count",
                                          "x-stainless-timeout") if k in h}
        out.write(json.dumps(s, ensure_ascii=False, separators=(",", ":")) + "\n")
PY
    echo "$total" >"$dir/fake.log.done"
  else
    : >"$HERE/$case.requests.jsonl"
  fi
}

# save_session CASE SESSION_ID: copy ~/.claude/projects/<slug>/<id>.jsonl, trimming huge lines
save_session() {
  local case="$1" id="$2" f
  f="$(find "$H/.claude/projects" -name "$id.jsonl" | head -1)"
  [[ -n "$f" ]] || { log "$case: no session file for $id"; exit 1; }
  log "$case: session file ${f#"$H"/}"
  echo "${f#"$H"/}" >"$ROOT/$case.session.path"
  python3 - "$f" "$HERE/$case.session.jsonl" <<'PY'
import json, sys
# Lines over 4000 bytes (prompt snapshots, request shapes, skill listings) have
# every string value longer than 300 chars replaced by "[trimmed: N chars]".
# Other lines are copied byte for byte.
LIMIT, LONG = 4000, 300
def trim(v):
    if isinstance(v, str):
        return "[trimmed: %d chars]" % len(v) if len(v) > LONG else v
    if isinstance(v, list):
        return [trim(x) for x in v]
    if isinstance(v, dict):
        return {k: trim(x) for k, x in v.items()}
    return v
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in f:
        if len(line.encode()) > LIMIT:
            line = json.dumps(trim(json.loads(line)), ensure_ascii=False, separators=(",", ":")) + "\n"
        out.write(line)
PY
}

session_id() { # session id from a stream-json stdout file
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    try: d=json.loads(l)
    except Exception: continue
    if d.get("session_id"): print(d["session_id"]); break' "$1"
}

P=(-p --output-format stream-json --verbose)
KEY=ANTHROPIC_API_KEY=sk-fake

case_text() {
  fresh_dirs text; start_fake "$ROOT/text"
  run text text 1 "$KEY" "${P[@]}" "say hi"
  stop_fake; save_session text "$(session_id "$HERE/text.stdout.jsonl")"
}
case_thinking() {
  fresh_dirs thinking; start_fake "$ROOT/thinking"
  run thinking thinking 1 "$KEY" "${P[@]}" "FAKE_THINK say hi"
  stop_fake
}
case_tool() {
  # acceptEdits lets Bash redirect into the cwd; --dangerously-skip-permissions is refused as root (see tool_bypass_root).
  fresh_dirs tool; start_fake "$ROOT/tool"
  run tool tool 1 "$KEY" "${P[@]}" --permission-mode acceptEdits "FAKE_TOOL:echo hi > out.txt; echo hi"
  stop_fake; save_session tool "$(session_id "$HERE/tool.stdout.jsonl")"
  [[ -f "$W/out.txt" ]] || { log "tool: out.txt not created"; exit 1; }
}
case_tool_denied() {
  fresh_dirs tool_denied; start_fake "$ROOT/tool_denied"
  run tool_denied tool_denied 1 "$KEY" "${P[@]}" "FAKE_TOOL:echo hi > out.txt; echo hi"
  stop_fake
}
case_tool_bypass_root() {
  fresh_dirs tool_bypass_root; start_fake "$ROOT/tool_bypass_root"
  run tool_bypass_root tool_bypass_root 1 "$KEY" "${P[@]}" --dangerously-skip-permissions "FAKE_TOOL:echo hi > out.txt; echo hi"
  stop_fake
}
case_tool_bypass_sandbox() {
  fresh_dirs tool_bypass_sandbox; start_fake "$ROOT/tool_bypass_sandbox"
  run tool_bypass_sandbox tool_bypass_sandbox 1 "$KEY IS_SANDBOX=1" "${P[@]}" --dangerously-skip-permissions "FAKE_TOOL:echo hi > out.txt; echo hi"
  stop_fake
}
case_resume() { # resume_base, resume and fork share one HOME and cwd
  fresh_dirs sessions; start_fake "$ROOT/sessions"
  run resume_base sessions 1 "$KEY" "${P[@]}" "first message FAKE_ECHO"
  local s1; s1="$(session_id "$HERE/resume_base.stdout.jsonl")"
  save_session resume_base "$s1"
  run resume sessions 1 "$KEY" "${P[@]}" --resume "$s1" "second message FAKE_ECHO"
  save_session resume "$s1"
  local before; before="$(sha256sum "$(find "$H/.claude/projects" -name "$s1.jsonl")")"
  run fork sessions 1 "$KEY" "${P[@]}" --resume "$s1" --fork-session "fork message FAKE_ECHO"
  stop_fake
  local f1; f1="$(session_id "$HERE/fork.stdout.jsonl")"
  [[ "$f1" != "$s1" ]] || { log "fork: same session id"; exit 1; }
  save_session fork "$f1"
  [[ "$(sha256sum "$(find "$H/.claude/projects" -name "$s1.jsonl")")" == "$before" ]] || log "fork: WARNING parent session file changed"
  (cd "$H" && find . -type f | sort) >"$ROOT/sessions.home-files.txt"
}
case_resume_unknown() {
  fresh_dirs resume_unknown; start_fake "$ROOT/resume_unknown"
  run resume_unknown resume_unknown 1 "$KEY" "${P[@]}" --resume 99999999-8888-4777-8666-555555555555 "hello"
  stop_fake
}
case_streamjson_noverbose() {
  fresh_dirs streamjson_noverbose; start_fake "$ROOT/streamjson_noverbose"
  run streamjson_noverbose streamjson_noverbose 1 "$KEY" -p --output-format stream-json "say hi"
  stop_fake
}
# live_start CASE [fakeanthropic flags]: start the fake and a --input-format stream-json claude
# reading from a fifo on fd 3; sets LIVE_PID.
live_start() {
  local case="$1"; shift
  fresh_dirs "$case"; start_fake "$ROOT/$case" "$@"
  local -a envv
  # shellcheck disable=SC2207
  envv=($(claude_env 1 "$KEY"))
  local fifo="$ROOT/$case/stdin.fifo"; mkfifo "$fifo"
  log "$case: claude -p --input-format stream-json --output-format stream-json --verbose --permission-mode acceptEdits"
  (cd "$W" && exec "${envv[@]}" "$CLAUDE" -p --input-format stream-json --output-format stream-json --verbose \
     --permission-mode acceptEdits <"$fifo" >"$HERE/$case.stdout.jsonl" 2>"$HERE/$case.stderr") &
  LIVE_PID=$!
  exec 3>"$fifo"
}
live_finish() { # close stdin, wait, record the exit code
  local case="$1"
  exec 3>&-
  local rc=0; wait "$LIVE_PID" || rc=$?
  echo "$rc" >"$HERE/$case.exit"; log "$case: rc=$rc"
  stop_fake; summarize "$case" "$ROOT/$case"
}
wait_for() { # wait_for FILE REGEX COUNT [tenths of a second]
  local _ n
  for _ in $(seq "${4:-600}"); do
    n="$(grep -c -E "$2" "$1" 2>/dev/null || true)"
    [[ "${n:-0}" -ge "$3" ]] && return 0
    sleep 0.1
  done
  log "timed out waiting for $3 x /$2/ in $1"; return 1
}
case_live_midtool() {
  # msg one runs `sleep 3; echo done`; msg two is sent while it runs and is injected into the same turn.
  local case=live_midtool
  live_start $case
  echo '{"type":"user","message":{"role":"user","content":"msg one FAKE_TOOL:sleep 3; echo done"}}' >&3
  wait_for "$HERE/$case.stdout.jsonl" '"type":"tool_use"' 1
  sleep 1
  echo '{"type":"user","message":{"role":"user","content":[{"type":"text","text":"msg two during tool"}]}}' >&3
  wait_for "$HERE/$case.stdout.jsonl" '"type":"result"' 1
  live_finish $case
}
case_live_queued() {
  # msg two is sent while msg one's text reply is still streaming (slow: 10 words, 300 ms apart):
  # it is queued and becomes a second turn with its own result.
  local case=live_queued
  live_start $case -delay 300ms
  echo '{"type":"user","message":{"role":"user","content":"msg one FAKE_SLOW"}}' >&3
  wait_for "$ROOT/$case/fake.log.jsonl" '"path":"/v1/messages"' 1
  sleep 1
  echo '{"type":"user","message":{"role":"user","content":"msg two while streaming FAKE_ECHO"}}' >&3
  wait_for "$HERE/$case.stdout.jsonl" '"type":"result"' 2
  live_finish $case
}
case_live_interrupt() {
  # An interrupt control_request while a slow reply streams; then a second message in the same process.
  local case=live_interrupt
  live_start $case -delay 300ms
  echo '{"type":"user","message":{"role":"user","content":"msg one FAKE_SLOW"}}' >&3
  wait_for "$ROOT/$case/fake.log.jsonl" '"path":"/v1/messages"' 1
  sleep 1
  echo '{"type":"control_request","request_id":"req_int_1","request":{"subtype":"interrupt"}}' >&3
  wait_for "$HERE/$case.stdout.jsonl" '"type":"result"' 1
  echo '{"type":"user","message":{"role":"user","content":"msg two after interrupt FAKE_ECHO"}}' >&3
  wait_for "$HERE/$case.stdout.jsonl" '"type":"result"' 2
  live_finish $case
}
case_partial() {
  # --include-partial-messages: stream_event lines around each assistant line.
  fresh_dirs partial; start_fake "$ROOT/partial"
  run partial partial 1 "$KEY" "${P[@]}" --include-partial-messages "FAKE_THINK say hi"
  stop_fake
}
case_partial_tool() {
  fresh_dirs partial_tool; start_fake "$ROOT/partial_tool"
  run partial_tool partial_tool 1 "$KEY" "${P[@]}" --include-partial-messages --permission-mode acceptEdits "FAKE_TOOL:echo hi"
  stop_fake
}
case_model_flag() {
  # --model=NAME (the form the preset uses) reaches the API verbatim.
  fresh_dirs model_flag; start_fake "$ROOT/model_flag"
  run model_flag model_flag 1 "$KEY" "${P[@]}" --model=claude-sonnet-4-5 -- "say hi"
  stop_fake
}
case_live_uuid_tool() {
  # Messages carrying a "uuid" get command_lifecycle lines (queued, started, completed|cancelled).
  # msg two is sent while the Bash tool runs: it is started within turn 1 (injected).
  local case=live_uuid_tool
  live_start $case
  echo '{"type":"user","message":{"role":"user","content":"msg one FAKE_TOOL:sleep 3; echo done"},"uuid":"00000000-0000-4000-8000-000000000001","session_id":"","parent_tool_use_id":null}' >&3
  wait_for "$HERE/$case.stdout.jsonl" '"type":"tool_use"' 1
  sleep 1
  echo '{"type":"user","message":{"role":"user","content":"msg two during tool"},"uuid":"00000000-0000-4000-8000-000000000002","session_id":"","parent_tool_use_id":null}' >&3
  wait_for "$HERE/$case.stdout.jsonl" '"state":"completed"' 2
  live_finish $case
}
case_live_uuid_queued() {
  # msg two is sent while a text reply streams: it is started as turn 2 (queued).
  local case=live_uuid_queued
  live_start $case -delay 300ms
  echo '{"type":"user","message":{"role":"user","content":"msg one FAKE_SLOW"},"uuid":"00000000-0000-4000-8000-000000000001","session_id":"","parent_tool_use_id":null}' >&3
  wait_for "$ROOT/$case/fake.log.jsonl" '"path":"/v1/messages"' 1
  sleep 1
  echo '{"type":"user","message":{"role":"user","content":"msg two while streaming FAKE_ECHO"},"uuid":"00000000-0000-4000-8000-000000000002","session_id":"","parent_tool_use_id":null}' >&3
  wait_for "$HERE/$case.stdout.jsonl" '"state":"completed"' 2
  live_finish $case
}
case_stall() {
  # The stream stalls after message_start; the CLI does not time out by itself: SIGTERM after 5 s.
  local case=stall
  fresh_dirs $case; start_fake "$ROOT/$case"
  local -a envv
  # shellcheck disable=SC2207
  envv=($(claude_env 0 "$KEY"))
  log "$case: claude ${P[*]} FAKE_STALL (SIGTERM after 5 s)"
  (cd "$W" && exec "${envv[@]}" "$CLAUDE" "${P[@]}" "FAKE_STALL say hi" >"$HERE/$case.stdout.jsonl" 2>"$HERE/$case.stderr") &
  local pid=$!
  sleep 5
  kill -TERM "$pid" 2>/dev/null || true
  local rc=0; wait "$pid" || rc=$?
  echo "$rc" >"$HERE/$case.exit"; log "$case: rc=$rc"
  stop_fake; summarize $case "$ROOT/$case"
}
err_case() { # err_case CASE MAX_RETRIES PROMPT [extra env]
  local case="$1" retries="$2" prompt="$3" extra="${4:-$KEY}"
  fresh_dirs "$case"; start_fake "$ROOT/$case"
  run "$case" "$case" "$retries" "$extra" "${P[@]}" "$prompt"
  stop_fake
}
case_err_429() { err_case err_429 1 "FAKE_429 say hi"; }
case_err_usage_limit() { err_case err_usage_limit 0 "FAKE_USAGE_LIMIT say hi"; }
case_err_usage_limit_oauth() {
  err_case err_usage_limit_oauth 0 "FAKE_USAGE_LIMIT say hi" "CLAUDE_CODE_OAUTH_TOKEN=sk-ant-oat01-fake-oauth-token"
}
case_err_529() { err_case err_529 1 "FAKE_529 say hi"; }
case_err_500() { err_case err_500 1 "FAKE_500 say hi"; }
case_err_401() { err_case err_401 1 "FAKE_401 say hi"; }
case_err_stream_error() { err_case err_stream_error 0 "FAKE_STREAM_ERROR say hi"; }
case_err_conn_refused() {
  # Nothing listens on $PORT (the fake is not started).
  fresh_dirs err_conn_refused
  run err_conn_refused err_conn_refused 1 "$KEY" "${P[@]}" "say hi"
}

ALL=(text thinking tool tool_denied tool_bypass_root tool_bypass_sandbox resume resume_unknown
     streamjson_noverbose live_midtool live_queued live_interrupt live_uuid_tool live_uuid_queued
     partial partial_tool model_flag err_429 err_usage_limit err_usage_limit_oauth err_529 err_500
     err_401 err_stream_error err_conn_refused stall)
cases=("$@")
[[ ${#cases[@]} -gt 0 ]] || cases=("${ALL[@]}")
for c in "${cases[@]}"; do
  declare -F "case_$c" >/dev/null || { log "unknown case $c (known: ${ALL[*]})"; exit 1; }
  "case_$c"
done

# Checks: no key-like string but the fake ones, no file over 100 KB.
if grep -o -h -E 'sk-[A-Za-z0-9_-]+' "$HERE"/*.jsonl "$HERE"/*.stderr 2>/dev/null \
   | grep -v -x -E 'sk-fake|sk-ant-oat01-fake-oauth-token' | sort -u | grep . >&2; then
  log "WARNING: unexpected key-like strings above"
fi
find "$HERE" -type f -size +100k -printf 'record.sh: WARNING %p is over 100 KB\n' >&2
log "done"
