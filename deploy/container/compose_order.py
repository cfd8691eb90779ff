#!/usr/bin/env python3
"""The compose file's services in the order `docker compose up` starts them: one line per
service, `<wave> <service> <what its dependents wait for>` (`healthy`, `completed`:
exited 0, or `started`), each wave depending only on earlier ones.

podman-compose on Debian's podman (4.3) ignores `condition: service_healthy` (it needs
podman 4.6's `podman wait --condition=healthy`), so deploy/container/test.sh starts the
services one at a time in this order and waits as the file says; the order and the
conditions come from the file, not from the test.

    compose_order.py docker-compose.yml [SKIPPED_SERVICE...]
"""
import sys

import yaml

compose = yaml.safe_load(open(sys.argv[1]))
skip = set(sys.argv[2:])
services = {n: s for n, s in compose["services"].items() if n not in skip and not s.get("profiles")}


def deps(svc):
    d = svc.get("depends_on", {})
    return {k: "service_started" for k in d} if isinstance(d, list) else {k: v.get("condition", "service_started") for k, v in d.items()}


wait = {n: "started" for n in services}
rank = {"started": 0, "completed": 1, "healthy": 1}
for name, svc in services.items():
    for dep, cond in deps(svc).items():
        if dep not in services:
            sys.exit(f"compose_order: {name} depends on {dep}, which is skipped or missing")
        w = {"service_healthy": "healthy", "service_completed_successfully": "completed"}.get(cond, "started")
        if rank[w] > rank[wait[dep]]:
            wait[dep] = w
# Waves: every service of a wave depends only on services of earlier waves.
done, wave = set(), 0
while len(done) < len(services):
    ready = [n for n in services if n not in done and set(deps(services[n])) <= done]
    if not ready:
        sys.exit("compose_order: dependency cycle")
    for n in ready:
        print(wave, n, wait[n])
    done |= set(ready)
    wave += 1
