#!/usr/bin/env python3
"""Record corpus cases against a real kube-apiserver.

    record.py KUBECONFIG SPEC.json [SPEC.json ...] --out DIR

A spec is a case without answers: {"case", "why", "notes"?, "steps": [{"as"?, "groups"?, "method", "path",
"content_type"?, "body"?, "setup"?, "cleanup"?, "compare"?, "note"?, "poll"?}]}. Each step is sent as the
kubeconfig's admin (a client certificate), or as another user through `Impersonate-User`/`Impersonate-Group`,
with `Accept: application/json` and the recorder's `User-Agent`. The answer is normalised as the corpus README
says and written into DIR/<case>.json, the format `apiserver/tests/it/corpus.rs` replays. Only the standard
library is used. `poll` ({"until_status": [N], "until_contains"?: {pointer: [subset]}, "timeout": S}) repeats a
step until its condition holds.
"""
import argparse
import base64
import http.client
import json
import os
import re
import ssl
import sys
import tempfile
import time
import urllib.parse

USER_AGENT = "apiserver-corpus/1.0 (record.py)"
TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TOO_OLD = re.compile(r"too old resource version: (\d+) \((\d+)\)")
PRECONDITION_RV = re.compile(r"(ResourceVersion in (?:the precondition|record)) \(\d+\)")


def load_kubeconfig(path):
    """The server URL and the files of the current context's CA and client certificate (a YAML subset: the
    realk8s kubeconfigs, one cluster and one user, data inline)."""
    values = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        for key in ("server", "certificate-authority-data", "client-certificate-data", "client-key-data"):
            if line.startswith(key + ":"):
                values[key] = line.split(":", 1)[1].strip()
    tmp = tempfile.mkdtemp(prefix="corpus-record-")
    files = {}
    for key in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
        files[key] = os.path.join(tmp, key)
        with open(files[key], "wb") as f:
            f.write(base64.b64decode(values[key]))
    return values["server"], files


def normalise_string(s):
    s = TIME.sub("<time>", s)
    s = UID.sub("<uid>", s)
    s = TOO_OLD.sub(r"too old resource version: \1 (<rv>)", s)
    return PRECONDITION_RV.sub(r"\1 (<rv>)", s)


def normalise(v, key=None, in_managed=False):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k == "uid":
                out[k] = "<uid>"
            elif k == "resourceVersion":
                out[k] = "<rv>"
            elif k == "continue":
                out[k] = "<continue>"
            elif k in ("creationTimestamp", "deletionTimestamp") or (in_managed and k == "time"):
                out[k] = "<time>"
            else:
                out[k] = normalise(x, k, in_managed or k == "managedFields")
        return out
    if isinstance(v, list):
        return [normalise(x, key, in_managed) for x in v]
    if isinstance(v, str):
        return normalise_string(v)
    return v


def send(server, files, step):
    url = urllib.parse.urlparse(server)
    ctx = ssl.create_default_context(cafile=files["certificate-authority-data"])
    ctx.load_cert_chain(files["client-certificate-data"], files["client-key-data"])
    conn = http.client.HTTPSConnection(url.hostname, url.port or 443, context=ctx, timeout=60)
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if step.get("content_type"):
        headers["Content-Type"] = step["content_type"]
    user = step.get("as", "admin")
    body = step.get("body", "")
    conn.putrequest(step["method"], step["path"], skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    if user != "admin":
        conn.putheader("Impersonate-User", user)
        for g in step.get("groups", []):
            conn.putheader("Impersonate-Group", g)
    data = body.encode() if body else b""
    conn.putheader("Content-Length", str(len(data)))
    conn.endheaders(data)
    resp = conn.getresponse()
    raw = resp.read()
    warnings = resp.headers.get_all("Warning") or []
    content_type = resp.headers.get("Content-Type", "")
    conn.close()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.decode("utf-8", "replace")
    return resp.status, parsed, warnings, content_type


def contains(have, want):
    """Whether `have` holds every key of `want` with the same value (nested objects alike)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and contains(have[k], v) for k, v in want.items())
    return have == want


def pointer(v, ptr):
    for part in [p for p in ptr.split("/")[1:]]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(v, dict):
            v = v.get(part)
        elif isinstance(v, list) and part.isdigit() and int(part) < len(v):
            v = v[int(part)]
        else:
            return None
    return v


def poll_done(poll, status, body):
    """A `poll` step's condition, as the replay (apiserver/tests/it/corpus.rs) checks it: `until_status` (a code
    or a list of codes) and `until_contains` ({pointer: [subset objects]}, each found in the array there)."""
    want = poll.get("until_status")
    if want is not None and status not in (want if isinstance(want, list) else [want]):
        return False
    for ptr, subsets in poll.get("until_contains", {}).items():
        items = pointer(normalise(body), ptr) or []
        if not all(any(contains(it, sub) for it in items) for sub in subsets):
            return False
    return True


def record(server, files, spec, version):
    steps = []
    for i, step in enumerate(spec["steps"]):
        deadline = time.monotonic() + step.get("poll", {}).get("timeout", 0)
        started = time.monotonic()
        while True:
            status, body, warnings, content_type = send(server, files, step)
            if poll_done(step.get("poll", {}), status, body) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        out = {k: v for k, v in step.items() if k not in ("poll",)}
        out.setdefault("as", "admin")
        out.setdefault("groups", [])
        out["status"] = status
        if step.get("poll"):
            out["poll"] = dict(step["poll"], observed_after_s=round(time.monotonic() - started, 2))
        out["response"] = normalise(body)
        if warnings:
            out["warnings"] = [normalise_string(w) for w in warnings]
        out["response_content_type"] = content_type
        out.setdefault("compare", [])
        steps.append(out)
        print(f"  step {i}: {step['method']} {step['path']} -> {status}", file=sys.stderr)
    case = {"case": spec["case"], "why": spec["why"], "server": version}
    if spec.get("notes"):
        case["notes"] = spec["notes"]
    case["steps"] = steps
    return case


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kubeconfig")
    p.add_argument("specs", nargs="+")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    server, files = load_kubeconfig(a.kubeconfig)
    _, version, _, _ = send(server, files, {"method": "GET", "path": "/version"})
    version = version["gitVersion"]
    for path in a.specs:
        spec = json.load(open(path, encoding="utf-8"))
        print(f"{spec['case']} on {version}", file=sys.stderr)
        case = record(server, files, spec, version)
        with open(os.path.join(a.out, spec["case"] + ".json"), "w", encoding="utf-8") as f:
            json.dump(case, f, indent=1, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
