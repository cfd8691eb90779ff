#!/usr/bin/env bash
# Redis's instructions per call of claim.lua beside a peer's claim script (bench/peer/
# seckill.lua, the most-copied flash-sale example's shape), counted with callgrind: the
# whole redis-server process, user space, the same count however loaded the machine is.
#
#   bench/external/redis_instructions.sh
#   N=2000 SMALL=0 bench/external/redis_instructions.sh
#
# One private redis-server under callgrind on a free port. The selling scripts are loaded
# as the gateway loads them (lua/guard.lua and this process's run_id in front, shard-router/
# src/guard.rs), each shard vouched for by vouch.lua's "init" and each SKU preheated by
# preheat.lua, as a first preheat does; the peer's stock is one SET, as its voucher's
# creation does. One driver for every script: CLIENTS connections (default 4), each with
# one call in flight, a new user on every call (a 12-byte user, a 15-byte request id).
#
# Rows: the peer; claim.lua (one unit, limit 1) without and with a request id; a reroute
# (the home slice empty, another shard's full) without and with a request id: claim.lua
# placing the hold, then take.lua + settle.lua ("keep") per reroute. Columns:
#   steady state  N calls (default 20 000) on a SKU whose hashes are past their listpack
#                 size (WARM calls first, default 1 000 and at least that size + 1, not
#                 counted)
#   small hashes  SMALL calls (default 2 048, in whole groups, at least one; 0 leaves it
#                 out) in groups of as many users as the server's hash-max-listpack-entries
#                 (512 in Redis 7.0), one fresh SKU each: a shard's first users of a SKU,
#                 whose hashes are listpacks searched linearly
# Each window is framed by two callgrind dumps (server start, loading and preheat fall
# outside); the idle process's instructions per second (a window with no calls: serverCron,
# at --hz 1, and the event loop's timeouts) times the window's length are taken off, so
# what is left is per call. A second table splits each steady-state call by inclusive
# counts of Redis 7.0's functions: the commands the script runs (scriptCall), the Lua
# around them (lua_pcall without those: the script's own code and redis.call's
# conversions), KEYS and ARGV in and the reply out (luaCallFunction without lua_pcall), and
# the rest (reading the request, finding the script, writing the reply, the event loop);
# it is left out when a name is missing from the profile.
#
# CANDIDATE=<lua file> adds two rows: that script with the key layout of bench/external/
# ablation/keyspace_candidate.lua (guarded like claim.lua; CANDIDATE_GUARD=0 leaves the
# guard off), without and with a request id.
#
# REDIS_ARGS are more redis-server arguments (the test suite's short form
# shrinks the listpacks with them). DUMPS=<dir> keeps each window's dump there, for
# callgrind_annotate. Installs valgrind when it is missing.
#
# Results: docs/BENCHMARKS.md, "Redis instructions per call: claim.lua beside a peer's script".
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
  echo "installing valgrind ..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y valgrind >/dev/null
fi
work="$(mktemp -d /tmp/flashgate-redis-instructions.XXXXXX)"
trap 'rm -rf "$work"' EXIT

python3 - "$work" "${N:-20000}" "${SMALL:-2048}" "${WARM:-1000}" "${CLIENTS:-4}" \
  "${IDLE_S:-3}" "${DUMPS:-}" "${REDIS_ARGS:-}" "${CANDIDATE:-}" "${CANDIDATE_GUARD:-1}" <<'PY'
import glob, os, re, socket, subprocess, sys, time

work = sys.argv[1]
n, small, warm, clients = (int(x) for x in sys.argv[2:6])
idle_s = float(sys.argv[6])
dumps, redis_args = sys.argv[7], sys.argv[8].split()
candidate, candidate_guard = sys.argv[9], sys.argv[10] != "0"
TIMEOUT = 300   # s, any one reply or dump (valgrind runs Redis ~50x slower)
# Shards 0 and 1 of 16 (their tags pinned in shard-router/src/placement/tests.rs).
HOME, OTHER = ("fg:0:7", 0), ("fg:1:0", 1)
BIG = 10**12    # a slice that never runs out
NOW = int(time.time() * 1000)
TTL = 86400     # the gateway's request result ttl, s
HOLD_TTL = 30000

