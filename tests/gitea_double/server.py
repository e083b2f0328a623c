#!/usr/bin/env python3
"""A stateful Gitea test double for proxmox-gitops' tests.

Serves ONLY operations of Gitea's Swagger spec (ROUTES below; `check_spec.py` verifies every
one against swagger.v1.json and every logged exchange against the spec's schemas), keeping
orgs, repos (with their description), forks, pull requests, Actions variables and Actions
secrets in memory with Gitea's status codes, plus real git over smart HTTP through `git http-backend` (bare repos under
--root).

Merging a pull request (`repoMergePullRequest`) makes real commits in the bare repository, as
Gitea's merge styles do: `merge` always writes a merge commit (parents: base, head; never a
fast-forward), `rebase` replays the head's commits onto the base (a fast-forward when the base
is an ancestor), `rebase-merge` does that and then a merge commit, `squash` one commit with the
merged tree, `fast-forward-only` only moves the base, `manually-merged` only records
`merge_commit_id`. An already merged pull request answers 405 and a closed one 404 (Gitea's
`ErrIsClosed`); a `head_commit_id` that is not the head any more 409 ("head out of date"); a
rebase that conflicts 409 (with Gitea's conflict body); a fast-forward-only merge of a diverged
base 500 (Gitea 1.27.3 does not map `ErrMergeDivergingFastForwardOnly`). The base branch moves
with a compare-and-swap, as a push.

Gitea's background work (Gitea 1.27.3; see README.md): a pushed branch is known to
`repoCreatePullRequest` only `--background-delay` seconds after the push (404 "not found"
until then), and a pull request is checked for `--background-delay` seconds after it is opened,
after a push to its head or base and after a refused merge (409 "head out of date", the 500
above): meanwhile it is `mergeable: false` and a merge answers 405 "Please try again later". A
pull request whose branches conflict gets that same 405 (Gitea refuses before trying) and stays
`mergeable: false`; a merged one is `mergeable: true`.

Log (--log FILE, one JSON object a line): every API exchange (`"kind": "api"`), every git HTTP
request (`"kind": "git"`) and every change of branches (`"kind": "push"`: `repo` = `owner/name`,
`via` = `git` for a push or `merge` for a merged pull request, `updates` = `[{"ref", "before",
"after"}]` with `before`/`after` = null when created/deleted) — what a runner dispatch watches.

Secrets: their values are kept (in memory and in DIR/secrets.json, the double's "database", so
that tests can check what was written) but never logged: a logged request to a secret carries
`{"data": "<redacted sha256:HEX>"}` (the SHA-256 of the value, so a test can still tell two
writes apart), and the secrets list answers names and `created_at` only, as Gitea does.

Start: server.py --root DIR [--port 0] [--log FILE] [--faults FILE] [--background-delay SECONDS]
Credentials come from the environment (never from arguments): GITEA_DOUBLE_LOGIN,
GITEA_DOUBLE_PASSWORD, GITEA_DOUBLE_TOKEN. Prints `PORT <n>` on stdout once listening.

Faults: --faults names a JSON file `[{"method": "GET", "path": "/api/v1/orgs/main",
"status": 500, "times": 1}]`, re-read when it changes; a matching request is answered with that
status (and logged with "fault": true) `times` times.
"""

import argparse
import base64
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API = "/api/v1"
DATE = "2026-01-01T00:00:00Z"

# (method, swagger path template, handler name)
ROUTES = [
    ("GET", "/version", "version"),
    ("GET", "/user", "current_user"),
    ("POST", "/orgs", "org_create"),
    ("GET", "/orgs/{org}", "org_get"),
    ("POST", "/orgs/{org}/repos", "repo_create"),
    ("GET", "/repos/{owner}/{repo}", "repo_get"),
    ("PATCH", "/repos/{owner}/{repo}", "repo_edit"),
    ("DELETE", "/repos/{owner}/{repo}", "repo_delete"),
    ("GET", "/repos/{owner}/{repo}/forks", "fork_list"),
    ("POST", "/repos/{owner}/{repo}/forks", "fork_create"),
    ("GET", "/repos/{owner}/{repo}/pulls", "pull_list"),
    ("POST", "/repos/{owner}/{repo}/pulls", "pull_create"),
    ("GET", "/repos/{owner}/{repo}/pulls/{index}", "pull_get"),
    ("PATCH", "/repos/{owner}/{repo}/pulls/{index}", "pull_edit"),
    ("GET", "/repos/{owner}/{repo}/compare/{basehead}", "compare"),
    ("GET", "/repos/{owner}/{repo}/pulls/{index}/merge", "pull_is_merged"),
    ("POST", "/repos/{owner}/{repo}/pulls/{index}/merge", "pull_merge"),
    ("GET", "/orgs/{org}/actions/variables", "var_list"),
    ("GET", "/orgs/{org}/actions/variables/{variablename}", "var_get"),
    ("POST", "/orgs/{org}/actions/variables/{variablename}", "var_create"),
    ("PUT", "/orgs/{org}/actions/variables/{variablename}", "var_update"),
    ("DELETE", "/orgs/{org}/actions/variables/{variablename}", "var_delete"),
    ("GET", "/repos/{owner}/{repo}/actions/variables", "var_list"),
    ("GET", "/repos/{owner}/{repo}/actions/variables/{variablename}", "var_get"),
    ("POST", "/repos/{owner}/{repo}/actions/variables/{variablename}", "var_create"),
    ("PUT", "/repos/{owner}/{repo}/actions/variables/{variablename}", "var_update"),
    ("DELETE", "/repos/{owner}/{repo}/actions/variables/{variablename}", "var_delete"),
    ("GET", "/orgs/{org}/actions/secrets", "secret_list"),
    ("PUT", "/orgs/{org}/actions/secrets/{secretname}", "secret_put"),
    ("GET", "/repos/{owner}/{repo}/actions/secrets", "secret_list"),
    ("PUT", "/repos/{owner}/{repo}/actions/secrets/{secretname}", "secret_put"),
]


