# Sourced by test/run: installs (once, cached) what the browser test needs.
#   code-server  CODE_SERVER_PIN from npm, with the fixes its native modules need here
#   playwright-core PLAYWRIGHT_PIN from npm (drives the browser; no browser download)
#   chromium     Debian's package (apt-get), the browser Playwright drives
# Everything goes under $VSC_CACHE (${FORGE_TEST_CACHE:-~/.cache/forge-lsp-tests}/vscode).
# Functions call `skip` (exit 77) only when Chromium cannot be had; other failures `fail`.

CODE_SERVER_PIN=4.100.3
PLAYWRIGHT_PIN=1.65.1
RIPGREP_ASSET=ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
  else return 1; fi
}

apt_updated=
apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  if [ -z "$apt_updated" ]; then
    as_root apt-get update -qq >/dev/null 2>&1 || return 1
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
}

find_chromium() {
  local c
  for c in "${FORGE_TEST_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

install_chromium() {
  CHROMIUM=$(find_chromium) && return 0
  echo "installing chromium (apt)..."
  apt_install chromium || skip "Chromium cannot be installed here (apt-get install chromium failed or needs root)"
  CHROMIUM=$(find_chromium) || skip "apt-get installed chromium but there is no /usr/bin/chromium"
}

# code-server's npm install builds native modules (kerberos, native-keymap, ...) and
# downloads ripgrep; the Debian dev packages cover the first, a seeded cache the second.
install_code_server() {
  CODE_SERVER_DIR=$VSC_CACHE/code-server-$CODE_SERVER_PIN
  CODE_SERVER=$CODE_SERVER_DIR/node_modules/.bin/code-server
  [ -e "$CODE_SERVER_DIR/.installed" ] && [ -x "$CODE_SERVER" ] && return 0
  echo "installing code-server $CODE_SERVER_PIN (npm, about a minute)..."
  local pkgs=() p
  for p in libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev ripgrep; do
    dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p")
  done
  if [ ${#pkgs[@]} -gt 0 ]; then
    apt_install "${pkgs[@]}" || fail "apt-get install ${pkgs[*]} (needed to build code-server) failed"
  fi
  command -v rg >/dev/null 2>&1 || fail "no rg after installing ripgrep"
  local tmpd=$VSC_CACHE/tmp
  rm -rf "$CODE_SERVER_DIR" "$tmpd"
  mkdir -p "$CODE_SERVER_DIR" "$tmpd/vscode-ripgrep-cache-1.15.11" "$tmpd/rg/bin"
  cp "$(command -v rg)" "$tmpd/rg/rg"
  tar -C "$tmpd/rg" -czf "$tmpd/vscode-ripgrep-cache-1.15.11/$RIPGREP_ASSET" rg
  echo '{"name":"forge-vscode-test-code-server","private":true}' > "$CODE_SERVER_DIR/package.json"
  if ! (cd "$CODE_SERVER_DIR" && TMPDIR=$tmpd npm_config_cache=$VSC_CACHE/npm-cache \
        npm_config_unsafe_perm=true npm_config_yes=true npm_config_fund=false npm_config_audit=false \
        npm install --no-save --foreground-scripts "code-server@$CODE_SERVER_PIN") > "$VSC_CACHE/code-server-install.log" 2>&1; then
    tail -30 "$VSC_CACHE/code-server-install.log"
    fail "npm install code-server@$CODE_SERVER_PIN failed (log: $VSC_CACHE/code-server-install.log)"
  fi
  [ -x "$CODE_SERVER" ] || fail "code-server installed without its bin"
  touch "$CODE_SERVER_DIR/.installed"
  rm -rf "$tmpd"
}

install_playwright() {
  PLAYWRIGHT_DIR=$VSC_CACHE/playwright-core-$PLAYWRIGHT_PIN
  [ -e "$PLAYWRIGHT_DIR/.installed" ] && return 0
  echo "installing playwright-core $PLAYWRIGHT_PIN (npm)..."
  rm -rf "$PLAYWRIGHT_DIR"
  mkdir -p "$PLAYWRIGHT_DIR"
  echo '{"name":"forge-vscode-test-playwright","private":true}' > "$PLAYWRIGHT_DIR/package.json"
  (cd "$PLAYWRIGHT_DIR" && npm_config_cache=$VSC_CACHE/npm-cache npm_config_fund=false npm_config_audit=false \
    npm install --no-save "playwright-core@$PLAYWRIGHT_PIN") > "$VSC_CACHE/playwright-install.log" 2>&1 \
    || { tail -20 "$VSC_CACHE/playwright-install.log"; fail "npm install playwright-core@$PLAYWRIGHT_PIN failed"; }
  touch "$PLAYWRIGHT_DIR/.installed"
}
