#!/usr/bin/env python3
"""What deploy/container/k8s.sh needs from the rendered deploy/k8s base to play the gateway
with `podman kube play`, and to do the kubelet's part around it.

    kube_play.py yaml BASE_YAML COMPOSE_FILE SECRETS_DIR > kube.yaml
        the gateway's Deployment, the ConfigMap and the Secret as the base has them, but
        for what a cluster would supply: the compose stack's Redis seed nodes, one replica
        (podman plays a Deployment as one pod), the image built by the test, host ports
        10000 above the container ports on loopback (podman 4.3 publishes every
        containerPort, and haproxy holds 8080), and each `secret` volume as a hostPath
        folder holding the Secret's items, owned by the pod's fsGroup with the volume's
        defaultMode (podman 4.3 panics on secret volumes: kube.VolumeFromSecret is handed
        no secrets manager), which is what the kubelet would mount there
    kube_play.py probes KUBE_YAML
        one line per probe of the Deployment's container: kind, port number, path (`-` for tcp)
    kube_play.py token-secret KUBE_YAML
        the Secret's token secret, to sign a test token with
"""
import base64
import os
import sys

import yaml


def play_yaml(base_yaml, compose_file, out):
    docs = [d for d in yaml.safe_load_all(open(base_yaml)) if d]
    compose = yaml.safe_load(open(compose_file))
    redis = compose["x-flashgate-env"]["FLASHGATE_REDIS"]
    secrets = {}
    for d in docs:
        if d["kind"] == "Secret":
            data = {k: base64.b64decode(v) for k, v in d.get("data", {}).items()}
            data.update({k: v.encode() for k, v in d.get("stringData", {}).items()})
            secrets[d["metadata"]["name"]] = data
    keep = []
    for d in docs:
        if d["kind"] == "ConfigMap":
            d["data"]["FLASHGATE_REDIS"] = redis
            keep.append(d)
        elif d["kind"] == "Secret":
            keep.append(d)
        elif d["kind"] == "Deployment" and d["metadata"]["name"] == "flashgate-gateway":
            d["spec"]["replicas"] = 1
            pod = d["spec"]["template"]["spec"]
            pod["containers"][0]["image"] = "localhost/flashgate:local"
            # podman 4.3 publishes every containerPort on the host (the same port when no
            # hostPort is given), where haproxy already holds 8080: loopback, 10000 above.
            for port in pod["containers"][0].get("ports", []):
                port["hostPort"] = port["containerPort"] + 10000
                port["hostIP"] = "127.0.0.1"
            group = pod.get("securityContext", {}).get("fsGroup")
            for v in pod.get("volumes", []):
                src = v.pop("secret", None)
                if src is None:
                    continue
                folder = os.path.join(out, v["name"])
                os.makedirs(folder, mode=0o755)
                data = secrets[src["secretName"]]
                items = src.get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    path = os.path.join(folder, item["path"])
                    with open(path, "wb") as f:
                        f.write(data[item["key"]])
                    if group is not None:
                        os.chown(path, 0, group)
                    os.chmod(path, item.get("mode", src.get("defaultMode", 0o644)))
                v["hostPath"] = {"path": folder, "type": "Directory"}
            keep.append(d)
    yaml.safe_dump_all(keep, sys.stdout, sort_keys=False)


def probes(kube_yaml):
    for d in yaml.safe_load_all(open(kube_yaml)):
        if d and d["kind"] == "Deployment":
            c = d["spec"]["template"]["spec"]["containers"][0]
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                p = c.get(kind) or {}
                if "httpGet" in p:
                    port = p["httpGet"]["port"]
                    print(kind, ports.get(port, port), p["httpGet"]["path"])
                elif "tcpSocket" in p:
                    port = p["tcpSocket"]["port"]
                    print(kind, ports.get(port, port), "-")


def token_secret(kube_yaml):
    for d in yaml.safe_load_all(open(kube_yaml)):
        if d and d["kind"] == "Secret":
            print(d["stringData"]["token-secret"])


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"yaml": play_yaml, "probes": probes, "token-secret": token_secret}[cmd](*args)
