#!/bin/sh
# Build the site strictly and photograph the home page, the configuration reference and the results page in a
# real headless browser (Debian: apt-get install chromium), for a person to look at: sh docs/screenshots.sh [OUT_DIR]
set -eu
out="${1:-/tmp/modsar-site-shots}"
cd "$(dirname "$0")/.."
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -q --site-dir "$out/site"
for page in index.html reference/config/index.html results/index.html; do
    name=$(echo "$page" | sed 's|/index.html||; s|/|-|g; s|\.html||')
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1000 \
        --screenshot="$out/$name.png" "file://$(realpath "$out/site/$page")" 2>/dev/null
    echo "$out/$name.png"
done
