#!/usr/bin/env bash
# Builds the Debian package: dist/switchboard_<version>_<arch>.deb, with the binary built
# with every channel and feature (MCP, Slack, the cluster, OTLP), the hardened unit, a
# `switchboard` system user made at install, an example config in /etc/switchboard/ (0640,
# the service's group) and the docs. The install is then:
#
#   sudo apt install ./switchboard_*.deb
#   sudo switchboard onboard --service     # the key, the tokens, the config, the workspace
#   sudo systemctl enable --now switchboard
#
# Usage: scripts/build-deb.sh [BINARY]   (default: cargo build --release with every feature)
# Needs cargo (unless BINARY is given) and dpkg-deb; nothing else from outside.
set -euo pipefail
cd "$(dirname "$0")/.."

features=otlp,mcp,slack,whatsapp,signal,email,matrix,cluster
binary=${1:-}
if [ -z "$binary" ]; then
    cargo build --release --locked -p switchboard --features "$features"
    binary=${CARGO_TARGET_DIR:-target}/release/switchboard
fi
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
arch=$(dpkg --print-architecture)
name=switchboard_${version}_${arch}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$work/$name
install -D -m 0755 "$binary" "$pkg/usr/bin/switchboard"
# As dh_strip leaves a binary: no symbols, no .comment or .note sections.
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$pkg/usr/bin/switchboard"

# The unit, for the package's paths: the binary in /usr/bin, and its opening comment the
# package's two steps instead of the source install's.
install -d "$pkg/lib/systemd/system"
{
    echo "# switchboard as a hardened systemd service, from the Debian package. To start it:"
    echo "#   sudo switchboard onboard --service   # the API key, the web chat's and the panel's tokens, the config, the workspace"
    echo "#   sudo systemctl enable --now switchboard"
    echo "# docs/deployment.md (/usr/share/doc/switchboard/deployment.md) says the rest."
    awk 'from || /^\[Unit\]/ { from = 1; print }' systemd/switchboard.service |
        sed 's|/usr/local/bin/switchboard|/usr/bin/switchboard|g'
} > "$pkg/lib/systemd/system/switchboard.service"
chmod 0644 "$pkg/lib/systemd/system/switchboard.service"

install -D -m 0640 config.example.toml "$pkg/etc/switchboard/config.example.toml"

doc=$pkg/usr/share/doc/switchboard
install -d "$doc"
install -m 0644 README.md docs/*.md "$doc/"
cat > "$doc/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: switchboard
Source: https://example.invalid/switchboard

Files: *
Copyright: 2025-2026 The switchboard authors
License: MIT or Apache-2.0
 On Debian systems the Apache License 2.0 is in /usr/share/common-licenses/Apache-2.0.
 .
 Permission is hereby granted, free of charge, to any person obtaining a copy of this
 software and associated documentation files (the "Software"), to deal in the Software
 without restriction, including without limitation the rights to use, copy, modify, merge,
 publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons
 to whom the Software is furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in all copies or
 substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED,
 INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR
 PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE
 FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
 OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER
 DEALINGS IN THE SOFTWARE.
EOF
chmod 0644 "$doc/copyright"
install -D -m 0644 packaging/debian/lintian-overrides "$pkg/usr/share/lintian/overrides/switchboard"
# The date of the last commit, so two builds of one commit are the same package. (A native
# package: its changelog is changelog.gz.)
when=$(git log -1 --format=%cD 2>/dev/null || date -R)
printf 'switchboard (%s) unstable; urgency=medium\n\n  * Built from %s.\n\n -- switchboard <switchboard@example.invalid>  %s\n' \
    "$version" "$(git rev-parse --short HEAD 2>/dev/null || echo 'a source tree')" "$when" |
    gzip -9n > "$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"

# What the binary links: the newest glibc symbol version it needs, and libgcc_s (unwinding).
glibc=$(objdump -T "$binary" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)
install -d "$pkg/DEBIAN"
cat > "$pkg/DEBIAN/control" <<EOF
Package: switchboard
Version: $version
Architecture: $arch
Maintainer: switchboard <switchboard@example.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
Depends: libc6 (>= ${glibc:-2.34}), libgcc-s1, passwd
Section: net
Priority: optional
Homepage: https://example.invalid/switchboard
Description: gateway between chat platforms and your own AI agent
 switchboard lets a person talk to their own AI agent from Telegram, Discord,
 Slack and a web chat page it serves. Each chat has its own agent loop, which
 calls any OpenAI-compatible server or Anthropic and runs the tools the model
 asks for, confined. It runs as a hardened systemd service and loses nothing
 when stopped. This build has every channel and feature: MCP, Slack, the
 cluster on NATS JetStream and OTLP tracing.
EOF
echo /etc/switchboard/config.example.toml > "$pkg/DEBIAN/conffiles"
for script in postinst prerm postrm; do
    install -m 0755 "packaging/debian/$script" "$pkg/DEBIAN/$script"
done

mkdir -p dist
dpkg-deb --root-owner-group -Zxz --build "$pkg" "dist/$name.deb" >/dev/null
echo "dist/$name.deb"
