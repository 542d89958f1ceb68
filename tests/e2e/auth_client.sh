#!/usr/bin/env bash
# A client for the MCP conformance suite's client `auth/*` scenarios that drives the real mcpvisor CLI
# the way a person would:
#
#   conformance client --command tests/e2e/auth_client.sh --scenario auth/metadata-default
#
# The suite runs this command with the test server's URL appended as the last argument, with
# MCP_CONFORMANCE_SCENARIO set to the scenario's name and, for some scenarios, MCP_CONFORMANCE_CONTEXT
# (JSON: client_id, client_secret, private_key_pem, signing_algorithm, ...).
#
# Steps, in a scratch HOME / MCPVISOR_HOME / workspace (nothing of the real user's is read or written):
#   1. write ~/.mcpvisor/settings.json: {"mcpServers": {"t": {"type": "http", "url": URL, "oauth": {...}}}}
#      with the pre-registered client of the context (clientId, clientSecret, a private key written to a file), the URL-based
#      client id the suite expects (clientMetadataUrl), and for the machine-to-machine scenarios the grant
#      (auth/client-credentials-*: grant client_credentials; auth/cross-app-access-*: grant
#      identity_assertion with the identity provider's idp block) and the authorization server's issuer.
#   2. `mcpvisor mcp login t --no-browser` (not for a machine-to-machine grant), "visiting" every
#      authorization URL it prints with curl -L: the suite's authorization server redirects /authorize
#      straight to the redirect URI, mcpvisor's loopback callback, which completes the sign-in;
#   3. `mcpvisor status --json`: server t must be "connected";
#   4. call the scenario server's one tool, `test-tool`, through `mcpvisor shell` (commands on stdin; it
#      answers the text "test"). When a signed-in call asks for a new sign-in (a scope step-up), sign in
#      again once and call again, as a person would.
#
# Environment: MCPVISOR (the mcpvisor command), PYTHON (default:
# the python next to MCPVISOR, else python3), MCPVISOR_AUTHCONF_KEEP=1 keeps the scratch folder.
# Everything the driver sees goes to stderr (the suite keeps it). Exit status: 0 when the sign-in, the
# status view and the tool call all succeeded, 1 otherwise.
set -u

URL="${!#}"
SCENARIO="${MCP_CONFORMANCE_SCENARIO:-}"
CONTEXT="${MCP_CONFORMANCE_CONTEXT:-}"
MCPVISOR="${MCPVISOR:?set MCPVISOR to the mcpvisor command}"
PY="${PYTHON:-$(dirname "$MCPVISOR")/python}"
[ -x "$PY" ] || PY=python3
LOGIN_TIMEOUT_S=20
CIMD_URL="https://conformance-test.local/client-metadata.json"  # the suite's fixed URL-based client id

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/mcpvisor-authconf.XXXXXX")"
if [ "${MCPVISOR_AUTHCONF_KEEP:-0}" = 1 ]; then
  echo "driver: scratch folder kept: $SCRATCH" >&2
else
  trap 'rm -rf "$SCRATCH"' EXIT
fi
export HOME="$SCRATCH/home"
export MCPVISOR_HOME="$HOME/.mcpvisor"
WORKSPACE="$SCRATCH/ws"
mkdir -p "$MCPVISOR_HOME" "$WORKSPACE"
cd "$WORKSPACE" || exit 1

log() { echo "driver[$SCENARIO]: $*" >&2; }

# 1. the user settings entry ---------------------------------------------------------------------------
URL="$URL" CONTEXT="$CONTEXT" SCENARIO="$SCENARIO" CIMD_URL="$CIMD_URL" "$PY" - >"$MCPVISOR_HOME/settings.json" <<'PYEOF'
import json, os

context = json.loads(os.environ["CONTEXT"]) if os.environ.get("CONTEXT") else {}
# Used only where the authorization server advertises client_id_metadata_document_supported.
oauth = {"clientMetadataUrl": os.environ["CIMD_URL"]}
for key, field in (("client_id", "clientId"), ("client_secret", "clientSecret")):
    if context.get(key):
        oauth[field] = context[key]
if context.get("private_key_pem"):  # private_key_jwt: the key lives in a file of its own, as a person keeps it
    key_file = os.path.join(os.environ["MCPVISOR_HOME"], "client-key.pem")
    with open(key_file, "w") as out:
        out.write(context["private_key_pem"])
    os.chmod(key_file, 0o600)
    oauth["privateKeyFile"] = key_file
    oauth["signingAlgorithm"] = context.get("signing_algorithm", "ES256")
scenario = os.environ["SCENARIO"]
if scenario.startswith("auth/client-credentials-"):
    oauth["grant"] = "client_credentials"  # machine to machine: no browser, no sign-in
