// spindle/io.hpp: all of spindle's I/O API (namespace spindle::io).
//
// Shape: includes the file API (spindle/io/file.hpp); later directory and
// process APIs join here. Included by the umbrella header spindle/spindle.hpp.
// Design source: docs/design.md "Layout" and "Public contract".
#pragma once

#include "spindle/io/file.hpp"
