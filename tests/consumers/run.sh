#!/usr/bin/env bash
# Builds and runs the three consumer projects against spindle (TAP; Meson
# runs it as the test `consumers` of the `dist` setup, see meson.build here):
#   1. `meson install --destdir` of BUILD_DIR into a scratch directory: the
#      headers, libspindle, spindle.pc and the CMake package are there, and
#      no installed text file names the source or build directory;
#   2. meson/  a Meson project with subprojects/spindle.wrap, whose
#      subprojects/spindle is made a symbolic link to SOURCE_DIR (no network);
#      its own `meson install` installs nothing of spindle;
#   3. cmake/  find_package(spindle CONFIG REQUIRED) from the install;
#   4. make/   a Makefile with `pkg-config --cflags --libs spindle`.
# Each program spawns a task that reads a file, awaits it and checks the size.
#
# Usage: run.sh SOURCE_DIR BUILD_DIR [SCRATCH_DIR]
# SCRATCH_DIR (default: a mktemp directory, removed at exit) is emptied first.
set -uo pipefail
source "$(dirname "$0")/../scan/tap.sh"

src=$(realpath "${1:?usage: run.sh SOURCE_DIR BUILD_DIR [SCRATCH_DIR]}")
build=$(realpath "${2:?usage: run.sh SOURCE_DIR BUILD_DIR [SCRATCH_DIR]}")
if [ $# -ge 3 ]; then
  work=$3
  rm -rf "$work"
  mkdir -p "$work"
  work=$(realpath "$work")
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
log=$work/log
cxx=${CXX:-c++}
# Meson runs tests with its own environment: nothing of a user's install may
# leak in.
unset PKG_CONFIG_PATH CMAKE_PREFIX_PATH LD_LIBRARY_PATH

# run NAME CMD...: runs CMD with its output in $log; on failure, its tail.
run() {
  local name=$1
  shift
  if "$@" >"$log" 2>&1; then
    return 0
  fi
  note "$name failed: $*"
  tail -n 40 "$log" | sed 's/^/#   /'
  return 1
}

# The file the consumers read: this script, whose size is known.
input=$src/tests/consumers/run.sh

# ------------------------------------------------------------ 1. install
dest=$work/dest
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
libdir=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
root=$dest$prefix
if ! run "meson install" meson install -C "$build" --destdir "$dest" --no-rebuild; then
  ko "meson install --destdir"
  bail "nothing to build the consumers against"
fi
missing=()
for f in "$root/include/spindle/spindle.hpp" "$root/include/spindle/version.hpp" \
  "$root/include/spindle/net.hpp" "$root/include/spindle/io/file.hpp" \
  "$root/include/spindle/detail/task_header.hpp" "$dest$libdir/libspindle.so" \
  "$dest$libdir/pkgconfig/spindle.pc" "$dest$libdir/cmake/spindle/spindleConfig.cmake" \
  "$dest$libdir/cmake/spindle/spindleConfigVersion.cmake"; do
  [ -e "$f" ] || missing+=("${f#"$dest"}")
done
if [ ${#missing[@]} -eq 0 ]; then
  ok "meson install --destdir: headers, libspindle.so, spindle.pc, CMake package"
else
  ko "meson install --destdir: missing ${missing[*]}"
fi
# Every public header compiles on its own from the installed tree (one
# compiler per core).
export cxx root
bad=$(cd "$root/include" && printf "%s\n" spindle/*.hpp spindle/io/*.hpp |
  xargs -P "$(nproc)" -I{} sh -c 'echo "#include <{}>" | "$cxx" -std=c++20 -fsyntax-only \
    -Wall -Wextra -Werror -I"$root/include" -x c++ - >/dev/null 2>&1 || echo {}')
if [ -z "$bad" ]; then
  ok "every installed public header compiles alone"
else
  ko "installed headers that do not compile alone:" $bad
fi
leaks=$(grep -rlF -e "$src" -e "$build" "$dest" --include='*.hpp' --include='*.pc' \
  --include='*.cmake' 2>/dev/null)
if [ -z "$leaks" ]; then
  ok "no installed header, .pc or .cmake file names the source or build directory"
else
  ko "installed files naming this machine's paths: $leaks"
fi

# Copies of the consumer projects (their build trees and the subproject link
# stay out of the source tree).
cp -r "$src/tests/consumers/common" "$src/tests/consumers/meson" \
  "$src/tests/consumers/cmake" "$src/tests/consumers/make" "$work/"

# ------------------------------------------------------------ 2. Meson wrap
ln -s "$src" "$work/meson/subprojects/spindle"
if run "meson consumer" env CXX="$cxx" meson setup "$work/meson-build" "$work/meson" \
    --force-fallback-for=spindle -Dbuildtype=release &&
  run "meson consumer" ninja -C "$work/meson-build" &&
  run "meson consumer" "$work/meson-build/consumer" "$input"; then
  ok "Meson project through subprojects/spindle.wrap: $(head -n1 "$log")"
else
  ko "Meson project through subprojects/spindle.wrap"
fi
if run "meson consumer install" meson install -C "$work/meson-build" --destdir "$work/meson-dest" \
    --no-rebuild && [ -z "$(find "$work/meson-dest" -type f 2>/dev/null)" ]; then
  ok "spindle as a subproject installs nothing"
else
  ko "spindle as a subproject installed: $(find "$work/meson-dest" -type f 2>/dev/null | head)"
fi

# ------------------------------------------------------------ 3. CMake
if run "cmake consumer" cmake -S "$work/cmake" -B "$work/cmake-build" -G Ninja \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$root" &&
  run "cmake consumer" cmake --build "$work/cmake-build" &&
  run "cmake consumer" env LD_LIBRARY_PATH="$dest$libdir" "$work/cmake-build/consumer" "$input"; then
  ok "CMake project through find_package(spindle 0.1 CONFIG REQUIRED): $(head -n1 "$log")"
else
  ko "CMake project through find_package(spindle CONFIG REQUIRED)"
fi
# spindle::spindle passes -foptimize-sibling-calls on (GCC and clang).
if grep -q -e '-foptimize-sibling-calls' "$work/cmake-build/build.ninja" 2>/dev/null; then
  ok "spindle::spindle compiles the consumer with -foptimize-sibling-calls"
else
  ko "spindle::spindle does not pass -foptimize-sibling-calls"
fi
# The version file refuses another minor release before 1.0.
mkdir -p "$work/cmake-version"
cat >"$work/cmake-version/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(spindle_version_check LANGUAGES NONE)
find_package(spindle 0.99 CONFIG QUIET)
if(spindle_FOUND)
  message(FATAL_ERROR "find_package(spindle 0.99) accepted spindle ${spindle_VERSION}")
endif()
CMAKE
if run "cmake version" cmake -S "$work/cmake-version" -B "$work/cmake-version/build" \
    -DCMAKE_PREFIX_PATH="$root"; then
  ok "find_package(spindle 0.99) does not accept $(grep -m1 -o 'PACKAGE_VERSION "[^"]*' \
    "$dest$libdir/cmake/spindle/spindleConfigVersion.cmake" | cut -d'"' -f2)"
else
  ko "find_package(spindle 0.99) accepted this version"
fi

# ------------------------------------------------------------ 4. Makefile
export PKG_CONFIG_PATH=$dest$libdir/pkgconfig
# The .pc names the real prefix; under --destdir it is redefined.
pc="pkg-config --define-variable=prefix=$root"
if run "pkg-config" $pc --exists --print-errors spindle &&
  run "pkg-config" $pc --static --libs spindle &&
  run "make consumer" make -C "$work/make" CXX="$cxx" PKG_CONFIG="$pc" &&
  run "make consumer" env LD_LIBRARY_PATH="$dest$libdir" "$work/make/consumer" "$input"; then
  ok "Makefile through pkg-config --cflags --libs spindle: $(head -n1 "$log")"
else
  ko "Makefile through pkg-config --cflags --libs spindle"
fi
if cflags=$($pc --cflags spindle) && [[ " $cflags " == *" -foptimize-sibling-calls "* ]]; then
  ok "pkg-config --cflags spindle has -foptimize-sibling-calls"
else
  ko "pkg-config --cflags spindle lacks -foptimize-sibling-calls: ${cflags:-}"
fi
unset PKG_CONFIG_PATH
# A missing file is an error message, not an abort.
if LD_LIBRARY_PATH="$dest$libdir" "$work/make/consumer" "$work/no-such-file" >"$log" 2>&1; then
  ko "consumer of a missing file exited 0"
elif [ $? -eq 1 ] && grep -q 'No such file' "$log"; then
  ok "consumer of a missing file: $(head -n1 "$log")"
else
  ko "consumer of a missing file: $(head -n3 "$log")"
fi

tap_end
