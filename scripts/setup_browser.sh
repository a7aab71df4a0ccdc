#!/usr/bin/env bash
# Set up offline page rendering (sweet/render/__init__.py):
#   1. a Chromium for Playwright: $SWEET_CHROMIUM, else Playwright's own browser, else the system `chromium`;
#      when none exists, install the Debian package `chromium` with apt (needs root; `playwright install` cannot
#      download browsers on the reference machines).
#   2. a local copy of tailwindcss@2.2.19 dist/tailwind.min.css, taken from the npm registry tarball, cached at
#      artifacts/vendor/tailwindcss@2.2.19/tailwind.min.css (git-ignored).
# Idempotent and quiet: a second run does nothing and prints one line per part. Exit status != 0 only when no
# browser can be provided; a failed Tailwind download is a warning (pages then render without Tailwind).
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"; [ -x "$PY" ] || PY=python3
TW_VERSION=2.2.19
TW_DIR=artifacts/vendor/tailwindcss@$TW_VERSION
TW_CSS=$TW_DIR/tailwind.min.css
TW_URL=${SWEET_TAILWIND_TGZ_URL:-https://registry.npmjs.org/tailwindcss/-/tailwindcss-$TW_VERSION.tgz}
# sha512 of the registry tarball, as published in the npm registry's `dist.integrity` for tailwindcss@2.2.19.
TW_INTEGRITY=${SWEET_TAILWIND_INTEGRITY:-sha512-6Ui7JSVtXadtTUo2NtkBBacobzWiQYVjYW0ZnKaP9S1ZCKQ0w7KVNz+YSDI/j7O7KCMHbOkz94ZMQhbT9pOqjw==}

find_browser() {
  if [ -n "${SWEET_CHROMIUM:-}" ] && [ -x "$SWEET_CHROMIUM" ]; then echo "$SWEET_CHROMIUM"; return 0; fi
  # Playwright's own Chromium (only when `playwright install chromium` worked on this machine).
  local pw
  pw=$("$PY" - 2>/dev/null <<'EOF'
import os
try:
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        path = p.chromium.executable_path
    print(path if os.path.exists(path) else "")
except Exception:
    print("")
EOF
)
  if [ -n "$pw" ]; then echo "$pw"; return 0; fi
  # Debian's /usr/bin/chromium is a shell wrapper that adds desktop flags; the binary itself is used directly.
  if [ -x /usr/lib/chromium/chromium ]; then echo /usr/lib/chromium/chromium; return 0; fi
  local c
  for c in chromium chromium-browser google-chrome-stable google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}

# ---- 1. browser -------------------------------------------------------------------------------------------------
if browser=$(find_browser); then
  echo "browser: $browser"
else
  if [ "$(id -u)" != 0 ]; then
    echo "browser: none found and not root; run 'sudo apt-get install -y chromium' or set SWEET_CHROMIUM" >&2
    exit 1
  fi
  echo "browser: installing the Debian package chromium (apt, ~1 min)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1
    apt-get install -y -qq --no-install-recommends chromium >/dev/null || {
      echo "browser: apt-get install chromium failed" >&2; exit 1; }
  fi
  browser=$(find_browser) || { echo "browser: chromium installed but not found on PATH" >&2; exit 1; }
  echo "browser: $browser"
fi

# ---- 2. Tailwind ------------------------------------------------------------------------------------------------
if [ -s "$TW_CSS" ]; then
  echo "tailwind: $TW_CSS"
  exit 0
fi
mkdir -p "$TW_DIR"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! curl -fsSL --retry 2 --max-time 120 -o "$tmp/tw.tgz" "$TW_URL"; then
  echo "tailwind: WARNING could not download $TW_URL; pages will render without Tailwind" >&2
  exit 0
fi
if [ -n "$TW_INTEGRITY" ]; then
  got=$("$PY" -c 'import base64,hashlib,sys; print("sha512-"+base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "$tmp/tw.tgz")
  if [ "$got" != "$TW_INTEGRITY" ]; then
    echo "tailwind: WARNING tarball integrity mismatch ($got); not installed" >&2; exit 0; fi
fi
if ! tar -xzf "$tmp/tw.tgz" -C "$tmp" package/dist/tailwind.min.css 2>/dev/null || [ ! -s "$tmp/package/dist/tailwind.min.css" ]; then
  echo "tailwind: WARNING tarball has no package/dist/tailwind.min.css; pages will render without Tailwind" >&2
  exit 0
fi
mv "$tmp/package/dist/tailwind.min.css" "$TW_CSS.part" && mv "$TW_CSS.part" "$TW_CSS"
echo "tailwind: $TW_CSS ($(wc -c < "$TW_CSS") bytes)"
