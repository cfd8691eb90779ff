#!/usr/bin/env bash
# Redis CPU per claim record for two shapes of it: nine field/value pairs, and the one
# field the scripts write (shard-router/src/record/v1.rs), the measurement behind that
# choice. For each shape a private redis-server (reniced to -20) on a free port
# gets N records shaped like bench/external/claims.lua's claims (12-byte user, 15-byte
# request id, 13-digit timestamp) through XADD, then a consumer group reads them all with
# XREADGROUP COUNT 26 (the entries per read of docs/BENCHMARKS.md's consumer) and each
# read is acknowledged by XACK, as the consumer's settle does. Both phases are timed by the
# server's process CPU (utime + stime) and by INFO commandstats.
#
#   bench/redis_record_read.sh                 # N = 200 000, 3 reps
#   N=100000 REPS=5 bench/redis_record_read.sh
#   CALLGRIND=1 N=20000 bench/redis_record_read.sh   # user-space instructions instead of
#                                                    # CPU time, the same however loaded
#                                                    # the machine is
#
# Prints per rep and form: µs (or thousands of instructions) per record for the XADDs and
# for the reads with their acks, XREADGROUP's µs per entry from commandstats, and the
# medians. Results: docs/BENCHMARKS.md, "The compact claim record".
set -euo pipefail

N=${N:-200000}
REPS=${REPS:-3}
CALLGRIND=${CALLGRIND:-0}
work=$(mktemp -d /tmp/fg-record-read.XXXXXX)
pid=""
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if [[ $CALLGRIND == 1 ]] && ! command -v callgrind_control >/dev/null; then
  echo "installing valgrind ..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y valgrind >/dev/null
fi

python3 - "$work" "$N" "$REPS" "$CALLGRIND" <<'PY'
import os, re, socket, statistics, subprocess, sys, time

work, n, reps, callgrind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
per_read = 26
key = "{fg:0:1}:claims"

def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

def record(form, i):
    user, rid, ts = "user-%07d" % i, "w1764690000-%03d" % (i % 1000), 1764690000000 + i
    if form == "pairs":
        return ["sku", 1, "user", user, "qty", 1, "seq", 1, "shard", 0, "home", 0,
                "rid", rid, "ts", ts, "gen", 0]
    return ["c1", f"1,1,1,0,0,{ts},0,{len(user)},{user}{rid}"]

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

class Server:
    def __init__(self, tag):
        self.port = free_port()
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", work]
        if callgrind:
            self.out = f"{work}/cg-{tag}"
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}.%p",
                   "--dump-instr=no"] + cmd + ["--hz", "1"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", self.port)).close(); break
            except OSError:
                time.sleep(0.05)
        subprocess.run(["renice", "-n", "-20", "-p", str(self.proc.pid)], capture_output=True)

    def cli(self, *a):
        return subprocess.run(["redis-cli", "-p", str(self.port), *map(str, a)],
                              capture_output=True, text=True).stdout

    def send(self, payload):
        # Pipelined, every reply read back (as the consumer reads them).
        s = socket.create_connection(("127.0.0.1", self.port))
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        while s.recv(1 << 20):
            pass
        s.close()

    def usage(self):
        if not callgrind:
            return cpu(self.proc.pid) * 1e6  # µs
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], capture_output=True)
        time.sleep(0.5)
        total = 0
        for f in os.listdir(work):
            if f.startswith(os.path.basename(self.out) + f".{self.proc.pid}."):
                text = open(os.path.join(work, f)).read()
                m = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
                total += int(m.group(1))
                os.remove(os.path.join(work, f))
        return total / 1e3  # thousands of instructions

    def stat(self, cmd):
        m = re.search(rf"cmdstat_{cmd}:calls=(\d+),usec=(\d+)", self.cli("INFO", "commandstats"))
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    def stop(self):
        self.proc.terminate(); self.proc.wait()

unit = "k instr" if callgrind else "µs"
rows = {"pairs": [], "compact": []}
print(f"| rep | form | XADD, {unit} per record | read + ack, {unit} per record | XREADGROUP µs per entry (commandstats) |")
print("| ---: | --- | ---: | ---: | ---: |")
for rep in range(1, reps + 1):
    for form in ("pairs", "compact"):
        srv = Server(f"{form}-{rep}")
        adds = b"".join(resp("XADD", key, "*", *record(form, i)) for i in range(n))
        srv.cli("XGROUP", "CREATE", key, "g", "$", "MKSTREAM")
        srv.usage()  # under callgrind, a dump that leaves the set-up out of what follows
        t0 = srv.usage()
        srv.send(adds)
        t1 = srv.usage()
        reads = []
        for i in range(n // per_read + 2):
            reads.append(resp("XREADGROUP", "GROUP", "g", "c", "COUNT", per_read, "STREAMS", key, ">"))
        srv.cli("CONFIG", "RESETSTAT")
        t2 = srv.usage()
        # Read everything, then acknowledge by id ranges read back from the pending list.
        srv.send(b"".join(reads))
        t3a = srv.usage()
        ids = srv.cli("XRANGE", key, "-", "+").split()
        ids = [x for x in ids if re.fullmatch(r"\d+-\d+", x)]
        acks = b"".join(resp("XACK", key, "g", *ids[i:i + per_read]) for i in range(0, len(ids), per_read))
        t3 = srv.usage()
        srv.send(acks)
        t4 = srv.usage()
        calls, usec = srv.stat("xreadgroup")
        srv.stop()
        add_cost = (t1 - t0) / n
        read_cost = ((t3a - t2) + (t4 - t3)) / n
        rows[form].append((add_cost, read_cost, usec / n))
        print(f"| {rep} | {form} | {add_cost:.2f} | {read_cost:.2f} | {usec / n:.2f} |", flush=True)
print()
print(f"medians of {reps} ({n} records each):")
for form, r in rows.items():
    med = lambda i: statistics.median(x[i] for x in r)
    print(f"  {form:8} XADD {med(0):.2f} {unit}, read + ack {med(1):.2f} {unit}, XREADGROUP {med(2):.2f} µs per entry")
PY
