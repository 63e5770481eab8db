#!/usr/bin/env bash
# Checks the Debian package scripts/build-deb.sh made: its contents and their modes, its
# control fields and maintainer scripts, lintian (every tag it reports is an error, except
# those argued in packaging/debian/lintian-overrides), and an install into a throwaway root
# (`dpkg --root`, maintainer scripts run chrootless with $DPKG_ROOT) from which `onboard
# --service`'s steps and `doctor` run against the test LLM server; then remove and purge.
#
# Usage: scripts/check-deb.sh dist/switchboard_VERSION_ARCH.deb
# Needs dpkg, lintian (skipped with a note when missing), root (for the install's owners)
# and cargo (for the test LLM server, testkit's fake-llm).
set -euo pipefail
cd "$(dirname "$0")/.."
deb=${1:?usage: scripts/check-deb.sh dist/switchboard_VERSION_ARCH.deb}
fail() {
    echo "check-deb: $*" >&2
    exit 1
}

echo "-- contents"
contents=$(dpkg-deb --contents "$deb")
for expected in \
    '^-rwxr-xr-x root/root .* \./usr/bin/switchboard$' \
    '^-rw-r--r-- root/root .* \./lib/systemd/system/switchboard\.service$' \
    '^-rw-r----- root/root .* \./etc/switchboard/config\.example\.toml$' \
    '^-rw-r--r-- root/root .* \./usr/share/doc/switchboard/copyright$' \
    '^-rw-r--r-- root/root .* \./usr/share/doc/switchboard/changelog\.gz$' \
    '^-rw-r--r-- root/root .* \./usr/share/doc/switchboard/deployment\.md$' \
    '^-rw-r--r-- root/root .* \./usr/share/lintian/overrides/switchboard$'; do
    grep -Eq -- "$expected" <<<"$contents" || fail "no file like $expected in:
$contents"
done
[ "$(dpkg-deb --field "$deb" Package)" = switchboard ] || fail "the package's name"
grep -q 'libc6 (>= 2\.' <<<"$(dpkg-deb --field "$deb" Depends)" || fail "Depends names no libc6 version"

work=$(mktemp -d)
llm=
cleanup() {
    [ -n "$llm" ] && kill "$llm" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
dpkg-deb --control "$deb" "$work/control"
[ "$(cat "$work/control/conffiles")" = /etc/switchboard/config.example.toml ] || fail "conffiles"
for script in postinst prerm postrm; do
    sh -n "$work/control/$script" || fail "$script does not parse"
done
dpkg-deb --extract "$deb" "$work/files"
unit=$work/files/lib/systemd/system/switchboard.service
grep -q '^ExecStart=/usr/bin/switchboard ' "$unit" || fail "the unit does not run /usr/bin/switchboard"
grep -q '^LoadCredential=switchboard:/etc/switchboard/credentials$' "$unit" || fail "the unit loads no credentials"
"$work/files/usr/bin/switchboard" --help | grep -q '^  mcp ' || fail "the binary was built without MCP"

echo "-- lintian"
if command -v lintian >/dev/null 2>&1; then
    lintian --fail-on error,warning,info --info "$deb" || fail "lintian (argue a tag in packaging/debian/lintian-overrides, or fix it)"
else
    echo "lintian is not installed: skipped"
fi

echo "-- install into a throwaway root"
if [ "$(id -u)" != 0 ]; then
    echo "not root: the install into a throwaway root is skipped"
    exit 0
fi
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
touch "$root/var/lib/dpkg/status"
# The accounts files of a base system, for useradd --prefix.
cp -p /etc/passwd /etc/group /etc/shadow /etc/gshadow /etc/login.defs "$root/etc/"
dpkg --root="$root" --force-script-chrootless --force-depends --install "$deb" >/dev/null
grep -q '^switchboard:.*:/var/lib/switchboard:/usr/sbin/nologin$' "$root/etc/passwd" || fail "no switchboard user"
gid=$(awk -F: '$1 == "switchboard" { print $3 }' "$root/etc/group")
[ "$(stat -c '%a %u %g' "$root/etc/switchboard")" = "750 0 $gid" ] || fail "/etc/switchboard is not root:switchboard 0750"
[ "$(stat -c '%a %u' "$root/etc/switchboard/credentials")" = "700 0" ] || fail "the credentials directory is not root's only"

echo "-- onboard and doctor, from the installed binary"
cargo build --locked -q -p switchboard-testkit --bin fake-llm
exec 3< <(exec "${CARGO_TARGET_DIR:-target}/debug/fake-llm" 127.0.0.1:0)
llm=$!
read -r -t 30 line <&3 || fail "the test LLM server did not start"
url=$(sed -n 's/.*base_url = "\([^"]*\)".*/\1/p' <<<"$line")
bin=$root/usr/bin/switchboard
printf 'sk-test\n' | install -m 0600 /dev/stdin "$root/etc/switchboard/credentials/llm-key"
"$bin" onboard --config "$root/etc/switchboard/config.toml" \
    --workspace "$root/var/lib/switchboard/workspace" --state-dir "$root/var/lib/switchboard/state" \
    --credential-key llm-key --base-url "$url" --model scripted </dev/null
for token in ws-token admin-token; do
    [ -s "$root/etc/switchboard/credentials/$token" ] || fail "onboard made no $token"
done
# As root, doctor reads the service's credentials where the unit loads them (beside the
# config): every part checked, none left as the service's (`?`).
said=$(env -u CREDENTIALS_DIRECTORY "$bin" doctor --config "$root/etc/switchboard/config.toml") ||
    fail "doctor: $said"
echo "$said"
if grep -q '^?' <<<"$said"; then fail "doctor left secrets unchecked as root"; fi

echo "-- remove, then purge"
dpkg --root="$root" --force-script-chrootless --remove switchboard >/dev/null
[ ! -e "$bin" ] || fail "the binary is still there after remove"
[ -e "$root/etc/switchboard/config.toml" ] || fail "remove took the config (only purge may)"
dpkg --root="$root" --force-script-chrootless --purge switchboard >/dev/null
[ ! -e "$root/etc/switchboard" ] || fail "purge left /etc/switchboard"
[ ! -e "$root/var/lib/switchboard" ] || fail "purge left /var/lib/switchboard"
echo "the package checks out"