def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, args):
        self.s.sendall(resp(args))

    def _fill(self):
        d = self.s.recv(1 << 16)
        if not d:
            raise ConnectionError("redis closed the connection")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line[:1], line[1:]

    def read(self):
        t, rest = self._line()
        if t == b":":
            return int(rest)
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(f"redis: {rest.decode()}")
        if t == b"$":
            k = int(rest)
            if k < 0:
                return None
            while len(self.buf) < k + 2:
                self._fill()
            v, self.buf = self.buf[:k], self.buf[k + 2:]
            return v.decode()
        if t == b"*":
            k = int(rest)
            return None if k < 0 else [self.read() for _ in range(k)]
        raise RuntimeError(f"unexpected reply {t + rest!r}")

    def call(self, *args):
        self.send(args)
        return self.read()

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p

port = free_port()
proc = subprocess.Popen(
    ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/cg.%p", "--dump-instr=no",
     "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
     "--appendonly", "no", "--dir", work,
     # serverCron's work is per second, not per call, and valgrind stretches the seconds:
     # what is left of it is taken off below.
     "--hz", "1", *redis_args],
    stdout=subprocess.DEVNULL, stderr=open(f"{work}/valgrind.log", "w"))

# Where a call's instructions go, by inclusive counts of Redis 7.0's functions: the
# commands the script runs, the Lua around them, KEYS/ARGV in and the reply out.
PARTS = ("scriptCall", "lua_pcall", "luaCallFunction")

def parts_of(f):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", f], capture_output=True,
                         text=True, timeout=TIMEOUT).stdout
    found = {}
    for name in PARTS:
        m = re.search(rf"^\s*([\d,]+) .*:{name} \[", out, re.M)
        if m:
            found[name] = int(m.group(1).replace(",", ""))
    return found if len(found) == len(PARTS) else None

def dump(keep=None):
    """Instructions since the previous dump (each dump starts the count again), and with
    `keep` their parts, the dump kept under that name in DUMPS."""
    before = set(glob.glob(f"{work}/cg.{proc.pid}.*"))
    subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True,
                   timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for f in set(glob.glob(f"{work}/cg.{proc.pid}.*")) - before:
            m = re.search(r"^totals: (\d+)", open(f).read(), re.M)
            if m:
                parts = parts_of(f) if keep else None
                if keep and dumps:
                    os.replace(f, os.path.join(dumps, keep))
                else:
                    os.remove(f)
                return int(m.group(1)), parts
        time.sleep(0.05)
    raise RuntimeError("callgrind wrote no dump")