def compile_route(template):
    pattern = re.sub(r"\{([a-z_]+)\}", r"(?P<\1>[^/]+)", template)
    return re.compile("^" + pattern + "$")


COMPILED = [(m, t, compile_route(t), h) for (m, t, h) in ROUTES]
MERGE_STYLES = ("merge", "rebase", "rebase-merge", "squash", "fast-forward-only", "manually-merged")
# Gitea's page sizes: `DEFAULT_PAGING_NUM` 30, `MAX_RESPONSE_ITEMS` 50.
DEFAULT_LIMIT, MAX_LIMIT = 30, 50
REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
VAR_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$", re.I)
# Gitea's answer to a merge while the pull request is not mergeable (being checked, or
# conflicting): `ErrNotMergeableState` in routers/api/v1/repo/pull.go.
TRY_AGAIN_LATER = "Please try again later"


class HttpError(Exception):
    """An answer other than success: `message` becomes Gitea's APIError body; `conflict` is a
    body of its own (Gitea answers merge conflicts with the conflict error's fields)."""

    def __init__(self, status, message=None, conflict=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.conflict = conflict


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def redacted(template, request):
    """The request as logged: a secret's `data` replaced by `<redacted sha256:HEX>`."""
    if "/actions/secrets/" in template and isinstance(request, dict) and isinstance(request.get("data"), str):
        digest = hashlib.sha256(request["data"].encode()).hexdigest()
        return dict(request, data=f"<redacted sha256:{digest}>")
    return request


def page_and_limit(q):
    """`page` (from 1) and `limit` (1..MAX_LIMIT, default DEFAULT_LIMIT) as Gitea reads them."""
    def number(name, default):
        try:
            return int((q.get(name) or [str(default)])[0])
        except ValueError:
            return default
    return max(1, number("page", 1)), max(1, min(MAX_LIMIT, number("limit", DEFAULT_LIMIT)))


class State:
    def __init__(self, root, login, password, token, background_delay=0.3):
        self.root = root
        # Seconds Gitea's queues take to record a pushed branch and to check a pull request.
        self.background_delay = background_delay
        self.branch_known_at = {}  # (repo key, branch) -> monotonic time from which it is known
        self.login = login
        self.password = password
        self.token = token
        self.lock = threading.RLock()
        self.next_id = 1
        self.user = {"id": self.new_id(), "login": login}
        self.orgs = {}  # lower name -> {"id", "name"}
        self.repos = {}  # (lower owner, lower name) -> dict
        self.pulls = {}  # repo key -> list of dicts
        self.vars = {}  # ("org", lower) | ("repo", lower owner, lower name) -> {NAME: {data, description}}
        self.secrets = {}  # same keys -> {NAME: {data, description, created_at}}
        self.git_locks = {}  # repo key -> Lock held while a push or a merge changes its refs

    def new_id(self):
        self.next_id += 1
        return self.next_id

    def owner_json(self, owner):
        o = self.orgs.get(owner.lower())
        if o is not None:
            return user_json(o["id"], o["name"], False)
        return user_json(self.user["id"], self.user["login"], True)

    def git_dir(self, repo):
        return os.path.join(self.root, repo["owner"].lower(), repo["name"].lower() + ".git")

    def git(self, repo, *args):
        r = subprocess.run(["git", "--git-dir", self.git_dir(repo), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    def git_run(self, repo, *args, identity=False, in_worktree=False):
        """(exit code, stdout, stderr) of git on the bare repository; `identity` makes the
        authenticated user author and committer (merge commits); `in_worktree` runs git in a
        worktree of it (args then start with `-C DIR`) instead of naming the bare git dir."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.root, "GIT_CONFIG_NOSYSTEM": "1"}
        if identity:
            for who in ("AUTHOR", "COMMITTER"):
                env[f"GIT_{who}_NAME"] = self.login
                env[f"GIT_{who}_EMAIL"] = f"{self.login}@example.invalid"
        where = [] if in_worktree else ["--git-dir", self.git_dir(repo)]
        r = subprocess.run(["git", *where, *args], capture_output=True, text=True, env=env)
        return r.returncode, r.stdout.strip(), r.stderr.strip()

    def branch_sha(self, repo, branch):
        return self.git(repo, "rev-parse", "--verify", "-q", "refs/heads/" + branch)

    def heads(self, repo):
        """{refname: sha} of the repository's branches."""
        out = self.git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/") or ""
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    def branch_known(self, repo, branch):
        """Whether Gitea's push queue has recorded `branch` (its last push is old enough)."""
        with self.lock:
            return time.monotonic() >= self.branch_known_at.get((key_of(repo), branch), 0)

    def pushed(self, repo, refs, via):
        """Starts the background work of a change of `refs`: a branch a push made is recorded
        later, and every open pull request on a changed branch is checked again."""
        later = time.monotonic() + self.background_delay
        with self.lock:
            for ref in refs:
                branch = ref[len("refs/heads/"):]
                if via == "git":
                    self.branch_known_at[(key_of(repo), branch)] = later
                for pr in self.pulls.get(key_of(repo), []):
                    if pr["state"] == "open" and branch in (pr["head"], pr["base"]):
                        pr["checked_at"] = later

    def recheck(self, pr):
        """Queues the mergeable check of `pr` (Gitea: `AddToTaskQueue`)."""
        with self.lock:
            pr["checked_at"] = time.monotonic() + self.background_delay

    @staticmethod
    def checking(pr):
        """Whether the background check of `pr` has not run yet."""
        return time.monotonic() < pr.get("checked_at", 0)

    def git_lock(self, repo):
        with self.lock:
            return self.git_locks.setdefault(key_of(repo), threading.Lock())

    def repo_json(self, repo, depth=0):
        branches = self.git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/") or ""
        count = len([b for b in branches.splitlines() if b])
        base = self.base_url
        full = f"{repo['owner']}/{repo['name']}"
        pulls = self.pulls.get(key_of(repo), [])
        d = {
            "id": repo["id"], "name": repo["name"], "full_name": full, "owner": self.owner_json(repo["owner"]),
            "description": repo.get("description", ""), "empty": count == 0, "private": False, "fork": repo["parent"] is not None,
            "template": False, "mirror": False, "size": 0, "language": "", "languages_url": f"{base}{API}/repos/{full}/languages",
            "html_url": f"{base}/{full}", "url": f"{base}{API}/repos/{full}", "link": "", "ssh_url": f"git@127.0.0.1:{full}.git",
            "clone_url": f"{base}/{full}.git", "original_url": "", "website": "", "stars_count": 0,
            "forks_count": len([r for r in self.repos.values() if r["parent"] == key_of(repo)]), "watchers_count": 0,
            "open_issues_count": 0, "open_pr_counter": len([p for p in pulls if p["state"] == "open"]), "release_counter": 0,
            "default_branch": repo["default_branch"], "archived": False, "created_at": DATE, "updated_at": DATE,
            "archived_at": "1970-01-01T00:00:00Z", "permissions": {"admin": True, "push": True, "pull": True},
            "has_code": True, "has_issues": repo["has_issues"], "has_wiki": repo["has_wiki"],
            "has_pull_requests": True, "has_projects": repo["has_projects"], "projects_mode": "all",
            "has_releases": repo["has_releases"], "has_packages": repo["has_packages"], "has_actions": True,
            "ignore_whitespace_conflicts": False, "allow_merge_commits": True, "allow_rebase": True,
            "allow_rebase_explicit": True, "allow_squash_merge": True, "allow_fast_forward_only_merge": True,
            "allow_rebase_update": True, "allow_manual_merge": False, "autodetect_manual_merge": False,
            "default_delete_branch_after_merge": False, "default_merge_style": "merge", "default_update_style": "merge",
            "default_allow_maintainer_edit": False, "avatar_url": "", "internal": False, "mirror_interval": "",
            "object_format_name": "sha1", "mirror_updated": "0001-01-01T00:00:00Z", "topics": [], "licenses": [],
            "branch_count": count,
        }
        if repo["parent"] is not None and depth == 0:
            d["parent"] = self.repo_json(self.repos[repo["parent"]], depth + 1)
        return d


def key_of(repo):
    return (repo["owner"].lower(), repo["name"].lower())


def user_json(uid, login, is_admin):
    return {
        "id": uid, "login": login, "login_name": "", "source_id": 0, "full_name": "", "email": f"{login}@example.invalid",
        "avatar_url": "", "html_url": "", "language": "", "is_admin": is_admin, "last_login": DATE, "created": DATE,
        "restricted": False, "active": True, "prohibit_login": False, "location": "", "website": "",
        "description": "", "visibility": "public", "followers_count": 0, "following_count": 0, "starred_repos_count": 0,
    }


def org_json(o):
    return {
        "id": o["id"], "name": o["name"], "username": o["name"], "full_name": o.get("full_name", ""), "email": "",
        "avatar_url": "", "description": o.get("description", ""), "website": "", "location": "",
        "visibility": o.get("visibility", "public"), "repo_admin_change_team_access": False,
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "GiteaDouble/1.25"

    def log_message(self, fmt, *args):  # quiet
        pass

    # ---------------------------------------------------------------- plumbing
    @property
    def state(self):
        return self.server.state

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send(self, status, body=b"", ctype="application/json;charset=utf-8", headers=None):
        self.send_response(status)
        if body or status not in (204, 304):
            self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def log_exchange(self, entry):
        path = self.server.log_path
        if not path:
            return
        with self.server.log_lock, open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def auth_user(self):
        """The authenticated login, None when anonymous; raises 401 on bad credentials."""
        h = self.headers.get("Authorization")
        if not h:
            return None
        st = self.state
        scheme, _, value = h.partition(" ")
        if scheme.lower() == "token" and st.token and value == st.token:
            return st.login
        if scheme.lower() == "basic":
            try:
                user, _, pw = base64.b64decode(value).decode().partition(":")
            except Exception:
                raise HttpError(401, "invalid basic auth header")
            if user == st.login and st.password and pw == st.password:
                return user
            if st.token and pw == st.token:  # a token as password (git over HTTP)
                return st.login
        raise HttpError(401, "user does not exist or wrong credentials")

    def fault(self, method, path):
        faults = self.server.load_faults()
        for f in faults:
            if f.get("method", method) == method and f.get("path") == path and f.get("times", 1) > 0:
                f["times"] = f.get("times", 1) - 1
                return f.get("status", 500)
        return None

    # ---------------------------------------------------------------- dispatch
    def handle_any(self, method):
        parsed = urllib.parse.urlsplit(self.path)
        path = parsed.path
        body = self.read_body()
        if path.startswith(API + "/") or path == API:
            return self.api(method, path[len(API):], urllib.parse.parse_qs(parsed.query), body)
        m = re.match(r"^/([^/]+)/([^/]+?)\.git(/.*)$", path)
        if m:
            return self.git_http(method, m.group(1), m.group(2), m.group(3), parsed.query, body)
        self.send(404, b"not found", "text/plain")

    def api(self, method, path, query, raw):
        entry = {"kind": "api", "method": method, "path": path, "template": None, "query": query}
        status = self.fault(method, API + path)
        if status:
            payload = {"message": "injected fault", "url": ""}
            entry.update(status=status, fault=True, response=payload)
            self.log_exchange(entry)
            return self.send(status, json.dumps(payload).encode())
        for m, template, rx, handler in COMPILED:
            if m != method:
                continue
            match = rx.match(path)
            if not match:
                continue
            entry["template"] = template
            params = {k: urllib.parse.unquote(v) for k, v in match.groupdict().items()}
            try:
                request = json.loads(raw) if raw else None
            except ValueError:
                request = None
            entry["request"] = redacted(template, request)
            try:
                self.auth_user() or self.require_auth()
                with self.state.lock:
                    status, payload = getattr(self, "h_" + handler)(params, query, request)
            except HttpError as e:
                status, payload = e.status, e.conflict or {"message": e.message or "", "url": ""}
                if e.status == 404 and not e.message:
                    payload = {"message": "The target couldn't be found.", "url": "", "errors": []}
            entry.update(status=status, response=payload)
            self.log_exchange(entry)
            return self.send(status, b"" if payload is None else json.dumps(payload).encode())
        entry.update(status=404, response=None)
        self.log_exchange(entry)
        return self.send(404, b'{"message":"route not served by the double"}')

    def require_auth(self):
        raise HttpError(401, "token is required")

    # ---------------------------------------------------------------- git smart HTTP
    def git_http(self, method, owner, name, rest, query, body):
        st = self.state
        entry = {"kind": "git", "method": method, "path": self.path}
        try:
            user = self.auth_user()
        except HttpError:
            user = None
            entry["status"] = 401
            self.log_exchange(entry)
            return self.send(401, b"bad credentials", "text/plain", {"WWW-Authenticate": 'Basic realm="Gitea"'})
        with st.lock:
            repo = st.repos.get((owner.lower(), name.lower()))
        if repo is None:
            entry["status"] = 404
            self.log_exchange(entry)
            return self.send(404, b"repository not found", "text/plain")
        push = rest == "/git-receive-pack" or "service=git-receive-pack" in query
        if push and user is None:
            entry["status"] = 401
            self.log_exchange(entry)
            return self.send(401, b"authentication required", "text/plain", {"WWW-Authenticate": 'Basic realm="Gitea"'})
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": st.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"/{repo['owner'].lower()}/{repo['name'].lower()}.git{rest}",
            "QUERY_STRING": query,
            "REQUEST_METHOD": method,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "REMOTE_USER": user or "",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": st.root,
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            env["HTTP_GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if push:
            env["GIT_CONFIG_COUNT"] = "1"
            env["GIT_CONFIG_KEY_0"] = "http.receivepack"
            env["GIT_CONFIG_VALUE_0"] = "true"
        receive = method == "POST" and rest == "/git-receive-pack"
        if receive:
            # One push (or merge) at a time per repository, so that the branches it changed are
            # exactly the difference of before and after.
            with st.git_lock(repo):
                before = st.heads(repo)
                r = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env)
                after = st.heads(repo)
        else:
            r = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env)
        head, _, payload = r.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = r.stdout.partition(b"\n\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k.lower() not in ("content-length",):
                headers[k.strip()] = v.strip()
        ctype = headers.pop("Content-Type", "application/octet-stream")
        entry["status"] = status
        self.log_exchange(entry)
        if receive:
            self.log_push(repo, "git", before, after)
        self.send(status, payload, ctype, headers)

    def log_push(self, repo, via, before, after):
        """Logs the branches that changed between the `before` and `after` {ref: sha} maps."""
        updates = [{"ref": ref, "before": before.get(ref), "after": after.get(ref)}
                   for ref in sorted(set(before) | set(after)) if before.get(ref) != after.get(ref)]
        self.state.pushed(repo, [u["ref"] for u in updates], via)
        if updates:
            self.log_exchange({"kind": "push", "via": via, "repo": f"{repo['owner']}/{repo['name']}",
                               "updates": updates})

    # ---------------------------------------------------------------- API handlers
    def h_version(self, p, q, b):
        return 200, {"version": "1.25.0"}

    def h_current_user(self, p, q, b):
        st = self.state
        return 200, user_json(st.user["id"], st.user["login"], True)

    def h_org_create(self, p, q, b):
        st = self.state
        name = (b or {}).get("username") or ""
        if not REPO_NAME.match(name):
            raise HttpError(422, "[Username]: invalid name")
        if name.lower() in st.orgs or name.lower() == st.login.lower():
            raise HttpError(422, f"user already exists [name: {name}]")
        o = {"id": st.new_id(), "name": name, "visibility": (b or {}).get("visibility", "public")}
        st.orgs[name.lower()] = o
        return 201, org_json(o)

    def h_org_get(self, p, q, b):
        o = self.state.orgs.get(p["org"].lower())
        if o is None:
            raise HttpError(404)
        return 200, org_json(o)

    def repo(self, owner, name):
        r = self.state.repos.get((owner.lower(), name.lower()))
        if r is None:
            raise HttpError(404)
        return r

    def new_repo(self, owner, name, parent=None, default_branch="main"):
        st = self.state
        r = {"id": st.new_id(), "owner": owner, "name": name, "parent": parent, "default_branch": default_branch,
             "has_issues": True, "has_wiki": True, "has_projects": True, "has_releases": True, "has_packages": True}
        path = st.git_dir(r)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if parent is None:
            subprocess.run(["git", "init", "-q", "--bare", "-b", default_branch, path], check=True)
        else:
            subprocess.run(["git", "clone", "-q", "--bare", st.git_dir(st.repos[parent]), path], check=True)
            subprocess.run(["git", "--git-dir", path, "remote", "remove", "origin"], check=False)
        st.repos[key_of(r)] = r
        return r

    def h_repo_create(self, p, q, b):
        st = self.state
        org = st.orgs.get(p["org"].lower())
        if org is None:
            raise HttpError(404)
        name = (b or {}).get("name") or ""
        low = name.lower()
        if (not REPO_NAME.match(name) or len(name) > 100 or name in (".", "..", "-")
                or any(low.endswith(s) for s in (".git", ".wiki", ".rss", ".atom"))):
            raise HttpError(422, f"[Name]: invalid repository name {name!r}")
        if (org["name"].lower(), low) in st.repos:
            raise HttpError(409, "The repository with the same name already exists.")
        r = self.new_repo(org["name"], name, default_branch=(b or {}).get("default_branch") or "main")
        r["description"] = (b or {}).get("description") or ""
        return 201, st.repo_json(r)

    def h_repo_get(self, p, q, b):
        return 200, self.state.repo_json(self.repo(p["owner"], p["repo"]))

    def h_repo_edit(self, p, q, b):
        r = self.repo(p["owner"], p["repo"])
        for k in ("has_issues", "has_wiki", "has_projects", "has_releases", "has_packages"):
            if k in (b or {}):
                r[k] = bool(b[k])
        if (b or {}).get("default_branch"):
            r["default_branch"] = b["default_branch"]
        if "description" in (b or {}):
            description = b["description"] or ""
            if len(description) > 2048:  # EditRepoOption.description: binding MaxSize(2048)
                raise HttpError(422, "[Description]: MaxSize")
            r["description"] = description
        return 200, self.state.repo_json(r)

    def h_repo_delete(self, p, q, b):
        st = self.state
        r = self.repo(p["owner"], p["repo"])
        del st.repos[key_of(r)]
        subprocess.run(["rm", "-rf", st.git_dir(r)], check=False)
        return 204, None

    def h_fork_list(self, p, q, b):
        st = self.state
        src = self.repo(p["owner"], p["repo"])
        return 200, [st.repo_json(r) for r in st.repos.values() if r["parent"] == key_of(src)]

    def h_fork_create(self, p, q, b):
        st = self.state
        src = self.repo(p["owner"], p["repo"])
        org_name = (b or {}).get("organization")
        if org_name:
            org = st.orgs.get(org_name.lower())
            if org is None:
                raise HttpError(422, f"organization {org_name} does not exist")
            owner = org["name"]
        else:
            owner = st.login
        name = (b or {}).get("name") or src["name"]
        if (owner.lower(), name.lower()) in st.repos:
            raise HttpError(409, "repository is already forked by user")
        r = self.new_repo(owner, name, parent=key_of(src), default_branch=src["default_branch"])
        return 202, st.repo_json(r)

    def pull_json(self, repo, pr):
        st = self.state
        rj = st.repo_json(repo)

        def info(ref, sha):
            return {"label": ref, "ref": ref, "sha": sha or "", "repo_id": repo["id"], "repo": rj}

        base = st.base_url
        full = f"{repo['owner']}/{repo['name']}"
        # An open pull request follows its branches; a merged one shows the head it merged.
        head_sha = pr.get("merged_head") or st.branch_sha(repo, pr["head"])
        base_sha = st.branch_sha(repo, pr["base"])
        d = {
            "id": pr["id"], "number": pr["number"], "url": f"{base}{API}/repos/{full}/pulls/{pr['number']}",
            "html_url": f"{base}/{full}/pulls/{pr['number']}", "diff_url": f"{base}/{full}/pulls/{pr['number']}.diff",
            "patch_url": f"{base}/{full}/pulls/{pr['number']}.patch", "title": pr["title"], "body": pr["body"],
            "state": pr["state"], "user": user_json(st.user["id"], st.user["login"], True), "labels": [], "assignees": [],
            "requested_reviewers": [], "requested_reviewers_teams": [], "comments": 0, "review_comments": 0,
            "additions": 0, "deletions": 0, "changed_files": 0, "is_locked": False, "draft": False,
            "mergeable": self.mergeable(repo, pr, base_sha, head_sha), "merged": pr.get("merged", False),
            "allow_maintainer_edit": False, "head": info(pr["head"], head_sha), "base": info(pr["base"], base_sha),
            "merge_base": pr.get("merge_base") or self.merge_base(repo, base_sha, head_sha) or "",
            "created_at": DATE, "updated_at": pr.get("closed_at") or DATE, "pin_order": 0,
        }
        if pr.get("closed_at"):
            d["closed_at"] = pr["closed_at"]
        if pr.get("merged"):
            d.update(merged_at=pr["closed_at"], merge_commit_sha=pr["merge_commit_sha"],
                     merged_by=user_json(st.user["id"], st.user["login"], True))
        return d

    def merge_base(self, repo, a, b):
        if not a or not b:
            return None
        code, out, _ = self.state.git_run(repo, "merge-base", a, b)
        return out if code == 0 else None

    def mergeable(self, repo, pr, base_sha, head_sha):
        """Gitea's `mergeable` (models/issues/pull.go `Mergeable`): the status its last check
        left, so true once merged, false while the check has not run, else whether the branches
        merge without conflict."""
        if pr.get("merged"):
            return True
        if pr["state"] != "open" or not base_sha or not head_sha or self.state.checking(pr):
            return False
        return self.merges_cleanly(repo, base_sha, head_sha)

    def merges_cleanly(self, repo, base_sha, head_sha):
        code, _, _ = self.state.git_run(repo, "merge-tree", "--write-tree", base_sha, head_sha)
        return code == 0

    def pull(self, repo, index):
        """The pull request `index` of `repo`; 404 when there is none (or `index` is no number)."""
        try:
            n = int(index)
        except ValueError:
            raise HttpError(404)
        for pr in self.state.pulls.get(key_of(repo), []):
            if pr["number"] == n:
                return pr
        raise HttpError(404)

    def h_pull_list(self, p, q, b):
        repo = self.repo(p["owner"], p["repo"])
        state = (q.get("state") or ["open"])[0]
        base_branch = (q.get("base_branch") or [None])[0]
        page, limit = page_and_limit(q)
        items = [pr for pr in self.state.pulls.get(key_of(repo), [])
                 if (state == "all" or pr["state"] == state) and (base_branch is None or pr["base"] == base_branch)]
        items = items[(page - 1) * limit: page * limit]
        return 200, [self.pull_json(repo, pr) for pr in items]

    def h_pull_create(self, p, q, b):
        st = self.state
        repo = self.repo(p["owner"], p["repo"])
        b = b or {}
        head, base = b.get("head") or "", b.get("base") or ""
        # Gitea reads the branches from its branch table, which its push queue fills after the
        # push: until then a just-pushed branch is "not found" (parseCompareInfo).
        for branch in (head, base):
            if not st.branch_sha(repo, branch) or not st.branch_known(repo, branch):
                raise HttpError(404, "not found")
        pulls = st.pulls.setdefault(key_of(repo), [])
        for pr in pulls:
            if pr["state"] == "open" and pr["head"] == head and pr["base"] == base:
                raise HttpError(409, f"pull request already exists for these targets [id: {pr['id']}]")
        pr = {"id": st.new_id(), "number": len(pulls) + 1, "title": b.get("title") or "", "body": b.get("body") or "",
              "state": "open", "head": head, "base": base}
        st.recheck(pr)
        pulls.append(pr)
        return 201, self.pull_json(repo, pr)

    def h_pull_get(self, p, q, b):
        repo = self.repo(p["owner"], p["repo"])
        return 200, self.pull_json(repo, self.pull(repo, p["index"]))

    def h_pull_edit(self, p, q, b):
        """`repoEditPullRequest` (201), the fields the tool uses: `title`, `body`, and `state`
        (`open`/`closed`; a merged pull request cannot change it: 409, as Gitea's
        "cannot change state of this pull request, it was already merged")."""
        repo = self.repo(p["owner"], p["repo"])
        pr = self.pull(repo, p["index"])
        b = b or {}
        state = b.get("state")
        if state is not None:
            if state not in ("open", "closed"):
                raise HttpError(422, "[State]: In")
            if pr.get("merged") and state != pr["state"]:
                raise HttpError(409, "cannot change state of this pull request, it was already merged")
        if b.get("title") is not None:
            if not b["title"].strip():
                raise HttpError(422, "[Title]: Required")
            pr["title"] = b["title"]
        if b.get("body") is not None:
            pr["body"] = b["body"]
        if state is not None and not pr.get("merged"):
            pr["state"] = state
            pr["closed_at"] = now() if state == "closed" else None
        return 201, self.pull_json(repo, pr)

    def h_compare(self, p, q, b):
        """`repoCompareDiff` (JSON only): `base...head` or `base..head`, each a branch or a commit;
        `total_commits` and `commits` are the head's commits the base lacks (since their merge
        base), newest first. An unknown repository or ref is 404."""
        st = self.state
        repo = self.repo(p["owner"], p["repo"])
        if (q.get("output") or [None])[0] is not None:
            raise HttpError(404, "the double serves JSON comparisons only")
        basehead = p["basehead"]
        sep = "..." if "..." in basehead else ".."
        if sep not in basehead:
            raise HttpError(404)
        base, head = basehead.split(sep, 1)

        def resolve(ref):
            sha = st.branch_sha(repo, ref) if ref else None
            if not sha and ref and re.fullmatch(r"[0-9a-f]{4,40}", ref):
                sha = st.git(repo, "rev-parse", "--verify", "-q", ref + "^{commit}")
            if not sha:
                raise HttpError(404)
            return sha

        base_sha, head_sha = resolve(base), resolve(head)
        out = st.git(repo, "rev-list", f"{base_sha}..{head_sha}") or ""
        full = f"{repo['owner']}/{repo['name']}"
        commits = [{"sha": c, "url": f"{st.base_url}{API}/repos/{full}/git/commits/{c}",
                    "html_url": f"{st.base_url}/{full}/commit/{c}", "created": DATE}
                   for c in out.split()]
        return 200, {"total_commits": len(commits), "commits": commits}

    def h_pull_is_merged(self, p, q, b):
        repo = self.repo(p["owner"], p["repo"])
        if self.pull(repo, p["index"]).get("merged"):
            return 204, None
        raise HttpError(404)

    def h_pull_merge(self, p, q, b):
        """`repoMergePullRequest`, in the order of Gitea's `MergePullRequest`: the form
        (`do` required), merged (405) or closed (404), not mergeable (405 "Please try again
        later": still being checked, or conflicting; `CheckPullMergeable`), then the merge
        itself, after whose refusal (409 head out of date, 500 diverged fast-forward) the pull
        request is checked again."""
        st = self.state
        repo = self.repo(p["owner"], p["repo"])
        pr = self.pull(repo, p["index"])
        b = b or {}
        do = b.get("do") or ""
        if do not in MERGE_STYLES:
            raise HttpError(422, f"[Do]: {'Required' if not do else 'In'}")
        if pr.get("merged"):
            raise HttpError(405, "The PR is already merged")
        if pr["state"] != "open":
            raise HttpError(404)
        if do != "manually-merged":
            base_sha, head_sha = st.branch_sha(repo, pr["base"]), st.branch_sha(repo, pr["head"])
            if st.checking(pr) or not base_sha or not head_sha or not self.merges_cleanly(repo, base_sha, head_sha):
                raise HttpError(405, TRY_AGAIN_LATER)
        try:
            return self.merge_now(repo, pr, do, b)
        except HttpError as e:
            if e.status in (409, 500):
                st.recheck(pr)
            raise

    def merge_now(self, repo, pr, do, b):
        """The merge itself (Gitea's `pull_service.Merge`) of a mergeable pull request."""
        st = self.state
        with st.git_lock(repo):
            before = st.heads(repo)
            base_sha, head_sha = st.branch_sha(repo, pr["base"]), st.branch_sha(repo, pr["head"])
            if not base_sha or not head_sha:
                raise HttpError(404)
            if b.get("head_commit_id") and b["head_commit_id"] != head_sha:
                raise HttpError(409, "head out of date")
            title = (b.get("merge_title_field") or "").strip() or (
                f"Merge pull request '{pr['title']}' (#{pr['number']}) from {pr['head']} into {pr['base']}")
            message = title
            if (b.get("merge_message_field") or "").strip():
                message += "\n\n" + b["merge_message_field"].strip()
            merged_base = self.merge_base(repo, base_sha, head_sha)
            new, merge_commit = self.merge_commits(repo, pr, do, base_sha, head_sha, message, b)
            if new != base_sha:
                code, _, err = st.git_run(repo, "update-ref", "refs/heads/" + pr["base"], new, base_sha)
                if code != 0:
                    raise HttpError(409, "merge push out of date")
            pr.update(state="closed", merged=True, merge_commit_sha=merge_commit, merged_head=head_sha,
                      merge_base=merged_base, closed_at=now())
            self.log_push(repo, "merge", before, st.heads(repo))
        # As Gitea: the head branch goes unless it is the default branch (CanDeleteBranch fails
        # then, and the merge still answers 200) or another open pull request uses it.
        if b.get("delete_branch_after_merge") and pr["head"] != repo["default_branch"]:
            if not any(o["state"] == "open" and o["head"] == pr["head"] for o in st.pulls.get(key_of(repo), [])):
                with st.git_lock(repo):
                    before = st.heads(repo)
                    st.git_run(repo, "update-ref", "-d", "refs/heads/" + pr["head"])
                    self.log_push(repo, "merge", before, st.heads(repo))
        return 200, None

    def merge_commits(self, repo, pr, do, base_sha, head_sha, message, b):
        """The new base commit and the pull request's `merge_commit_sha` for merge style `do`;
        raises Gitea's answers for conflicts (409) and diverging fast-forwards (500)."""
        st = self.state

        def tree_of_merge(ours, theirs):
            code, out, err = st.git_run(repo, "merge-tree", "--write-tree", "--messages", ours, theirs)
            if code == 1:
                raise HttpError(409, conflict={"Style": do, "StdOut": out, "StdErr": err, "Err": {}})
            if code != 0:  # unrelated histories and the like
                raise HttpError(409, conflict={"Style": do, "StdOut": "", "StdErr": err, "Err": {}})
            return out.splitlines()[0]

        def commit(tree, *parents):
            args = ["commit-tree", tree, "-m", message]
            for parent in parents:
                args += ["-p", parent]
            code, out, err = st.git_run(repo, *args, identity=True)
            if code != 0:
                raise RuntimeError(f"commit-tree failed: {err}")
            return out

        def is_ancestor(a, b):
            return st.git_run(repo, "merge-base", "--is-ancestor", a, b)[0] == 0

        def rebased():
            if is_ancestor(base_sha, head_sha):
                return head_sha
            # Under the repository's lock the branches are at base_sha and head_sha. As Gitea does
            # (services/pull/merge_rebase.go: `git rebase` in a temporary checkout), rebase a
            # detached checkout of the head onto the base in a throw-away worktree of the bare
            # repository; commits that become empty are dropped as `git rebase` drops them. Works
            # with git 2.39 (Debian 12), which has no `git replay`.
            # Under --root/.work: no owner's name starts with a dot.
            scratch = os.path.join(st.root, ".work")
            os.makedirs(scratch, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="rebase-", dir=scratch) as tmp:
                work = os.path.join(tmp, "w")
                code, out, err = st.git_run(repo, "worktree", "add", "-q", "--detach", work, head_sha)
                if code != 0:
                    raise RuntimeError(f"worktree add failed: {err}")
                try:
                    code, out, err = st.git_run(repo, "-C", work, "rebase", "-q", base_sha,
                                                identity=True, in_worktree=True)
                    if code != 0:
                        st.git_run(repo, "-C", work, "rebase", "--abort", in_worktree=True)
                        raise HttpError(409, conflict={"Style": do, "StdOut": out, "StdErr": err, "Err": {}})
                    top = st.git_run(repo, "-C", work, "rev-parse", "HEAD", in_worktree=True)[1]
                finally:
                    st.git_run(repo, "worktree", "remove", "--force", work)
                    st.git_run(repo, "worktree", "prune")
            # The head branch itself is left where it is.
            return top

        if do == "merge":
            new = commit(tree_of_merge(base_sha, head_sha), base_sha, head_sha)
            return new, new
        if do == "squash":
            new = commit(tree_of_merge(base_sha, head_sha), base_sha)
            return new, new
        if do == "fast-forward-only":
            if not is_ancestor(base_sha, head_sha):
                # Gitea 1.27.3 answers this with APIErrorInternal (500) and the error's text
                # (services/pull/merge.go ErrMergeDivergingFastForwardOnly; shown to admins).
                raise HttpError(500, "Merge DivergingFastForwardOnly Error: exit status 128: "
                                     "fatal: Not possible to fast-forward, aborting.\n\n")
            return head_sha, head_sha
        if do == "rebase":
            new = rebased()
            return new, new
        if do == "rebase-merge":
            top = rebased()
            new = commit(st.git(repo, "rev-parse", top + "^{tree}"), base_sha, top)
            return new, new
        # manually-merged: the commit must be on the base branch and contain the head.
        commit_id = b.get("merge_commit_id") or ""
        if not commit_id or not is_ancestor(commit_id, base_sha) or not is_ancestor(head_sha, commit_id):
            raise HttpError(409, conflict={"message": "Wrong commit ID", "url": ""})
        return base_sha, commit_id

    def var_scope(self, p):
        st = self.state
        if "org" in p:
            o = st.orgs.get(p["org"].lower())
            if o is None:
                raise HttpError(404)
            return ("org", p["org"].lower()), o["id"], 0
        r = self.repo(p["owner"], p["repo"])
        return ("repo",) + key_of(r), 0, r["id"]

    @staticmethod
    def check_var_name(name):
        if not VAR_NAME.match(name) or re.match(r"(?i)^GIT(EA|HUB)_", name):
            raise HttpError(400, f"invalid variable or secret name: {name!r}")

    def h_var_list(self, p, q, b):
        scope, oid, rid = self.var_scope(p)
        page, limit = page_and_limit(q)
        vs = sorted(self.state.vars.get(scope, {}).items())[(page - 1) * limit: page * limit]
        return 200, [{"owner_id": oid, "repo_id": rid, "name": k, "data": v["data"], "description": v["description"]}
                     for k, v in vs]

    def h_var_get(self, p, q, b):
        scope, oid, rid = self.var_scope(p)
        name = p["variablename"].upper()
        v = self.state.vars.get(scope, {}).get(name)
        if v is None:
            raise HttpError(404)
        return 200, {"owner_id": oid, "repo_id": rid, "name": name, "data": v["data"], "description": v["description"]}

    def h_var_create(self, p, q, b):
        scope, _, _ = self.var_scope(p)
        name = p["variablename"]
        self.check_var_name(name)
        if not (b or {}).get("value"):
            raise HttpError(400, "value is required")
        vs = self.state.vars.setdefault(scope, {})
        if name.upper() in vs:
            raise HttpError(409, "variable name already exists")
        vs[name.upper()] = {"data": b["value"], "description": b.get("description", "")}
        return 201, None

    def h_var_update(self, p, q, b):
        scope, _, _ = self.var_scope(p)
        name = p["variablename"].upper()
        vs = self.state.vars.setdefault(scope, {})
        if name not in vs:
            raise HttpError(404)
        if not (b or {}).get("value"):
            raise HttpError(400, "value is required")
        new = (b.get("name") or name)
        self.check_var_name(new)
        v = vs.pop(name)
        vs[new.upper()] = {"data": b["value"], "description": b.get("description", v["description"])}
        return 204, None

    def h_var_delete(self, p, q, b):
        scope, _, _ = self.var_scope(p)
        vs = self.state.vars.setdefault(scope, {})
        if vs.pop(p["variablename"].upper(), None) is None:
            raise HttpError(404)
        return 204, None

    def h_secret_list(self, p, q, b):
        scope, _, _ = self.var_scope(p)
        page, limit = page_and_limit(q)
        ss = sorted(self.state.secrets.get(scope, {}).items())[(page - 1) * limit: page * limit]
        return 200, [{"name": k, "description": v["description"], "created_at": v["created_at"]} for k, v in ss]

    def h_secret_put(self, p, q, b):
        """updateOrgSecret / updateRepoSecret: 201 created, 204 updated (Gitea upper-cases the name
        and refuses an empty `data` with 400)."""
        scope, _, _ = self.var_scope(p)
        name = p["secretname"]
        self.check_var_name(name)
        if not (b or {}).get("data"):
            raise HttpError(400, "data is required")
        st = self.state
        ss = st.secrets.setdefault(scope, {})
        old = ss.get(name.upper())
        ss[name.upper()] = {"data": b["data"], "description": b.get("description") or "",
                            "created_at": old["created_at"] if old else now()}
        self.save_secrets()
        return (204 if old else 201), None

    def save_secrets(self):
        st = self.state
        out = {"/".join(k): v for k, v in st.secrets.items()}
        tmp = os.path.join(st.root, "secrets.json.tmp")
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(st.root, "secrets.json"))

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_PATCH(self):
        self.handle_any("PATCH")

    def do_DELETE(self):
        self.handle_any("DELETE")


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr, state, log_path, faults_path):
        super().__init__(addr, Handler)
        self.state = state
        self.log_path = log_path
        self.log_lock = threading.Lock()
        self.faults_path = faults_path
        self.faults = []
        self.faults_mtime = None
        state.base_url = f"http://127.0.0.1:{self.server_address[1]}"

    def load_faults(self):
        if not self.faults_path or not os.path.exists(self.faults_path):
            return self.faults
        m = os.stat(self.faults_path).st_mtime_ns
        if m != self.faults_mtime:
            self.faults_mtime = m
            with open(self.faults_path) as f:
                self.faults = json.load(f)
        return self.faults


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log")
    ap.add_argument("--faults")
    ap.add_argument("--background-delay", type=float, default=0.3,
                    help="seconds Gitea's background work takes (branch recording, mergeable check)")
    ap.add_argument("--list-routes", action="store_true")
    a = ap.parse_args()
    if a.list_routes:
        print(json.dumps([[m, t] for m, t, _ in ROUTES]))
        return
    os.makedirs(a.root, exist_ok=True)
    state = State(os.path.abspath(a.root), os.environ.get("GITEA_DOUBLE_LOGIN", "admin"),
                  os.environ.get("GITEA_DOUBLE_PASSWORD"), os.environ.get("GITEA_DOUBLE_TOKEN"),
                  a.background_delay)
    srv = Server(("127.0.0.1", a.port), state, a.log, a.faults)
    print(f"PORT {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