if context.get("idp_token_endpoint"):  # SEP-990 enterprise-managed authorization (cross-app access)
    oauth["grant"] = "identity_assertion"
    oauth["idp"] = {
        "tokenEndpoint": context["idp_token_endpoint"],
        "clientId": context.get("idp_client_id"),
        "idToken": context.get("idp_id_token"),
    }
if oauth.get("grant"):
    # A machine-to-machine client names the authorization server its credentials belong to (the SDK
    # requires it from 3.0). A person reads it from the server's documentation; the driver reads it from
    # the server's protected resource metadata.
    from urllib.parse import urlsplit
    from urllib.request import urlopen

    parts = urlsplit(os.environ["URL"])
    prm = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}"
    try:
        with urlopen(prm, timeout=10) as answer:
            oauth["issuer"] = json.load(answer)["authorization_servers"][0]
    except Exception as exc:  # the scenario then shows what mcpvisor does without it
        print(f"driver: no issuer from {prm}: {exc}", file=__import__("sys").stderr)
print(json.dumps({"mcpServers": {"t": {"type": "http", "url": os.environ["URL"], "oauth": oauth}}}, indent=2))
PYEOF
log "settings: $(tr -d '\n ' <"$MCPVISOR_HOME/settings.json" |
  sed -E 's/"(clientSecret|idToken)":"[^"]*"/"\1":"***"/g')"

# 2. sign in -------------------------------------------------------------------------------------------
login() {
  # Visits every authorization URL the sign-in prints, in order, as a person would (one sign-in may ask
  # twice, e.g. for a scope step-up), until `mcpvisor mcp login` exits.
  local out="$SCRATCH/login.$1.log" pid url visited=0 n rc
  "$MCPVISOR" mcp login t --no-browser --timeout "$LOGIN_TIMEOUT_S" >"$out" 2>&1 &
  pid=$!
  while :; do
    n=0
    while read -r url; do
      n=$((n + 1))
      [ "$n" -le "$visited" ] && continue
      visited=$n
      log "login $1: visiting authorization URL $n: $url"
      # -L follows /authorize's redirect to mcpvisor's loopback callback, which completes the sign-in.
      curl -sS -L --max-time 10 -o "$SCRATCH/callback.$1.$n.txt" \
        -w "driver[$SCENARIO]: login $1: the callback answered HTTP %{http_code}\n" "$url" >&2
    done < <(grep -Eo 'https?://[^[:space:]]+' "$out" 2>/dev/null | grep -E '[?&]response_type=code')
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  wait "$pid"
  rc=$?
  sed "s/^/  login $1| /" "$out" >&2
  log "login $1: exit $rc after $visited authorization URL(s)"
  return "$rc"
}

status=0 signed_in=0
if grep -qE '"grant": "(client_credentials|identity_assertion)"' "$MCPVISOR_HOME/settings.json"; then
  log "machine-to-machine grant: no sign-in, the host gets its token by itself"
elif login 1; then
  signed_in=1
else
  status=1
fi

# 3. the status view -----------------------------------------------------------------------------------
"$MCPVISOR" status --json >"$SCRATCH/status.json" 2>"$SCRATCH/status.err"
rc=$?
sed 's/^/  status| /' "$SCRATCH/status.err" >&2
state="$("$PY" -c 'import json, sys
s = json.load(open(sys.argv[1]))["servers"][0]
print(s["state"], "|", s.get("sign_in"), "|", s.get("error"))' "$SCRATCH/status.json" 2>&1)"
log "status --json: exit $rc; server t: $state"
case "$state" in connected*) before_call=$status ;; *) status=1 before_call=1 ;; esac

# 4. a tool call ---------------------------------------------------------------------------------------
call() {
  printf '/call mcp__t__test-tool {}\n' | "$MCPVISOR" shell >"$SCRATCH/call.$1.out" 2>&1
  local rc=$?
  sed "s/^/  call $1| /" "$SCRATCH/call.$1.out" >&2
  log "call $1: shell exit $rc"
  # `mcpvisor shell` exits 0 after a failed /call too: the answer, a line "test", is what tells.
  [ "$rc" = 0 ] && grep -qxE '[[:space:]]*test[[:space:]]*' "$SCRATCH/call.$1.out" &&
    ! grep -qiE 'error|failed|needs authentication|mcpvisor mcp login' "$SCRATCH/call.$1.out"
}

if call 1; then
  log "tool call succeeded"
else
  status=1
  if [ "$signed_in" = 1 ] && grep -q 'mcpvisor mcp login' "$SCRATCH/call.1.out"; then
    log "signed in, yet the call asks for a new sign-in (scope step-up): signing in again, calling again"
    login 2 && call 2 && status=$before_call
  fi
fi
log "done: exit $status"
exit "$status"
