#!/usr/bin/env bash
# screenshots.sh — regenerate docs/images/console-*.png, the web console's
# pages as its browser tests see them (docs/console.md): server/ui's
# TestAccessibility takes a full-page screenshot of each page it audits when
# OUTPOST_CONSOLE_SCREENSHOTS names a directory. Needs Debian's chromium
# (scripts/test.sh installs it; $OUTPOST_CHROMIUM names another browser).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/images
OUTPOST_CONSOLE_SCREENSHOTS="$PWD/docs/images" go test -count=1 -run '^TestAccessibility$' ./server/ui/
ls -l docs/images/console-*.png
