#!/usr/bin/env python3
"""Writes the seed programs of the `session` fuzz target into seeds/session/.

Each seed is a little program for the harness in src/link/fuzz.rs (see its
module docs): a configuration byte, then steps. Run it from anywhere; it
rewrites the seeds it knows and leaves other files alone.
"""
import os

IDENTIFY, FENCING, GUARD, PASSWORD, DB, WAKE = 1, 2, 4, 8, 16, 128
ACQUIRE, RELEASE, EXTEND, FENCE = 0, 1, 2, 3
EVAL, MANY, FENCED, MUST_REACH = 4, 8, 16, 32
# The pushes the harness crafts (the low four bits of a push's form), and
# the form's flags.
MESSAGE, OTHER, NEAR, PATTERN, SUBSCRIBED, SUBSCRIBED_OTHER = 0, 4, 5, 6, 7, 8
NESTED, SIMPLE, INTEGER, HUGE, EXTRA, ATTRIBUTE, BROKEN = 9, 10, 11, 12, 13, 14, 15
DELAY, LIVE = 16, 32
# The harness's wake channel, for pushes written out in full.
CHANNEL = b"redlock-mio:wake:" + b"%016x" % 0x5EED


def queue(kind, name_len=12, ttl=100):
    return bytes([0, kind, name_len, ttl])


def read(data):
    out = b""
    while data:
        chunk, data = data[:1023], data[1023:]
        out += bytes([1, len(chunk) // 4, len(chunk) % 4]) + chunk
    return out


def handshake(flavour=0, refuse_hello=False, refuse_subscribe=False, wakes=False):
    op = 2 | (8 if refuse_hello else 0) | (16 if refuse_subscribe else 0) | (32 if wakes else 0)
    return bytes([op, flavour])


def push(form, id=0, ms=0, copies=1, chunk=0):
    """A crafted push: `copies` of it, fed `chunk` bytes at a time (0: at once)."""
    return bytes([9, form, id, ms, copies - 1, chunk])


def bulk(data):
    return b"$%d\r\n%s\r\n" % (len(data), data)


def message(channel, payload):
    return b">3\r\n" + bulk(b"message") + bulk(channel) + bulk(payload)


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
    "wake": bytes([WAKE | IDENTIFY]) + handshake(0x12) + queue(ACQUIRE) + write()
    + push(MESSAGE | LIVE) + push(MESSAGE | DELAY | LIVE, ms=30) + push(OTHER, id=7)
    + read(b"+OK\r\n") + push(MESSAGE, id=255, chunk=1)
    + queue(RELEASE) + read(message(CHANNEL, b"9 100")[:20])
    + read(message(CHANNEL, b"9 100")[20:] + b":1\r\n"),
    "wake-held": bytes([WAKE | PASSWORD | DB]) + queue(ACQUIRE) + queue(RELEASE | EVAL)
    + handshake(wakes=True) + write() + read(b"+OK\r\n") + push(MESSAGE | DELAY, id=3, ms=255)
    + read(b":1\r\n"),
    "wake-hello-refused": bytes([WAKE | IDENTIFY | GUARD]) + handshake(0x21, refuse_hello=True)
    + queue(ACQUIRE) + write() + read(b"+OK\r\n") + reconnect()
    + handshake(0x22, refuse_hello=True) + queue(EXTEND) + read(b":1\r\n"),
    "wake-subscribe-refused": bytes([WAKE | FENCING]) + queue(ACQUIRE | FENCED)
    + handshake(refuse_subscribe=True) + write() + read(b":3\r\n")
    + push(MESSAGE | LIVE) + push(SUBSCRIBED),
    "wake-answered-apart": bytes([WAKE]) + read(b"%1\r\n$5\r\nproto\r\n:3\r\n")
    + queue(ACQUIRE) + push(SUBSCRIBED) + push(SUBSCRIBED_OTHER) + handshake(wakes=True)
    + push(MESSAGE | LIVE) + read(b"+OK\r\n"),
    "wake-flood": bytes([WAKE]) + handshake() + queue(ACQUIRE) + push(MESSAGE, id=255, copies=150)
    + read(b"+OK\r\n") + push(MESSAGE, id=255, copies=256, chunk=100),
    "wake-malformed": bytes([WAKE]) + handshake() + queue(ACQUIRE) + queue(RELEASE)
    + b"".join(push(form, id=1, ms=5) for form in range(NEAR, BROKEN))
    + b"".join(push(form | DELAY, id=2, ms=5) for form in [NEAR, HUGE])
    + read(b"+OK\r\n") + read(b":1\r\n") + push(BROKEN) + handshake() + push(BROKEN, id=1)
    + handshake() + push(INTEGER, id=200),
    "wake-raw": bytes([WAKE]) + handshake() + queue(ACQUIRE)
    + read(b"|1\r\n+a\r\n+b\r\n" + message(CHANNEL, b"11") + b">2\r\n$7\r\nmessage\r\n*0\r\n"
           + message(CHANNEL + b"x", b"12") + message(CHANNEL, b"13 x") + b"+OK\r\n"),
    "no-wake-channel": bytes([IDENTIFY]) + handshake(wakes=True) + queue(ACQUIRE)
    + push(MESSAGE | LIVE) + read(message(CHANNEL, b"1") + b"+OK\r\n"),
}


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "session")
    os.makedirs(here, exist_ok=True)
    for name, program in SEEDS.items():
        with open(os.path.join(here, name), "wb") as f:
            f.write(program)


if __name__ == "__main__":
    main()
