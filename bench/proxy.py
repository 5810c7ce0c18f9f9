"""Throughput and per-connection cost of the host-rule proxy (sbxc.runtime.proxy), side by
side with direct connections, in one run.

    .venv/bin/python bench/proxy.py [--mb 200] [--rounds 5] [--conns 300] [--exec-runs 30]
        [--sbxc PATH] [--against SBXC] [--exec-only]

It starts its own loopback servers in a forked process (so the server, the proxy and the
client each have a process, as in a real run): a bulk server that sends the requested
number of bytes, and a ping server that answers one byte and closes. Then, alternating so
that drift hits every variant alike:

- download: the bytes read by one client, direct and through the proxy (HTTP CONNECT)
  with the poll loop's copy relay (the default) and splice relay, and with the tunnel's
  blocking splice, one thread per direction (``proxy_relay.TUNNEL``); median MB/s, the ratio to
  direct, the CPU time of the whole machine per GB (from /proc/stat: on a small machine
  the CPU is what limits it, and other people's work lands in it too) and the proxy
  process's own CPU time per GB (from /proc/PID/stat: its threads, its system calls);
- the same download through ``bench/relay.c``, a relay in C that checks nothing (copy and
  splice; compiled here with the machine's ``cc``): the floor any user-space relay has on
  this machine, beside which the proxy's own cost shows; as root also with the kernel
  relaying (a BPF sockmap, no byte through a process). Downloads are timed to their last
  byte;
- new connections: connect, one byte each way, close: direct, through CONNECT and
  through SOCKS5 (address rules), and through CONNECT with a name (resolved with the
  host's getaddrinfo: ``localhost``); median and p90, and the time added to direct;
- with ``--exec-runs N``: a cached ``sbxc exec -- true`` with the network off and with
  host rules, per backend, through the command a user runs after scripts/setup (the
  venv's ``bin/sbxc`` launcher; ``--sbxc`` names another), and with ``--against`` through
  another launcher too (an older checkout's), all in the same rounds.

Nothing leaves the machine: every address is 127.0.0.1, and ``localhost`` is the only
name resolved.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from sbxc.runtime import proxy_relay  # noqa: E402
from sbxc.runtime.proxy import Limits, Proxy  # noqa: E402

CHUNK = 1 << 20


def _bulk_server(lst: socket.socket) -> None:
    block = b"x" * CHUNK
    while True:
        conn, _ = lst.accept()
        if os.fork() == 0:
            lst.close()
            want = int(conn.recv(64).split(b"\n", 1)[0])
            view = memoryview(block)
            while want > 0:
                n = conn.send(view[:min(CHUNK, want)])
                want -= n
            conn.close()
            os._exit(0)
        conn.close()
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def _ping_server(lst: socket.socket) -> None:
    while True:
        conn, _ = lst.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if conn.recv(1):
            conn.sendall(b"p")
        conn.close()


def start_servers():
    bulk = socket.create_server(("127.0.0.1", 0), backlog=64)
    ping = socket.create_server(("127.0.0.1", 0), backlog=512)
    pids = []
    for lst, fn in ((bulk, _bulk_server), (ping, _ping_server)):
        pid = os.fork()
        if pid == 0:
            try:
                fn(lst)
            finally:
                os._exit(0)
        pids.append(pid)
    ports = bulk.getsockname()[1], ping.getsockname()[1]
    bulk.close()
    ping.close()
    return pids, ports


def _connect_via(proxy_addr, how: str, host: str, port: int) -> socket.socket:
    if proxy_addr is None or how == "raw":
        s = socket.create_connection(proxy_addr if how == "raw" else (host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s
    s = socket.create_connection(proxy_addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if how == "connect":
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
    else:
        s.sendall(b"\x05\x01\x00" + b"\x05\x01\x00\x01" + socket.inet_aton(host) + port.to_bytes(2, "big"))
        reply = b""
        while len(reply) < 12:
            reply += s.recv(12 - len(reply))
        assert reply[:2] == b"\x05\x00" and reply[3] == 0, reply
    return s


def download(proxy_addr, port: int, size: int, how: str = "connect") -> float:
    buf = bytearray(CHUNK)
    start = time.perf_counter()
    s = _connect_via(proxy_addr, how, "127.0.0.1", port)
    s.sendall(f"{size}\n".encode())
    got = 0
    elapsed = None
    while True:
        n = s.recv_into(buf)
        if not n:
            break
        got += n
        if got >= size and elapsed is None:
            # Timed to the last byte, not to the end of the stream: how soon a relay
            # closes after its upstream did is not throughput.
            elapsed = time.perf_counter() - start
    s.close()
    assert got == size, (got, size)
    return size / elapsed / 1e6


def ping(proxy_addr, how: str, host: str, port: int) -> float:
    start = time.perf_counter()
    s = _connect_via(proxy_addr, how, host, port)
    s.sendall(b"q")
    assert s.recv(1) == b"p"
    s.close()
    return (time.perf_counter() - start) * 1000


def _busy_seconds() -> float:
    """CPU time of the whole machine (all processes) so far, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def _process_seconds(pid) -> float:
    """CPU time (user + system, all threads) of one process so far, from /proc/PID/stat."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def c_relays(bulk_port: int, folder: str) -> list:
    """The floor of any user-space relay (bench/relay.c, no checks at all): compiled with
    the machine's C compiler into ``folder``, one listening process per mode (copy,
    splice). Empty where no compiler is found. (name, address, pid, Popen) each."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("  (no C compiler: the C relay's rows are left out)")
        return []
    exe = os.path.join(folder, "relay")
    subprocess.run([cc, "-O2", "-o", exe, os.path.join(os.path.dirname(os.path.abspath(__file__)), "relay.c")],
                   check=True)
    out = []
    modes = [(0, "C relay (copy)"), (1, "C relay (splice)")]
    if os.geteuid() == 0:
        modes.append((2, "kernel (sockmap)"))  # BPF needs root; its row is missing otherwise
    for mode, name in modes:
        lst = socket.create_server(("127.0.0.1", 0), backlog=16)
        proc = subprocess.Popen([exe, str(lst.fileno()), str(bulk_port), str(mode)], pass_fds=(lst.fileno(),))
        out.append((name, lst.getsockname(), proc.pid, proc))
        lst.close()
    return out


def _proxy(ports, splice: bool, tunnel: str = "poll") -> Proxy:
    proxy_relay.USE_SPLICE = splice  # read by relay() in the forked child
    proxy_relay.TUNNEL = tunnel  # read by tunnel() in the forked child
    rules = [("127.0.0.1", ports, "bench"), ("localhost", ports, "bench")]
    p = Proxy(rules, limits=Limits(max_connections=512))
    p.start()
    return p


def exec_startup(runs: int, sbxc: str, against: str = "") -> None:
    """Median wall time of a cached `sbxc exec -- true`, network off against host rules
    (a ``.invalid`` host: nothing is contacted), per backend, runs interleaved, through the
    launcher ``sbxc``; with ``against``, the same cases through that launcher as well, in
    the same rounds (so the load hits both alike)."""
    import subprocess
    import tempfile

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import startup

    trees = {"this": startup.installed_command(sbxc)}
    if against:
        trees["other"] = startup.installed_command(against)
    with tempfile.TemporaryDirectory() as d:
        cases = {}
        root = os.path.join(d, "root")  # a cache root of its own: nothing goes into the user's
        os.mkdir(root, 0o700)
        env = dict(startup.bench_env(), SBXC_ROOT=root)
        for backend in ("bwrap", "landlock"):
            for label, net in (("network off", "false"), ("host rules", "[allow pkgs.example.invalid]")):
                path = os.path.join(d, f"{backend}-{label[0]}.yaml")
                with open(path, "w") as f:
                    f.write(f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: {net}\n")
                for tree, launcher in trees.items():
                    cases[(tree, backend, label)] = [launcher, "exec", "--policy", path, "--", "true"]
        times = {k: [] for k in cases}
        for argv in cases.values():
            # Compile and cache the plan (each launcher its own entry); the warnings once.
            subprocess.run(argv, cwd=d, env=env, check=True)
        for _ in range(runs):
            for k, argv in cases.items():
                t = time.perf_counter()
                r = subprocess.run(argv, cwd=d, env=env, stderr=subprocess.PIPE)
                times[k].append((time.perf_counter() - t) * 1000)
                if r.returncode != 0:
                    # Kept in the timing (a failed run is a run), and shown: it is a bug.
                    print(f"  run failed ({' / '.join(k)}): status {r.returncode}: "
                          f"{r.stderr.decode(errors='replace').strip()[-300:]}")
    print(f"exec start-up, `sbxc exec -- true`, cached plan, {runs} runs each (ms: median, min)")
    for tree, launcher in trees.items():
        if against:
            print(f" {tree}: {launcher}")
        for backend in ("bwrap", "landlock"):
            off = statistics.median(times[(tree, backend, "network off")])
            for label in ("network off", "host rules"):
                v = times[(tree, backend, label)]
                extra = "" if label == "network off" else f"  +{statistics.median(v) - off:.1f}"
                print(f"  {backend:8} {label:12} {statistics.median(v):7.1f} {min(v):7.1f}{extra}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--conns", type=int, default=300)
    ap.add_argument("--exec-runs", type=int, default=0,
                    help="also time `sbxc exec -- true` with the network off and with host rules, "
                         "this many runs each per backend (cached plans)")
    ap.add_argument("--sbxc", default="", help="with --exec-runs: the launcher (default: this venv's bin/sbxc)")
    ap.add_argument("--against", default="", metavar="SBXC",
                    help="with --exec-runs: also time another launcher (an older checkout's bin/sbxc), interleaved")
    ap.add_argument("--exec-only", action="store_true", help="only the start-up timing (--exec-runs)")
    args = ap.parse_args()
    if args.exec_runs:
        exec_startup(args.exec_runs, args.sbxc, args.against)
    if args.exec_only:
        return 0
    pids, (bulk_port, ping_port) = start_servers()
    have_splice = proxy_relay.HAVE_SPLICE
    copying = _proxy((bulk_port, ping_port), False)
    spliced = _proxy((bulk_port, ping_port), True) if have_splice else None
    threaded = _proxy((bulk_port, ping_port), True, "splice-threads") if have_splice else None
    scratch = tempfile.mkdtemp(prefix="sbxc-bench-relay-")
    relays = c_relays(bulk_port, scratch)
    try:
        size = args.mb * 1_000_000
        variants = [("direct", None, None, "connect"),
                    ("proxy (poll, copy)", copying.address, copying._pid, "connect")]
        if spliced is not None:
            variants.append(("proxy (poll, splice)", spliced.address, spliced._pid, "connect"))
            variants.append(("proxy (splice thr.)", threaded.address, threaded._pid, "connect"))
        # The relay's child process (forked per connection) does the work: the machine's
        # column counts it, the process column shows only the listener (about 0).
        variants += [(name, addr, pid, "raw") for name, addr, pid, _ in relays]
        rates = {v[0]: [] for v in variants}
        cpu = {v[0]: [] for v in variants}
        own = {v[0]: [] for v in variants}
        for _ in range(args.rounds):
            for name, addr, pid, how in variants:
                busy0, own0 = _busy_seconds(), _process_seconds(pid)
                rates[name].append(download(addr, bulk_port, size, how))
                cpu[name].append((_busy_seconds() - busy0) / (size / 1e9))
                own[name].append((_process_seconds(pid) - own0) / (size / 1e9))
        direct = statistics.median(rates["direct"])
        print(f"download of {args.mb} MB, {args.rounds} rounds, {os.cpu_count()} CPUs "
              "(median MB/s, ratio to direct, CPU-seconds per GB: machine, proxy process)")
        for name, values in rates.items():
            med = statistics.median(values)
            print(f"  {name:18} {med:9.0f} MB/s  {med / direct:5.2f}  {statistics.median(cpu[name]):5.2f}"
                  f"  {statistics.median(own[name]):5.2f}")

        times = {"direct": [], "CONNECT 127.0.0.1": [], "SOCKS5 127.0.0.1": [], "CONNECT localhost": []}
        for _ in range(args.conns):
            times["direct"].append(ping(None, "", "127.0.0.1", ping_port))
            times["CONNECT 127.0.0.1"].append(ping(copying.address, "connect", "127.0.0.1", ping_port))
            times["SOCKS5 127.0.0.1"].append(ping(copying.address, "socks", "127.0.0.1", ping_port))
            times["CONNECT localhost"].append(ping(copying.address, "connect", "localhost", ping_port))
        base = statistics.median(times["direct"])
        print(f"new connection, one byte each way, {args.conns} each (ms: median, p90, added median)")
        for name, values in times.items():
            values.sort()
            med = statistics.median(values)
            p90 = values[int(len(values) * 0.9)]
            added = "" if name == "direct" else f"  +{med - base:.3f}"
            print(f"  {name:18} {med:7.3f} {p90:7.3f}{added}")
    finally:
        for _, _, _, proc in relays:
            proc.kill()
            proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
        copying.stop()
        for p in (spliced, threaded):
            if p is not None:
                p.stop()
        for pid in pids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
