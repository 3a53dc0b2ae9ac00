#!/usr/bin/env python3
"""l4load.py: the TCP client and backend that scripts/l4peers.sh measures proxies with.

  l4load.py echo PORT            a backend: echoes what it reads (asyncio, loopback only)
  l4load.py rate PORT N C        N short connections, C at a time: connect, send 100 bytes,
                                 read the 100 echoed back, close; prints "ok FAILED"
  l4load.py idle PORT N          opens N connections, one echoed byte on each, then holds them
                                 until stdin closes; prints "held N" once they are all open
"""
import asyncio
import socket
import sys
import threading

PAYLOAD = b"x" * 100


async def echo(port):
    async def handle(r, w):
        try:
            while True:
                b = await r.read(65536)
                if not b:
                    break
                w.write(b)
                await w.drain()
        except OSError:
            pass
        finally:
            w.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096, reuse_address=True)
    async with srv:
        await srv.serve_forever()


def rate(port, n, c):
    lock = threading.Lock()
    state = {"left": n, "ok": 0, "failed": 0}

    def worker():
        while True:
            with lock:
                if state["left"] == 0:
                    return
                state["left"] -= 1
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(PAYLOAD)
                got = b""
                while len(got) < len(PAYLOAD):
                    b = s.recv(4096)
                    if not b:
                        break
                    got += b
                s.close()
                good = got == PAYLOAD
            except OSError:
                good = False
            with lock:
                state["ok" if good else "failed"] += 1

    ts = [threading.Thread(target=worker) for _ in range(c)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(state["ok"], state["failed"])


def idle(port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"!")
        if s.recv(1) != b"!":
            raise SystemExit("no echo")
        socks.append(s)
    print("held", len(socks), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "echo":
        asyncio.run(echo(port))
    elif cmd == "rate":
        rate(port, int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "idle":
        idle(port, int(sys.argv[3]))
    else:
        raise SystemExit(__doc__)
