#!/usr/bin/env python3
"""Builds the fake tree that scan_vs_grep.sh compares spindle-scan and grep on.

usage: make_tree.py DIR   (DIR must exist and be empty)

Deterministic (fixed seed). Holds nested and deep directories, empty files and
an empty directory, binary files with NUL bytes, a file without a final
newline, lines longer than 1 MiB, CRLF text, many small files, a FIFO, a UNIX
socket, symlinks (to a directory, to a file, a loop, a dangling one) that grep
-r does not follow, and file names that are not UTF-8.
"""
import os
import random
import socket
import sys

WORDS = [
    "foo", "bar", "baz", "hello world", "Hello", "HELLO", "word", "words", "sword",
    "abc", "xyz", "123", "4567", "end", "abcde", "cdcde", "q", "Quit", "a\tb", "x=1;",
    "int", "struct", "aa", "bb", "ABBA", "F00", "#define", "café", "naïve", "  ",
]


def text(rng, lines, crlf=False, final_newline=True):
    out = []
    for _ in range(lines):
        n = rng.choice([0, 1, 2, 3, 5, 8, 12])
        out.append(" ".join(rng.choice(WORDS) for _ in range(n)))
    eol = "\r\n" if crlf else "\n"
    body = eol.join(out)
    if final_newline:
        body += eol
    return body.encode("utf-8")


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    root = sys.argv[1]
    rng = random.Random(20240611)
    j = lambda *p: os.path.join(root, *p)

    # Nested source-like tree.
    for a in range(4):
        for b in range(3):
            d = j("src", f"pkg{a}", f"mod{b}")
            os.makedirs(d, exist_ok=True)
            for k in range(6):
                write(os.path.join(d, f"file{k}.txt"), text(rng, rng.randint(0, 60)))
    deep = j("deep")
    for level in range(80):  # deeper than the walker keeps descriptors for (64)
        deep = os.path.join(deep, f"d{level}")
    os.makedirs(deep)
    write(os.path.join(deep, "bottom.txt"), b"foo at the bottom\nend\n")

    # Empty things.
    os.makedirs(j("empty", "nothing_here"))
    for k in range(3):
        write(j("empty", f"empty{k}"), b"")
    write(j("empty", "just_newline"), b"\n")
    write(j("empty", "two_newlines"), b"\n\n")

    # Binary files: NULs everywhere, some text inside.
    os.makedirs(j("bin"))
    for k in range(5):
        blob = bytearray(rng.getrandbits(8) for _ in range(20000 + k * 7777))
        for _ in range(30):
            at = rng.randrange(len(blob) - 20)
            blob[at:at + 8] = rng.choice([b"foo\0bar ", b"a\0b\nabc", b"\0\0\0\0\0\0\0\0", b"hello wo"])
        write(j("bin", f"blob{k}.bin"), bytes(blob))
    write(j("bin", "nul_lines"), b"a\0b\n\0\n\0foo\0\nend")

    # Line endings.
    write(j("nofinal.txt"), b"foo bar\nlast line foo")
    write(j("crlf.txt"), text(rng, 200, crlf=True))
    write(j("crlf_nofinal.txt"), text(rng, 20, crlf=True, final_newline=False))
    write(j("cr_only.txt"), b"foo\rbar\rend\r")

    # Long lines (> 1 MiB), with matches at the start, middle and end.
    os.makedirs(j("long"))
    big = b"x" * (1536 * 1024)
    write(j("long", "one_line.txt"), big + b" foo end")
    write(j("long", "three_lines.txt"),
          b"foo " + big + b"\n" + big[:1200000] + b" word \n" + big + b"hello world\n")
    write(j("long", "long_then_short.txt"), big + b"\n" + text(rng, 500))
    write(j("long", "no_newline_at_all.bin"), bytes(rng.getrandbits(8) | 1 for _ in range(1 << 21)))

    # Many small files.
    os.makedirs(j("many"))
    for k in range(2000):
        write(j("many", f"f{k:04d}"), text(rng, rng.randint(0, 4)))

    # Special files: never opened by either program.
    os.makedirs(j("special"))
    os.mkfifo(j("special", "fifo"))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(j("special", "socket"))
    s.close()
    write(j("special", "regular.txt"), b"foo next to a fifo\n")

    # Symlinks below the command line: grep -r skips them all.
    os.makedirs(j("links"))
    os.symlink("../src", j("links", "dirlink"))
    os.symlink("../crlf.txt", j("links", "filelink"))
    os.symlink("loop", j("links", "loop"))
    os.symlink("nowhere", j("links", "dangling"))
    os.symlink(".", j("links", "self"))

    # Names that are not UTF-8 (and other awkward ones).
    os.makedirs(j("names"))
    for name in [b"\xff\xfe.txt", b"caf\xe9.txt", b"sp ace.txt", b"colon:name.txt", b"-dash",
                 b"\xe2\x82\xac-euro.txt", b".hidden"]:
        write(os.path.join(os.fsencode(j("names")), name), b"foo\nHello world\n")
    os.makedirs(os.path.join(os.fsencode(j("names")), b"dir\xc3"))
    write(os.path.join(os.fsencode(j("names")), b"dir\xc3", b"inner"), b"foo\n")


if __name__ == "__main__":
    main()
