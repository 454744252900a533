// spindle-du's parts apart from main(): the command line, the parallel walk
// (a spindle fold over the directory tree) and du's accounting and output,
// so that tests/du can link them on their own.
//
// The walk is a fold over directory nodes: children(dir) opens the
// directory, reads it, records the entries in the directory's record in
// readdir order and emits the subdirectories (known by readdir's d_type);
// the entries' statx (relative to the directory's descriptor,
// AT_SYMLINK_NOFOLLOW: symlinks are not followed) go through spindle's I/O
// driver as one batch per directory (spindle::io::stat_at: io_uring's
// IORING_OP_STATX, or the thread pool), or, with --sync-stat, are direct
// system calls inside children(). Accounting that
// depends on GNU du's traversal order (a hard-linked file is counted at its
// first occurrence, in fts order = readdir order, depth first) is done after
// the fold by one sequential pass over the records, in that order, so that
// the output equals `du -b` byte for byte (lines in du's post-order).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace du {

struct options {
  bool all = false;          ///< -a: a line for files too
  bool summarize = false;    ///< -s: only a total per PATH
  bool count_links = false;  ///< -l: hard links counted every time
  bool json = false;         ///< --json: a JSON array instead of lines
  /// --stat=auto (default): direct statx in the walk while they are fast
  /// (cached inodes), batches through the I/O driver after one is slow (the
  /// disk); sync (--sync-stat): always direct; uring: always batches.
  enum class stat_mode { automatic, sync, uring } stat = stat_mode::automatic;
  std::size_t workers = 0;         ///< -j; 0: all CPUs
  std::vector<std::string> paths;  ///< default "."
};

/// Parses argv into `out`. Returns std::nullopt to go on, or the exit status
/// to stop with: 0 after --help/--version, 1 after a usage error (message
/// already on stderr).
std::optional<int> parse_command_line(int argc, char** argv, options& out);

struct dir_record;

/// One directory entry, in readdir order. Plain files (one link, or -l) not
/// printed with -a are only summed into dir_record::plain_bytes: with
/// --sync-stat they get no entry, otherwise (their statx comes later, in a
/// batch) their entry is marked `skip`.
struct entry {
  std::string name;
  std::uint64_t bytes = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  bool dedup = false;               ///< a hard-linked non-directory
  bool skip = false;                ///< summed into plain_bytes, or its statx failed
  bool stated = false;              ///< bytes/dev/ino filled (the batch skips it)
  std::unique_ptr<dir_record> dir;  ///< set for a subdirectory
};

struct dir_record {
  std::string path;
  std::uint64_t own_bytes = 0;  ///< the directory's st_size
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t plain_bytes = 0;  ///< entries summed without a record
  std::vector<entry> entries;     ///< recorded entries, readdir order
  int read_errno = 0;             ///< opening or reading failed (du: cannot read directory)
  std::vector<std::pair<std::string, int>> access_errors;  ///< statx failures (path, errno)
};

// Writers of a dir_record, by mode. --sync-stat: the fold's children() call
// for the directory writes everything. Otherwise children() writes path,
// entries (names, subdirectory records) and read_errno, and the directory's
// statx batch (a task, io_uring's IORING_OP_STATX through spindle::io::stat_at)
// then fills the entries' sizes and identities, plain_bytes, access_errors
// and the subdirectories' own_bytes/dev/ino: disjoint fields, and the batch
// starts after children() is done with `entries`. Everything is read only
// after the walk and every batch have finished.

/// Runs spindle-du with parsed options; writes to stdout/stderr; returns the
/// exit status (0, or 1 after any error, as du).
int run(options const& opts);

/// du's quoting of a file name in messages (quoteaf: shell-escape-always).
std::string quote(std::string const& name);

}  // namespace du
