#!/usr/bin/env python3
"""Builds the tree that wc_vs_gnu.sh compares spindle-wc and GNU wc on.

usage: make_tree.py DIR   (DIR must exist and be empty)

Deterministic (fixed seed): nested and deep directories, text with LF and
CRLF line ends, files without a final newline, empty files and an empty
directory, random bytes (NUL, controls, bytes >= 0x80), lines longer than
the read buffer, a file larger than several buffers, names with spaces,
quotes, colons and bytes that are not UTF-8, and things find -type f skips
(symlinks, a FIFO, a socket).
"""
import os
import random
import socket
import sys

WORDS = ["foo", "bar", "baz", "hello", "world", "a\tb", "x=1;", "caf\u00e9", "na\u00efve",
         "  ", "\x0b", "\x0c", "\x01ctl", "end.", "#define", "\u00e9t\u00e9", "\x7f"]


def text(rng, lines, crlf=False, final_newline=True):
    out = []
    for _ in range(lines):
        n = rng.choice([0, 1, 2, 3, 5, 8, 13])
        out.append(" ".join(rng.choice(WORDS) for _ in range(n)))
    eol = "\r\n" if crlf else "\n"
    body = eol.join(out)
    if final_newline and out:
        body += eol
    return body.encode("utf-8")


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    root = sys.argv[1]
    rng = random.Random(20250115)
    j = lambda *p: os.path.join(root, *p)

    for a in range(3):
        for b in range(3):
            d = j("src", f"pkg{a}", f"mod{b}")
            os.makedirs(d)
            for k in range(5):
                write(os.path.join(d, f"file{k}.txt"), text(rng, rng.randint(0, 80)))
    write(j("src", "crlf.txt"), text(rng, 50, crlf=True))
    write(j("src", "nofinal.txt"), text(rng, 7, final_newline=False))
    write(j("src", "one_word"), b"word")

    os.makedirs(j("empty", "nothing_here"))
    write(j("empty", "zero"), b"")

    os.makedirs(j("binary"))
    for k in range(6):
        write(j("binary", f"random{k}.bin"), bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 20000))))
    write(j("binary", "nuls"), b"\0" * 5000 + b"a b\0c\n" + b"\0" * 3)
    write(j("binary", "high"), bytes(range(128, 256)) * 40 + b" x\n")
    write(j("binary", "controls"), bytes(range(0, 32)) * 50)

    os.makedirs(j("long"))
    # Lines and words longer than the read buffer (128 KiB and 4 KiB runs).
    write(j("long", "one_line"), b"w" * 300_000 + b"\n")
    write(j("long", "long_words"), b" ".join(b"x" * rng.randint(1, 9000) for _ in range(200)))
    big = bytearray()
    while len(big) < 1_500_000:
        big += text(rng, 200)
    write(j("long", "big.txt"), bytes(big))

    deep = j("deep")
    for level in range(40):
        deep = os.path.join(deep, f"d{level}")
    os.makedirs(deep)
    write(os.path.join(deep, "bottom.txt"), b"at the bottom\n")

    os.makedirs(j("names"))
    for name in [b"with space", b"colon:name", b"it's", b"a'b$c", b"tab\there", b"\xff\xfe-latin1",
                 b"caf\xc3\xa9", b"#hash", b"dash-", b"[bracket]", b"new\nline"]:
        write(os.path.join(j("names").encode(), name), b"some words here\n")

    os.makedirs(j("special"))
    write(j("special", "target.txt"), b"linked\n")
    os.symlink("target.txt", j("special", "link_to_file"))
    os.symlink("../src", j("special", "link_to_dir"))
    os.symlink("nowhere", j("special", "dangling"))
    os.mkfifo(j("special", "fifo"))
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(j("special", "sock"))
    except OSError:
        pass
    finally:
        s.close()


if __name__ == "__main__":
    main()
