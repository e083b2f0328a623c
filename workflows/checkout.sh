# proxmox-gitops' checkout step: git alone, so that it works on a Gitea whose actions come from
# nowhere (DEFAULT_ACTIONS_URL=self, no public actions host) as well as on one that has
# actions/checkout. The installed workflows run it as a `run:` step in place of every
# `uses: actions/checkout@v4` (docs/workflows.md, "The checkout step").
#
# Inputs (environment; the step's `with:` keys of actions/checkout, renamed):
#   PGO_CHECKOUT_REPOSITORY  owner/name (default: the run's repository)
#   PGO_CHECKOUT_REF         branch, tag, refs/… or a 40-hex commit (default: the run's commit for
#                            the run's repository, the default branch for another)
#   PGO_CHECKOUT_PATH        directory under $GITHUB_WORKSPACE (default: the workspace itself)
#   PGO_CHECKOUT_SUBMODULES  false | true | recursive (default false)
#   PGO_CHECKOUT_TOKEN       Gitea token (default: the job's token)
#   PGO_CHECKOUT_DEPTH       commits of history to fetch, 0 = all (default 1)
#
# The token reaches git as an HTTP header for the run's own server only, through git's
# environment configuration (GIT_CONFIG_COUNT): never in an argument, a URL or a file, so a
# submodule on another host never receives it, and nothing is left in .git/config.
set -euo pipefail
esc() { local s="${1//%/%25}"; s="${s//$'\r'/%0D}"; printf '%s' "${s//$'\n'/%0A}"; }
fail() { echo "::error title=checkout::$(esc "$1")" >&2; exit 1; }

server="${GITHUB_SERVER_URL%/}"
[[ "$server" =~ ^https?://[^/@]+(/.*)?$ ]] || fail "GITHUB_SERVER_URL: expected http(s)://host[:port][/path] without credentials, found '$server'"
repository="${PGO_CHECKOUT_REPOSITORY:-$GITHUB_REPOSITORY}"
[[ "$repository" =~ ^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$ ]] || fail "repository: expected owner/name, found '$repository'"
url="$server/$repository.git"
rel="${PGO_CHECKOUT_PATH:-}"
case "/$rel/" in
  //?*/ | */../*) fail "path: '$rel' must be a relative path inside the workspace" ;;
esac
dest="$GITHUB_WORKSPACE${rel:+/$rel}"
depth_n="${PGO_CHECKOUT_DEPTH:-1}"
[[ "$depth_n" =~ ^[0-9]+$ ]] || fail "fetch-depth: expected a whole number, found '$depth_n'"
depth=()
[ "$depth_n" -eq 0 ] || depth=(--depth "$depth_n")

if [ -n "${PGO_CHECKOUT_TOKEN:-}" ]; then
  echo "::add-mask::$(esc "$PGO_CHECKOUT_TOKEN")"
  header="$(printf 'x-access-token:%s' "$PGO_CHECKOUT_TOKEN" | base64 -w0)"
  echo "::add-mask::$header"
  export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="http.$server/.extraheader"
  export GIT_CONFIG_VALUE_0="Authorization: basic $header"
  unset header PGO_CHECKOUT_TOKEN
fi
export GIT_TERMINAL_PROMPT=0
g() { git -c credential.helper= -c protocol.version=2 "$@"; }

# What to check out: (fetch ref, local branch, commit).
want="${PGO_CHECKOUT_REF:-}" fetchref="" branch="" sha=""
if [ -z "$want" ] && [ "${repository,,}" = "${GITHUB_REPOSITORY,,}" ]; then
  want="$GITHUB_REF" sha="$GITHUB_SHA"
fi
if [ -z "$want" ]; then
  want="$(g ls-remote --symref "$url" HEAD | sed -n 's#^ref: \(refs/heads/[^[:space:]]*\)[[:space:]]*HEAD$#\1#p')"
  [ -n "$want" ] || fail "$repository: cannot find its default branch at $url"
fi
if [[ "$want" =~ ^[0-9a-f]{40}$ ]]; then
  sha="$want"
elif [[ "$want" == refs/* ]]; then
  fetchref="$want"
else
  fetchref="$(g ls-remote "$url" "refs/heads/$want" "refs/tags/$want" | awk 'NR == 1 { print $2 }')"
  [ -n "$fetchref" ] || fail "$repository: no branch or tag '$want' at $url"
fi
case "$fetchref" in
  refs/heads/*) branch="${fetchref#refs/heads/}" target="refs/remotes/origin/$branch" ;;
  "") target="" ;;
  *) target="$fetchref" ;;
esac

# A repository already at the path (e.g. a submodule the monorepo's checkout put there) is
# reused; anything else there is removed, as actions/checkout does.
mkdir -p "$dest"
if [ "$(git -C "$dest" rev-parse --show-toplevel 2>/dev/null || true)" != "$(cd "$dest" && pwd -P)" ]; then
  find "$dest" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
  git -c init.defaultBranch=main init -q "$dest"
fi
cd "$dest"
git config remote.origin.url "$url"
echo "checking out $repository $want into ${rel:-the workspace}"
if [ -n "$fetchref" ]; then
  g fetch -q --no-tags --prune "${depth[@]}" origin "+$fetchref:$target"
  [ -n "$sha" ] || sha="$(git rev-parse "$target^{commit}")"
fi
# The event's commit when the branch has moved on since (fetched by id: protocol v2).
git cat-file -e "$sha^{commit}" 2>/dev/null || g fetch -q --no-tags "${depth[@]}" origin "$sha"
if [ -n "$branch" ]; then
  git checkout -q --force -B "$branch" "$sha"
else
  git checkout -q --force --detach "$sha"
fi
git clean -q -ffdx
case "${PGO_CHECKOUT_SUBMODULES:-false}" in
  false | "") ;;
  true)
    g submodule sync -q
    g submodule update -q --init --force
    ;;
  recursive)
    g submodule sync -q --recursive
    g submodule update -q --init --force --recursive
    ;;
  *) fail "submodules: expected false, true or recursive, found '$PGO_CHECKOUT_SUBMODULES'" ;;
esac
echo "HEAD is now at $(git log -1 --format='%h %s')"
{ echo "ref=$fetchref"; echo "commit=$sha"; } >> "$GITHUB_OUTPUT"