try:
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            admin = Conn(port)
            admin.call("PING")
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"redis-server under valgrind did not start ({work}/valgrind.log)")
            time.sleep(0.1)
    version = re.search(r"redis_version:(\S+)", admin.call("INFO", "server")).group(1)
    run_id = re.search(r"run_id:([0-9a-f]+)", admin.call("INFO", "server")).group(1)
    lua = lambda name: open(f"lua/{name}.lua").read()
    guarded = lambda name: f"local SERVER = '{run_id}'\n{lua('guard')}{lua(name)}"
    # A shard's first users of a SKU, whose hashes are listpacks (512 in Redis 7.0).
    listpack = int(admin.call("CONFIG", "GET", "hash-max-listpack-entries")[1])
    sha = {s: admin.call("SCRIPT", "LOAD", guarded(s)) for s in ("claim", "take", "settle")}
    sha["peer"] = admin.call("SCRIPT", "LOAD", open("bench/peer/seckill.lua").read())
    if candidate:
        guard = f"local SERVER = '{run_id}'\n{lua('guard')}" if candidate_guard else ""
        sha["candidate"] = admin.call("SCRIPT", "LOAD", guard + open(candidate).read())
    for tag, _ in (HOME, OTHER):
        r = admin.call("EVAL", lua("vouch"), 2, f"{{{tag}}}:vouch", f"{{{tag}}}:claims", "init")
        assert r == [18], f"vouch init on {tag}: {r}"

    key = lambda shard, name, sku: f"{{{shard[0]}}}:{name}:{sku}"
    def req(u):
        tag = HOME[0]
        if not u["rid"]:
            return f"{{{tag}}}:req:-"
        return f"{{{tag}}}:req:{u['sku']}:{len(u['user'])}:{u['user']}:{u['rid']}"

    def preheat(sku, home_slice):
        for shard, units in ((HOME, home_slice), (OTHER, BIG)):
            r = admin.call("EVAL", lua("preheat"), 2, key(shard, "stock", sku),
                           key(shard, "meta", sku), units, 1, 0, NOW + 10**10)
            assert r == [20, units], f"preheat {sku}: {r}"

    # One step of a call: its command, and what a reply must be (kept for the next step).
    def expect(code):
        def took(u, r):
            if (r if isinstance(r, int) else r[0]) != code:
                raise RuntimeError(f"{u['user']}: expected {code}, got {r}")
            u["last"] = r
        return took
    def claim(u):
        h = HOME
        keys = [key(h, "stock", u["sku"]), key(h, "meta", u["sku"]), key(h, "users", u["sku"]),
                key(h, "useq", u["sku"]), key(h, "holds", u["sku"]), f"{{{h[0]}}}:claims"]
        argv = [u["sku"], u["user"], 1, NOW, h[1], HOLD_TTL]
        if u["rid"]:
            keys.append(req(u))
            argv += [u["rid"], TTL]
        return ["EVALSHA", sha["claim"], len(keys), *keys, *argv]
    def candidate_claim(u):
        h = HOME
        keys = [key(h, "meta", u["sku"]), key(h, "users", u["sku"]), key(h, "holds", u["sku"]),
                f"{{{h[0]}}}:claims"]
        argv = [u["sku"], u["user"], 1, NOW, h[1], HOLD_TTL, -1, 2**32 + 1]
        if u["rid"]:
            keys.append(req(u))
            argv += [u["rid"], TTL]
        return ["EVALSHA", sha["candidate"], len(keys), *keys, *argv]
    def candidate_preheat(sku):
        admin.call("HSET", key(HOME, "meta", sku), "stock", BIG, "limit", 1, "start", 0,
                   "end", NOW + 10**10)
    def take(u):
        o, seq, gen = OTHER, u["last"][1], u["last"][3]
        u["seq"] = seq
        return ["EVALSHA", sha["take"], 3, key(o, "stock", u["sku"]), key(o, "meta", u["sku"]),
                f"{{{o[0]}}}:claims", u["sku"], u["user"], 1, NOW, seq, HOME[1], u["rid"],
                o[1], NOW + 10**10, gen]
    def settle(u):
        h = HOME
        return ["EVALSHA", sha["settle"], 4, key(h, "users", u["sku"]), key(h, "holds", u["sku"]),
                req(u), key(h, "meta", u["sku"]), u["user"], u["seq"], "keep", u["rid"],
                f"{u['last'][1]}|{OTHER[1]}|1", TTL, ""]
    def peer(u):
        return ["EVALSHA", sha["peer"], 3, f"{{{HOME[0]}}}:seckill:stock:{u['sku']}",
                f"{{{HOME[0]}}}:seckill:buyers:{u['sku']}", f"{{{HOME[0]}}}:seckill:orders",
                u["sku"], u["user"], 7 * 10**18 + u["i"]]

    def prepare_peer(sku):
        assert admin.call("SET", f"{{{HOME[0]}}}:seckill:stock:{sku}", BIG) == "OK"
    # label, preheat of a fresh SKU, request id?, windows: (label, steps), measured apart.
    rows = [
        ("peer (bench/peer/seckill.lua)", prepare_peer, False,
         [("", [(peer, expect(0))])]),
        ("claim.lua, no request id", lambda s: preheat(s, BIG), False,
         [("", [(claim, expect(1))])]),
        ("claim.lua, request id", lambda s: preheat(s, BIG), True,
         [("", [(claim, expect(1))])]),
    ]
    for rid in (False, True) if candidate else ():
        with_rid = "request id" if rid else "no request id"
        rows.append((f"candidate ({os.path.basename(candidate)}), {with_rid}",
                     candidate_preheat, rid, [("", [(candidate_claim, expect(1))])]))
    for rid in (False, True):
        with_rid = "request id" if rid else "no request id"
        rows.append((f"reroute, {with_rid}", lambda s: preheat(s, 0), rid,
                     [(": claim.lua placing the hold", [(claim, expect(3))]),
                      (": take.lua + settle.lua", [(take, expect(1)), (settle, expect(30))])]))

    conns = [Conn(port) for _ in range(clients)]
    counter = [0]
    def users(skus, per_sku, rid):
        out = []
        for sku in skus:
            for _ in range(per_sku):
                counter[0] += 1
                i = counter[0]
                out.append({"i": i, "sku": sku, "user": "u%011d" % i,
                            "rid": "r%014d" % i if rid else ""})
        return out
    def drive(us, steps):
        for at in range(0, len(us), clients):
            chunk = us[at:at + clients]
            for cmd, took in steps:
                for c, u in zip(conns, chunk):
                    c.send(cmd(u))
                for c, u in zip(conns, chunk):
                    took(u, c.read())

    # The idle process's cost per second, taken off every window for its length.
    dump()
    t0 = time.monotonic()
    time.sleep(idle_s)
    idle_rate = dump()[0] / (time.monotonic() - t0)

    def measure(us, steps, name):
        dump()
        t0 = time.monotonic()
        drive(us, steps)
        (total, parts), secs = dump(re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")), time.monotonic() - t0
        per_call = (total - idle_rate * secs) / len(us)
        if parts:
            parts = {k: v / len(us) for k, v in parts.items()}
            parts["rest"] = per_call - parts["luaCallFunction"]
        return per_call, parts

    next_sku = [1000]
    def fresh(prepare, k):
        skus = list(range(next_sku[0], next_sku[0] + k))
        next_sku[0] += k
        for s in skus:
            prepare(s)
        return skus

    results, breakdown = [], []
    for label, prepare, rid, windows in rows:
        figures = {}
        if n > 0:
            skus = fresh(prepare, 1)
            drive(users(skus, max(warm, listpack + 1), rid), [s for _, steps in windows for s in steps])
            us = users(skus, n, rid)
            figures["steady"] = [measure(us, steps, f"{label}{sfx} steady") for sfx, steps in windows]
            for w, (sfx, _) in enumerate(windows):
                breakdown.append((label + sfx, figures["steady"][w][1]))
        if small > 0:
            skus = fresh(prepare, max(1, small // listpack))
            us = users(skus, listpack, rid)
            figures["small"] = [measure(us, steps, f"{label}{sfx} small") for sfx, steps in windows]
        for w, (suffix, _) in enumerate(windows):
            results.append((label + suffix, {k: v[w][0] for k, v in figures.items()}))
    for c in conns + [admin]:
        c.s.close()
finally:
    proc.terminate()
    proc.wait(timeout=TIMEOUT)

peer = results[0][1]
regimes = [r for r in ("steady", "small") if r in peer]
names = {"steady": f"steady state ({n} calls)",
         "small": f"first {listpack} users per shard ({max(1, small // listpack) * listpack} calls)"}
print(f"redis {version} under callgrind, {clients} clients; "
      f"idle {idle_rate / 1e3:.1f}k instructions/s taken off")
print()
print("| script | " + " | ".join(f"{names[r]}: k instructions per call | × peer" for r in regimes) + " |")
print("| --- |" + " ---: | ---: |" * len(regimes))
for label, f in results:
    print(f"| {label} | " + " | ".join(f"{f[r] / 1e3:.1f}k | {f[r] / peer[r]:.2f}" for r in regimes) + " |")
if breakdown and all(p for _, p in breakdown):
    print()
    print("| steady state, k instructions per call | commands the script runs | the Lua around "
          "them | KEYS, ARGV and the reply | request, script lookup and event loop |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, p in breakdown:
        cells = (p["scriptCall"], p["lua_pcall"] - p["scriptCall"],
                 p["luaCallFunction"] - p["lua_pcall"], p["rest"])
        print(f"| {label} | " + " | ".join(f"{c / 1e3:.1f}k" for c in cells) + " |")
PY
