#!/usr/bin/env python3
"""Checks the Gitea test double and the traffic it saw against Gitea's Swagger spec.

    check_spec.py SPEC routes            every route+method the double serves is in the spec
    check_spec.py SPEC log FILE...       every logged API exchange: route and method in the spec,
                                         request body valid for the operation's body schema
                                         (and no unknown top-level fields), status documented,
                                         response body valid for that status' schema

Exit 0 when all is well, 1 with one line per violation otherwise. Needs `jsonschema`.
"""

import copy
import json
import os
import sys

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import server  # noqa: E402

# Answers real Gitea gives that its spec does not list for the operation.
EXTRA_STATUS = {
    # Gitea answers 409 when the repository exists and 422 for a bad name (binding errors).
    ("POST", "/orgs/{org}/repos"): {409, 422},
    # A binding error of the form (a missing or unknown `do`), and 500 for a fast-forward-only
    # merge of a diverged base (Gitea 1.27.3 does not map ErrMergeDivergingFastForwardOnly).
    ("POST", "/repos/{owner}/{repo}/pulls/{index}/merge"): {422, 500},
}
# Gitea answers a merge conflict with the conflict error's own fields (ErrMergeConflicts,
# ErrRebaseConflicts, ErrMergeUnrelatedHistories serialized by ctx.JSON), not an APIError.
MERGE_CONFLICT = {
    "type": "object",
    "required": ["Style", "StdOut", "StdErr", "Err"],
    "properties": {"Style": {"type": "string"}, "StdOut": {"type": "string"}, "StdErr": {"type": "string"},
                   "Err": {"type": "object"}},
    "additionalProperties": False,
}
CONFLICT_BODIES = {("POST", "/repos/{owner}/{repo}/pulls/{index}/merge", 409): MERGE_CONFLICT}
# Every authenticated route answers 401 for missing or wrong credentials.
ANY_STATUS = {401}
# Gitea's context middleware (repoAssignment, orgAssignment) answers 404 for a repository or an
# organization that does not exist, before the operation runs, whatever the operation lists.
CONTEXT_PREFIXES = ("/repos/{owner}/{repo}", "/orgs/{org}")
# The APIError body (`#/responses/error` etc. only declare headers; Gitea sends this JSON).
API_ERROR = {
    "type": "object",
    "required": ["message"],
    "properties": {"message": {"type": "string"}, "url": {"type": "string"},
                   "errors": {"type": "array", "items": {"type": "string"}}},
}


def with_definitions(schema, spec):
    s = copy.deepcopy(schema)
    s["definitions"] = spec["definitions"]
    return s


def response_schema(spec, op, status):
    r = op["responses"].get(str(status))
    if r is None:
        return None, False
    if "$ref" in r:
        r = spec["responses"][r["$ref"].split("/")[-1]]
    return r.get("schema"), True


def validate(schema, spec, value):
    v = jsonschema.Draft4Validator(with_definitions(schema, spec))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in v.iter_errors(value)]


def check_routes(spec):
    bad = []
    for method, template, _ in server.ROUTES:
        ops = spec["paths"].get(template)
        if ops is None or method.lower() not in ops:
            bad.append(f"double serves {method} {template}, which the spec does not define")
    return bad


def check_log(spec, path):
    bad = []
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    for n, e in enumerate(lines, 1):
        if e.get("kind") != "api":
            continue
        where = f"{os.path.basename(path)}:{n} {e['method']} {e['path']}"
        if e.get("fault"):
            continue
        t = e.get("template")
        if t is None:
            bad.append(f"{where}: request for a route the double does not serve")
            continue
        op = spec["paths"].get(t, {}).get(e["method"].lower())
        if op is None:
            bad.append(f"{where}: {e['method']} {t} is not in the spec")
            continue
        # Request body against the body parameter's schema, strict on top-level fields.
        body_params = [p for p in op.get("parameters", []) if p.get("in") == "body"]
        req = e.get("request")
        if req is not None:
            if not body_params:
                bad.append(f"{where}: sent a body, the operation takes none")
            else:
                schema = body_params[0]["schema"]
                for msg in validate(schema, spec, req):
                    bad.append(f"{where}: request {msg}")
                ref = schema.get("$ref")
                if ref and isinstance(req, dict):
                    props = spec["definitions"][ref.split("/")[-1]].get("properties", {})
                    for k in req:
                        if k not in props:
                            bad.append(f"{where}: request field {k!r} is not in {ref}")
        # Query parameters must be documented.
        documented = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
        for k in e.get("query") or {}:
            if k not in documented:
                bad.append(f"{where}: query parameter {k!r} is not documented")
        status = e["status"]
        schema, listed = response_schema(spec, op, status)
        context_404 = status == 404 and t.startswith(CONTEXT_PREFIXES)
        if (not listed and not context_404 and status not in ANY_STATUS
                and status not in EXTRA_STATUS.get((e["method"], t), set())):
            bad.append(f"{where}: status {status} is not documented for {op['operationId']}")
        body = e.get("response")
        if schema is not None:
            for msg in validate(schema, spec, body):
                bad.append(f"{where}: response {msg}")
        elif status >= 400:
            conflict = CONFLICT_BODIES.get((e["method"], t, status))
            if conflict is not None and isinstance(body, dict) and "Style" in body:
                errors = validate(conflict, spec, body)
            else:
                errors = validate(API_ERROR, spec, body)
            for msg in errors:
                bad.append(f"{where}: error body {msg}")
        elif body is not None:
            bad.append(f"{where}: status {status} has no schema but a body was returned")
    return bad, len(lines)


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    with open(argv[1]) as f:
        spec = json.load(f)
    if argv[2] == "routes":
        bad = check_routes(spec)
        print(f"{len(server.ROUTES)} routes checked")
    else:
        bad, total = [], 0
        for p in argv[3:]:
            b, n = check_log(spec, p)
            bad += b
            total += n
        print(f"{total} exchanges checked")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
