#!/usr/bin/env bash
# Runs the MCP end-to-end test: installs the npm dependencies (npm ci from
# package-lock.json) and runs node's test runner against $HUTCH_BIN mcp.
# As root, hutch runs as uid/gid 65534 (through setpriv).
#
#   make build && HUTCH_BIN=$PWD/bin/hutch bash test/mcp/run.sh
set -euo pipefail
cd "$(dirname "$0")"

if [ -z "${HUTCH_BIN:-}" ]; then
	echo "test/mcp/run.sh: HUTCH_BIN is not set: point it at the built hutch binary (make build; HUTCH_BIN=\$PWD/bin/hutch)" >&2
	exit 2
fi
case "$HUTCH_BIN" in
/*) ;;
*) HUTCH_BIN="$OLDPWD/$HUTCH_BIN" ;;
esac
export HUTCH_BIN
for tool in node npm; do
	command -v "$tool" >/dev/null || { echo "test/mcp/run.sh: $tool not found: install Node.js 20 or newer" >&2; exit 2; }
done
if [ "$(id -u)" = 0 ] && ! command -v setpriv >/dev/null; then
	echo "test/mcp/run.sh: setpriv not found (util-linux): needed to run hutch as uid 65534 when the test runs as root" >&2
	exit 2
fi

if [ -f package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error
else
	npm install --no-audit --no-fund --loglevel=error
fi
exec node --test
