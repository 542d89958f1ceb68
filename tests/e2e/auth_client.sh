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
#   2. one `mcpvisor shell` session, commands on stdin: `/login t` (not for a machine-to-machine grant, which
#      signs in by itself), whose "browser" is curl -L: the suite's authorization server redirects /authorize
#      straight to the redirect URI, mcpvisor's loopback callback, which completes the sign-in; then `/mcp`,
#      the status view, where server t must be connected; then a call of the scenario server's one tool,
#      `test-tool`, which answers the text "test". When the signed-in call asks for a wider sign-in (a scope
#      step-up), a second session signs in again and calls again, as a person would.
#   (`mcpvisor mcp login` and `mcpvisor status --json` with a sign-in are tests/e2e/test_oauth.py's.)
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
CIMD_URL="https://conformance-test.local/client-metadata.json"  # the suite's fixed URL-based client id
SESSION_TIMEOUT_S=40  # each shell session (a step-up has two; the suite gives the client 90 s)

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

# 2. one shell session -----------------------------------------------------------------------------------
# The browser the shell opens the sign-in page in is curl -L: the suite's authorization server redirects
# /authorize straight to the redirect URI, mcpvisor's loopback callback, which completes the sign-in.
cat >"$SCRATCH/browser.sh" <<BROWSER
#!/usr/bin/env bash
echo "driver[$SCENARIO]: browser: visiting \$1" >&2
curl -sS -L --max-time 10 -o /dev/null -w "driver[$SCENARIO]: browser: the callback answered HTTP %{http_code}\n" "\$1" >&2
BROWSER
chmod +x "$SCRATCH/browser.sh"
export BROWSER="$SCRATCH/browser.sh %s"
unset DISPLAY WAYLAND_DISPLAY

session() {
  # One `mcpvisor shell` fed the given commands on stdin, one after another; its output is kept. A sign-in
  # whose browser failed would wait for its callback for minutes: the session gets SESSION_TIMEOUT_S.
  local label=$1 rc
  shift
  printf '%s\n' "$@" | timeout -k 5 "$SESSION_TIMEOUT_S" "$MCPVISOR" shell >"$SCRATCH/shell.$label.out" 2>&1
  rc=$?
  sed "s/^/  shell $label| /" "$SCRATCH/shell.$label.out" >&2
  log "shell $label ($*): exit $rc"
  return "$rc"
}

called() {
  # What the shell printed after the last line matching $2 (the status row, or the sign-in) is the call's
  # answer: a line "test" and no error. (`mcpvisor shell` with piped commands exits 1 when one failed.)
  local answer
  answer="$(awk -v marker="$2" '$0 ~ marker { text = ""; next } { text = text $0 "\n" } END { printf "%s", text }' "$1")"
  grep -qxE '[[:space:]]*test[[:space:]]*' <<<"$answer" && ! grep -qiE 'error|failed|needs authentication|needs a wider' <<<"$answer"
}

CALL='/call mcp__t__test-tool {}'
status=0
if grep -qE '"grant": "(client_credentials|identity_assertion)"' "$MCPVISOR_HOME/settings.json"; then
  log "machine-to-machine grant: no sign-in, the host gets its token by itself"
  session 1 /mcp "$CALL"
  rc1=$?
else
  session 1 '/login t' /mcp "$CALL"
  rc1=$?
  grep -q '✓ signed in to t' "$SCRATCH/shell.1.out" || { log "the sign-in did not succeed"; status=1; }
fi
[ "$rc1" -le 1 ] || status=1  # 1: a command failed (a step-up's call: below)
# The status view: server t is connected before the call.
grep -qE '^[[:space:]]*t · ● connected' "$SCRATCH/shell.1.out" || { log "the status view does not show t connected"; status=1; }
if called "$SCRATCH/shell.1.out" 't · ● connected'; then
  [ "$rc1" -eq 0 ] || { log "the call succeeded, yet the shell exited $rc1"; status=1; }
  log "tool call succeeded"
elif grep -q 'needs a wider sign-in' "$SCRATCH/shell.1.out"; then
  # A scope step-up: the signed-in call asks for a wider sign-in. Sign in again once and call again.
  log "signed in, yet the call asks for a wider sign-in (scope step-up): signing in again, calling again"
  before=$status
  status=1
  session 2 '/login t' "$CALL" && grep -q '✓ signed in to t' "$SCRATCH/shell.2.out" &&
    called "$SCRATCH/shell.2.out" '✓ signed in to t' && status=$before
else
  status=1
fi
log "done: exit $status"
exit "$status"
