"""`localrag serve` with a stderr that takes no writes: a pipe nobody reads, filled to the last byte.  Then N
keep-alive requests in sequence (GET /openapi.json, no database), each given --timeout seconds; then N on a new
connection each; the serve process's thread count after each loop; then SIGTERM: how long serve takes to stop, its
exit code, and the last lines of its stderr once it is read.  --long: the requests are for a path of 299 backslashes
instead (a 404 whose access-log line is ~640 characters: the held lines fill up sooner); --read-first: its stderr
is read again before the SIGTERM; --no-fill: its stderr is read all along (the cost of the log in normal running).
serve runs with its stderr buffered, as an operator's is (not PYTHONUNBUFFERED).

    LOCALRAG_HOME=/tmp/somewhere python bench/serve_stderr.py [localrag.py or its folder] [-n 200] [--timeout 5]
"""
from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))


def fill(fd: int) -> int:
    """Fill the pipe through a non-blocking opening of its own (O_NONBLOCK on fd would be serve's too)."""
    filler, n = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK), 0
    try:
        for size in (4096, 1):
            with contextlib.suppress(BlockingIOError):
                while True:
                    n += os.write(filler, b"." * size)
    finally:
        os.close(filler)
    return n


def run(conns: str, port: int, n: int, timeout: float, path: str) -> tuple[list[float], int]:
    """n GET /openapi.json on one connection (keep-alive) or a new one each; the seconds each took, and how many
    timed out (keep-alive stops at the first: its connection is gone)."""
    took, failed = [], 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    for _ in range(n):
        if conns == "new":
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        started = time.perf_counter()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            took.append(time.perf_counter() - started)
        except (OSError, http.client.HTTPException):
            failed += 1
            if conns == "keep-alive":
                failed += n - len(took) - 1   # the rest are not sent
                break
        finally:
            if conns == "new":
                conn.close()
    conn.close()
    return took, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--long", action="store_true")
    parser.add_argument("--read-first", action="store_true")
    parser.add_argument("--no-fill", action="store_true")
    args = parser.parse_args()
    folder = Path(args.module)
    folder = folder.parent if folder.suffix == ".py" else folder
    read_end, write_end = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, "-m", "localrag", "serve", "--port", "0", "--no-warm"],
                            stdout=subprocess.DEVNULL, stderr=write_end, env=dict(env, PYTHONPATH=str(folder)),
                            cwd=str(folder))   # -m finds the module in the working folder first
    drained: list[bytes] = []
    try:
        said, deadline = b"", time.monotonic() + 60
        while not (ready := re.search(rb"serving on http://127\.0\.0\.1:(\d+)", said)):
            assert proc.poll() is None and time.monotonic() < deadline, said
            if select.select([read_end], [], [], 0.5)[0]:
                said += os.read(read_end, 4096)
        port = int(ready.group(1))
        if args.no_fill:
            def drain() -> None:
                with contextlib.suppress(OSError):
                    while chunk := os.read(read_end, 1 << 16):
                        drained.append(chunk)
            threading.Thread(target=drain, daemon=True).start()
            print(f"{folder}: serve pid {proc.pid}, {threads(proc.pid)} threads at start; stderr read all along")
        else:
            print(f"{folder}: serve pid {proc.pid}, {threads(proc.pid)} threads at start; "
                  f"stderr pipe filled with {fill(write_end)} bytes")
        for conns in ("keep-alive", "new"):
            took, failed = run(conns, port, args.n, args.timeout, "/" + "\\" * 299 if args.long else "/openapi.json")
            time.sleep(0.5)
            ms = sorted(t * 1000 for t in took)
            print(f"  {args.n} requests, {conns}: {len(took)} answered, {failed} timed out or not sent"
                  + (f"; median {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms" if ms else "")
                  + f"; serve has {threads(proc.pid)} threads")
        tail = b""
        if args.read_first and not args.no_fill:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                if select.select([read_end], [], [], 0.2)[0]:
                    tail += os.read(read_end, 1 << 16)
            print(f"  stderr read for 3 s: {len(tail)} bytes (the filling included)")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
            print(f"  SIGTERM: stopped in {time.monotonic() - started:.2f} s, exit code {code}")
        except subprocess.TimeoutExpired:
            print(f"  SIGTERM: still running after 30 s ({threads(proc.pid)} threads); reading its stderr")
        deadline = time.monotonic() + (0 if args.no_fill else 10)
        while time.monotonic() < deadline:   # read it now: what serve still writes comes out
            if select.select([read_end], [], [], 0.5)[0]:
                tail += os.read(read_end, 1 << 16)
            elif proc.poll() is not None:
                break
        if proc.poll() is None:
            proc.kill()
            print(f"  killed; exit code {proc.wait(10)}")
        elif "code" not in locals():
            print(f"  stopped once its stderr was read, exit code {proc.returncode}")
        if args.no_fill:
            proc.wait(30)
            time.sleep(0.5)
            tail = b"".join(drained)
        lines = tail.lstrip(b".").decode("utf-8", "replace").splitlines()
        print(f"  stderr once read: {len(lines)} lines; the last ones:")
        for line in lines[-3:]:
            print(f"    {line[:110]}{'...' if len(line) > 110 else ''}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(read_end)
        os.close(write_end)
    return 0


if __name__ == "__main__":
    sys.exit(main())
