"""An in-cluster Kubernetes client in Python, unmodified: it knows nothing of Verge.

It takes the in-cluster configuration (`KUBERNETES_SERVICE_HOST`/`PORT`, the service
account's token and `ca.crt` in the pod's projected volume) with the official client's
`config.load_incluster_config()`. On a Verge edge node that reaches the node's edge API,
online and offline.

    client.py read [--custom GROUP/VERSION/PLURAL/NAME]
        Lists the namespace's pods and configmaps (one line each: `pod NAME`,
        `configmap NAME`) and reads a custom resource (`custom NAME {spec as JSON}`).

    client.py watch-configmap NAME
        Lists ConfigMap NAME once, then watches it for ever the way client-go's reflector
        does: each watch resumes from the last resourceVersion seen (an event's or a
        bookmark's); a watch that ends or breaks (the link to the API server dropped) is
        opened again from there; only a `410 Gone` (the version is too old) lists again.
        Prints `list N rv=V` for each list and `event TYPE NAME {data as JSON}` for each
        event, so a reader can count the lists.

Exit codes: 0 done, 1 a request failed, 2 a bad argument.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# Seconds a watch asks the server to keep it open, and the pause before opening it again
# after it broke.
WATCH_SECONDS = 60
RETRY_PAUSE = 1.0


def namespace() -> str:
    with open(NAMESPACE_FILE, encoding="utf-8") as f:
        return f.read().strip()


def read(core: client.CoreV1Api, ns: str, custom: str | None) -> None:
    for pod in core.list_namespaced_pod(ns).items:
        print(f"pod {pod.metadata.name}")
    for cm in core.list_namespaced_config_map(ns).items:
        print(f"configmap {cm.metadata.name}")
    if custom:
        try:
            group, version, plural, name = custom.split("/")
        except ValueError:
            print(f"--custom {custom!r}: expected GROUP/VERSION/PLURAL/NAME", file=sys.stderr)
            sys.exit(2)
        obj = client.CustomObjectsApi().get_namespaced_custom_object(
            group, version, ns, plural, name
        )
        print(f"custom {name} {json.dumps(obj.get('spec', {}), sort_keys=True)}")


def watch_configmap(core: client.CoreV1Api, ns: str, name: str) -> None:
    selector = f"metadata.name={name}"
    lists = 0
    rv = None
    while True:
        if rv is None:
            try:
                listed = core.list_namespaced_config_map(ns, field_selector=selector)
            except Exception as e:  # noqa: BLE001 - the link may be down; keep trying
                print(f"list failed: {e}", file=sys.stderr, flush=True)
                time.sleep(RETRY_PAUSE)
                continue
            lists += 1
            rv = listed.metadata.resource_version
            print(f"list {lists} rv={rv}", flush=True)
            for cm in listed.items:
                print(f"event LISTED {cm.metadata.name} {json.dumps(cm.data or {}, sort_keys=True)}",
                      flush=True)
        w = watch.Watch()
        try:
            for event in w.stream(
                core.list_namespaced_config_map,
                ns,
                field_selector=selector,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
            ):
                kind = event["type"]
                raw = event.get("raw_object") or {}
                rv = raw.get("metadata", {}).get("resourceVersion") or rv
                if kind == "BOOKMARK":
                    continue
                if kind == "ERROR":
                    raise ApiException(status=raw.get("code"), reason=raw.get("message"))
                print(f"event {kind} {raw['metadata']['name']} "
                      f"{json.dumps(raw.get('data') or {}, sort_keys=True)}", flush=True)
        except ApiException as e:
            if e.status == 410:
                print("watch: 410 Gone, listing again", flush=True)
                rv = None
                continue
            print(f"watch failed: {e.status} {e.reason}", file=sys.stderr, flush=True)
            time.sleep(RETRY_PAUSE)
        except Exception as e:  # noqa: BLE001 - a broken connection: resume from rv
            print(f"watch broke: {e}", file=sys.stderr, flush=True)
            time.sleep(RETRY_PAUSE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("read")
    r.add_argument("--custom", help="GROUP/VERSION/PLURAL/NAME of a custom resource to read")
    w = sub.add_parser("watch-configmap")
    w.add_argument("name")
    args = parser.parse_args()

    config.load_incluster_config()
    core = client.CoreV1Api()
    ns = namespace()
    try:
        if args.command == "read":
            read(core, ns, args.custom)
        else:
            watch_configmap(core, ns, args.name)
    except ApiException as e:
        print(f"{e.status} {e.reason}: {e.body}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
