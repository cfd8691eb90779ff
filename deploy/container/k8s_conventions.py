#!/usr/bin/env python3
"""Hold rendered deploy/k8s manifests to the conventions a rolling restart relies on.

kubernetes-validate --strict checks the schema; this checks what a schema cannot:
  - every Deployment's containers have distinct readiness and liveness probes, requests
    and limits, run as non-root with a read-only root filesystem and no privilege
    escalation, and the pod prefers other nodes than its siblings' (anti-affinity);
  - the gateway's preStop sleep outlasts the balancer's health-check period (haproxy's
    `inter` x `fall` in deploy/haproxy/haproxy.cfg), and the grace period outlasts
    the sleep plus the drain delay plus the shutdown grace (deploy/k8s/base/configmap.yaml);
  - every probe's named port is a port the container declares;
  - a PodDisruptionBudget and (for the gateway) a CPU HorizontalPodAutoscaler select it,
    a Service selects it, and the ServiceMonitors (no schema offline) name a Service port.

    k8s_conventions.py rendered.yaml deploy/haproxy/haproxy.cfg
"""
import re
import sys

import yaml

errors = []


def need(ok, msg):
    if not ok:
        errors.append(msg)


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def probe_key(p):
    if not p:
        return None
    for kind in ("httpGet", "tcpSocket", "exec", "grpc"):
        if kind in p:
            return (kind, yaml.safe_dump(p[kind], sort_keys=True))
    return None


def ms(value):
    return int(value) / 1000


docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cfg = open(sys.argv[2]).read()
m = re.search(r"default-server check inter (\d+)s fall (\d+)", cfg)
need(m, "haproxy.cfg: no `default-server check inter <n>s fall <n>` line")
lb_period = int(m.group(1)) * int(m.group(2)) if m else 0
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)
config = {}
for cm in by_kind.get("ConfigMap", []):
    config.update(cm.get("data", {}))

for dep in by_kind.get("Deployment", []):
    name = dep["metadata"]["name"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    sc = spec.get("securityContext", {})
    need(sc.get("runAsNonRoot") is True, f"{name}: runAsNonRoot is not true")
    anti = spec.get("affinity", {}).get("podAntiAffinity", {})
    terms = anti.get("preferredDuringSchedulingIgnoredDuringExecution", []) + [
        {"podAffinityTerm": t} for t in anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])]
    need(any(selects(t["podAffinityTerm"]["labelSelector"]["matchLabels"], labels) for t in terms),
         f"{name}: no pod anti-affinity against its own pods")
    for c in spec["containers"]:
        where = f"{name}/{c['name']}"
        ports = {p.get("name") for p in c.get("ports", [])} | {p["containerPort"] for p in c.get("ports", [])}
        ready, live = c.get("readinessProbe"), c.get("livenessProbe")
        need(ready and live, f"{where}: readiness and liveness probes are both required")
        need(probe_key(ready) != probe_key(live), f"{where}: readiness and liveness probes are the same check")
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            p = c.get(kind) or {}
            port = (p.get("httpGet") or p.get("tcpSocket") or {}).get("port")
            need(port is None or port in ports, f"{where}: {kind} port {port} is not a declared port")
        res = c.get("resources", {})
        for part in ("requests", "limits"):
            need({"cpu", "memory"} <= set(res.get(part, {})), f"{where}: resources.{part} needs cpu and memory")
        csc = c.get("securityContext", {})
        need(csc.get("readOnlyRootFilesystem") is True, f"{where}: root filesystem is not read-only")
        need(csc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation is not false")
        if labels.get("app.kubernetes.io/component") == "gateway":
            stop = c.get("lifecycle", {}).get("preStop", {})
            cmd = stop.get("exec", {}).get("command", [])
            sleep = int(cmd[1]) if len(cmd) == 2 and cmd[0] == "sleep" else stop.get("sleep", {}).get("seconds")
            need(sleep is not None, f"{where}: no preStop sleep")
            sleep = sleep or 0
            need(sleep > lb_period, f"{where}: preStop sleep {sleep}s is not longer than the balancer's "
                 f"health-check period ({lb_period}s)")
            drain = ms(config.get("FLASHGATE_DRAIN_DELAY_MS", 4000))
            grace = ms(config.get("FLASHGATE_SHUTDOWN_GRACE_MS", 10000))
            tgp = spec.get("terminationGracePeriodSeconds", 30)
            need(tgp > sleep + drain + grace, f"{where}: terminationGracePeriodSeconds {tgp} is not above "
                 f"preStop {sleep} + drain {drain} + grace {grace}")
            need(any(h["spec"]["scaleTargetRef"]["name"] == name
                     and any(m.get("resource", {}).get("name") == "cpu" for m in h["spec"].get("metrics", []))
                     for h in by_kind.get("HorizontalPodAutoscaler", [])),
                 f"{name}: no HorizontalPodAutoscaler on CPU")
    need(any(selects(p["spec"]["selector"]["matchLabels"], labels) for p in by_kind.get("PodDisruptionBudget", [])),
         f"{name}: no PodDisruptionBudget selects it")
    need(any(selects(s["spec"]["selector"], labels) for s in by_kind.get("Service", [])),
         f"{name}: no Service selects it")
    need(any(selects(n["spec"]["podSelector"].get("matchLabels"), labels) for n in by_kind.get("NetworkPolicy", [])),
         f"{name}: no NetworkPolicy selects it")

for smon in by_kind.get("ServiceMonitor", []):
    name = smon["metadata"]["name"]
    svcs = [s for s in by_kind.get("Service", [])
            if selects(smon["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))]
    need(svcs, f"ServiceMonitor {name}: selects no Service")
    for ep in smon["spec"]["endpoints"]:
        need(any(ep["port"] in {p.get("name") for p in s["spec"]["ports"]} for s in svcs),
             f"ServiceMonitor {name}: port {ep['port']} is no port of the Services it selects")

if errors:
    print("\n".join(f"k8s conventions: {e}" for e in errors))
    sys.exit(1)
print(f"k8s conventions: {len(by_kind.get('Deployment', []))} Deployments hold")
