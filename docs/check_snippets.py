#!/usr/bin/env python3
"""Compiles every ```cpp block of docs/guide.md against spindle (TAP).

Usage: check_snippets.py GUIDE LIBSPINDLE WORKDIR -- CXX [FLAGS...]

The first ```c++ block of GUIDE is the prelude (the includes and using
declarations every snippet assumes); each ```cpp block after it becomes
its own translation unit: the prelude, then the block. Compiler messages
name the guide's lines (GUIDE:LINE) instead of the translation unit's. (No
#line directive: g++ would then take the snippet for a header and warn
-Wsubobject-linkage about coroutine frames holding its lambdas.)
Each is compiled with `CXX FLAGS -c`; a block that defines main() is also
linked with LIBSPINDLE and run (exit 0 expected, 60 s at most). One TAP line
per block. Blocks are compiled in parallel, two at a time (SNIPPET_JOBS).
"""
import concurrent.futures
import os
import re
import subprocess
import sys


def blocks(path):
    """Yields (info string, first line number, text) of each fenced block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        info, start = m.group(1), i + 2
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        yield info, start, "\n".join(lines[i + 1 : j]) + "\n"
        i = j + 1


def section_of(path, line):
    title = ""
    for n, text in enumerate(open(path, encoding="utf-8"), 1):
        if n >= line:
            break
        if text.startswith("## "):
            title = text[3:].strip()
    return title


def check(index, line, text, prelude, args):
    guide, lib, work, cxx = args
    src = os.path.join(work, f"snippet_{index}.cpp")
    obj = src[:-4] + ".o"
    with open(src, "w", encoding="utf-8") as f:
        f.write(prelude)
        f.write(text)
    offset = line - 1 - prelude.count("\n")  # TU line + offset = guide line

    def in_guide(log):
        return re.sub(re.escape(src) + r":(\d+)",
                      lambda m: f"{guide}:{int(m.group(1)) + offset}", log)

    r = subprocess.run(cxx + ["-c", src, "-o", obj], capture_output=True, text=True)
    if r.returncode != 0:
        return False, "does not compile", in_guide(r.stderr)
    if not re.search(r"^int main\(", text, re.M):
        return True, "compiles", ""
    exe = src[:-4]
    libdir = os.path.dirname(os.path.abspath(lib))
    r = subprocess.run(cxx + [obj, lib, f"-Wl,-rpath,{libdir}", "-o", exe],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return False, "does not link", r.stderr
    try:
        r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False, "runs for more than 60 s", ""
    if r.returncode != 0:
        return False, f"exits {r.returncode}", r.stdout + r.stderr
    return True, "compiles, links and runs", ""


def main():
    if "--" not in sys.argv or sys.argv.index("--") != 4:
        sys.exit(__doc__)
    guide, lib, work = sys.argv[1:4]
    cxx = sys.argv[5:]
    os.makedirs(work, exist_ok=True)
    prelude, snippets = None, []
    for info, line, text in blocks(guide):
        if info == "c++" and prelude is None:
            prelude = text
        elif info == "cpp":
            snippets.append((line, text))
    if prelude is None or not snippets:
        print(f"Bail out! {guide}: no ```c++ prelude or no ```cpp block")
        sys.exit(1)
    jobs = int(os.environ.get("SNIPPET_JOBS", "2"))
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(check, i, line, text, prelude, (guide, lib, work, cxx))
                   for i, (line, text) in enumerate(snippets, 1)]
        for i, ((line, _), fut) in enumerate(zip(snippets, futures), 1):
            good, what, log = fut.result()
            where = f"{os.path.basename(guide)}:{line} ({section_of(guide, line)})"
            print(f"{'ok' if good else 'not ok'} {i} - {where}: {what}")
            if not good:
                failed += 1
                for l in log.strip().split("\n")[:40]:
                    print(f"#   {l}")
    print(f"1..{len(snippets)}")
    sys.exit(1 if failed else 0)


main()
