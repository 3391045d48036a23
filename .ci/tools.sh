#!/usr/bin/env bash
# Installs the pinned real agent CLIs that the contract tests drive (tests/agents/test_real_*.py):
# npm packages into the private prefix .ci/tools (binaries in .ci/tools/node_modules/.bin), and aider
# into its own venv .ci/tools/aider-venv (aider pins many dependencies; it stays out of .venv).
# Idempotent: a tool already installed at its pinned version is skipped. A registry that cannot be
# reached is reported and skipped; the tests then skip with a reason, or fail when CI is set.
set -uo pipefail
cd "$(dirname "$0")/.."

tools=.ci/tools
npm_pins=(
    "@openai/codex@0.171.0"
    "opencode-ai@1.18.33"
    "@anthropic-ai/claude-code@2.1.332"
    "@google/gemini-cli@0.61.0"
)
aider_pin="aider-chat==0.86.2"
mkdir -p "$tools"
status=0

installed_npm_version() { # PACKAGE -> the version in the prefix, or nothing
    node -e 'try { console.log(require(process.argv[1]).version) } catch (e) {}' \
        "$PWD/$tools/node_modules/$1/package.json" 2>/dev/null
}

if command -v npm >/dev/null 2>&1; then
    missing=()
    for pin in "${npm_pins[@]}"; do
        name=${pin%@*}
        if [ "$(installed_npm_version "$name")" != "${pin##*@}" ]; then missing+=("$pin"); fi
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "tools.sh: npm install ${missing[*]}"
        npm install --prefix "$tools" --no-audit --no-fund --no-save --loglevel=error "${missing[@]}" ||
            { echo "tools.sh: npm install failed; the real-CLI tests for these tools will skip"; status=1; }
    else
        echo "tools.sh: npm tools already installed"
    fi
else
    echo "tools.sh: npm not found; the npm CLIs are not installed"
    status=1
fi

venv=$tools/aider-venv
if [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("aider-chat"))' 2>/dev/null)" = "${aider_pin#*==}" ]; then
    echo "tools.sh: aider already installed"
else
    echo "tools.sh: pip install $aider_pin into $venv"
    log=$tools/aider-install.log
    { python3 -m venv "$venv" && PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install -q "$aider_pin"; } >"$log" 2>&1 ||
        { tail -n 20 "$log"; echo "tools.sh: aider install failed; the aider real-CLI tests will skip"; status=1; }
fi

# A missing tool is never fatal here: the tests decide (skip, or fail when CI is set).
[ $status -eq 0 ] || echo "tools.sh: some tools are missing"
exit 0
