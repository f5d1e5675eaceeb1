"""Checks that every script in src/scripts.rs has the SHA-1 its constant
says: a patch that changes a script must change its SHA-1 too, or every
handshake fails and a regression is "caught" for the wrong reason.

Usage: python3 scripts_sha1.py path/to/src/scripts.rs
"""

import hashlib
import re
import sys


def scripts(source):
    """The text of each `*_SCRIPT` constant, the hand-off macro expanded."""
    macro = re.search(r'macro_rules! handoff \{\s*\(\) => \{\s*r#"(.*?)"#', source, re.S)
    handoff = macro.group(1) if macro else ""
    for m in re.finditer(r"pub const (\w+)_SCRIPT: &str = (.*?);\n", source, re.S):
        pieces = re.finditer(r'handoff!\(\)|r#"(.*?)"#', m.group(2), re.S)
        yield m.group(1), "".join(
            handoff if p.group(0) == "handoff!()" else p.group(1) for p in pieces
        )


def main(path):
    source = open(path, encoding="utf-8").read()
    wrong = 0
    for name, text in scripts(source):
        sha = re.search(r'pub const %s_SHA1: &str = "([0-9a-f]{40})";' % name, source)
        actual = hashlib.sha1(text.encode()).hexdigest()
        if not sha or sha.group(1) != actual:
            print(f"{name}_SHA1 should be {actual}")
            wrong += 1
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
