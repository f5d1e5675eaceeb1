#!/usr/bin/env python3
"""Writes the seed programs of the `session` fuzz target into seeds/session/.

Each seed is a little program for the harness in src/link/fuzz.rs (see its
module docs): a configuration byte, then steps. Run it from anywhere; it
rewrites the seeds it knows and leaves other files alone.
"""
import os

IDENTIFY, FENCING, GUARD, PASSWORD, DB = 1, 2, 4, 8, 16
ACQUIRE, RELEASE, EXTEND, FENCE = 0, 1, 2, 3
EVAL, MANY, FENCED, MUST_REACH = 4, 8, 16, 32


def queue(kind, name_len=12, ttl=100):
    return bytes([0, kind, name_len, ttl])


def read(data):
    out = b""
    while data:
        chunk, data = data[:1023], data[1023:]
        out += bytes([1, len(chunk) // 4, len(chunk) % 4]) + chunk
    return out


def handshake(flavour=0):
    return bytes([2, flavour])


def advance(ms, coarse=False):
    return bytes([3 | (8 if coarse else 0), ms])


def write(n=0):
    return bytes([4, n])


def end_round(pick=0):
    return bytes([5, pick])


def note_late(ago=10):
    return bytes([6, ago])


def reconnect():
    return bytes([7])


SEEDS = {
    "plain": bytes([0]) + handshake() + write()
    + queue(ACQUIRE) + write() + read(b"+OK\r\n")
    + queue(RELEASE) + write() + read(b":1\r\n")
    + queue(EXTEND) + write() + read(b":1\r\n")
    + queue(ACQUIRE) + read(b"$-1\r\n"),
    "noscript": bytes([0]) + handshake() + queue(RELEASE) + write()
    + read(b"-NOSCRIPT No matching script. Please use EVAL.\r\n") + write()
    + read(b":1\r\n")
    + queue(EXTEND) + end_round() + read(b"-NOSCRIPT No matching script.\r\n"),
    "guarded": bytes([IDENTIFY | GUARD | PASSWORD | DB]) + handshake(0x30)
    + queue(ACQUIRE) + write() + read(b"+OK\r\n") + reconnect() + handshake(0x21)
    + queue(ACQUIRE) + read(b"+OK\r\n"),
    "fenced": bytes([IDENTIFY | FENCING | (3 << 5)]) + handshake(2)
    + queue(ACQUIRE | FENCED) + queue(FENCE) + write()
    + read(b":7\r\n:1\r\n") + queue(ACQUIRE | MANY, 40) + read(b":1\r\n"),
    "lagging": bytes([0]) + handshake() + b"".join(queue(ACQUIRE) for _ in range(60))
    + queue(RELEASE | MUST_REACH) + read(b"+OK\r\n" * 3),
    "garbage": bytes([0]) + handshake() + queue(ACQUIRE) + read(b"\x00\xffgarbage\r\n"),
    "stall": bytes([0]) + handshake() + queue(ACQUIRE) + advance(60, coarse=True)
    + queue(ACQUIRE) + advance(20) + handshake() + queue(RELEASE | EVAL) + read(b":0\r\n"),
    "pushes": bytes([0]) + handshake() + queue(ACQUIRE)
    + read(b">2\r\n+message\r\n+x\r\n|1\r\n+k\r\n+v\r\n+OK\r\n"),
    "replica": bytes([IDENTIFY]) + handshake(64) + queue(ACQUIRE) + handshake(0x80),
    "chunked": bytes([0]) + handshake() + queue(ACQUIRE) + queue(RELEASE)
    + read(b"+O") + read(b"K\r\n:") + read(b"1\r\n"),
    "late": bytes([1 << 5]) + handshake() + queue(ACQUIRE) + end_round() + read(b"+OK\r\n")
    + queue(RELEASE) + note_late(40) + advance(200) + read(b":1\r\n") + advance(250)
    + advance(250),
    "errors": bytes([PASSWORD]) + read(b"-WRONGPASS invalid username-password pair\r\n")
    + handshake() + queue(ACQUIRE) + read(b"-ERR unknown\r\n") + queue(ACQUIRE)
    + read(b"*1\r\n+OK\r\n"),
}


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "session")
    os.makedirs(here, exist_ok=True)
    for name, program in SEEDS.items():
        with open(os.path.join(here, name), "wb") as f:
            f.write(program)


if __name__ == "__main__":
    main()
